"""Build tools for Linux source builds: nvcc (and CUDA_HOME), gcc, ninja."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..facts import ToolchainFacts
from ..proc import ToolMissing, ToolTimeout, run_tool
from .roots import HostRoots


# Versions are ASCII digits ([0-9], not \d: "١٣.٠" is \d but no version a tool prints).
def parse_nvcc_version(text: str) -> str | None:
    """'Cuda compilation tools, release 13.0, V13.0.88' -> '13.0.88'."""
    match = re.search(r"release [0-9]+\.[0-9]+, V([0-9]+\.[0-9]+\.[0-9]+)", text)
    if match:
        return match.group(1)
    match = re.search(r"release ([0-9]+\.[0-9]+)", text)
    return match.group(1) if match else None


def parse_gcc_version(text: str) -> str | None:
    first = text.splitlines()[0] if text else ""
    match = (re.search(r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)\s*$", first)
             or re.search(r"([0-9]+\.[0-9]+\.[0-9]+)", first))
    return match.group(1) if match else None


def parse_ninja_version(text: str) -> str | None:
    match = re.match(r"\s*([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text)
    return match.group(1) if match else None


@dataclass(frozen=True)
class CudaCandidate:
    home: str
    source: str  # "CUDA_HOME" | "CUDA_PATH" | "nvcc on PATH" | "/usr/local/cuda" | ...
    nvcc: str
    has_nvcc: bool
    has_headers: bool  # include/cuda_runtime.h


def cuda_home_candidates(env: Mapping[str, str], os_name: str, nvcc_on_path: Path | None,
                         usr_local: Path, program_files: Path | None) -> list[tuple[Path, str]]:
    """Folders that may be CUDA_HOME, in the order tried; roots are parameters for tests."""
    out: list[tuple[Path, str]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            out.append((Path(env[var]), var))
    if nvcc_on_path is not None:
        # A symlink (/usr/bin/nvcc -> /usr/local/cuda-12.8/bin/nvcc) leads to the toolkit.
        out.append((nvcc_on_path.resolve().parent.parent, "nvcc on PATH"))
    if os_name == "windows":
        if program_files is not None:
            toolkit = program_files / "NVIDIA GPU Computing Toolkit" / "CUDA"
            out += [(p, "Program Files") for p in _newest_first(toolkit, "v")]
    else:
        out.append((usr_local / "cuda", "/usr/local/cuda"))
        out += [(p, "/usr/local/cuda-*") for p in _newest_first(usr_local, "cuda-")]
    return out


def _newest_first(folder: Path, prefix: str) -> list[Path]:
    def key(path: Path) -> tuple[int, ...]:
        digits = re.findall(r"\d+", path.name[len(prefix):])
        return tuple(int(d) for d in digits)

    try:
        found = [p for p in folder.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return []
    return sorted(found, key=key, reverse=True)


def inspect_candidate(home: Path, source: str, exe_suffix: str) -> CudaCandidate:
    nvcc = home / "bin" / f"nvcc{exe_suffix}"
    return CudaCandidate(str(home), source, str(nvcc), nvcc.is_file(),
                         (home / "include" / "cuda_runtime.h").is_file())


def choose_cuda_home(candidates: list[CudaCandidate]) -> tuple[CudaCandidate | None, list[str]]:
    """The first candidate with nvcc and headers, and why each earlier one was passed over.

    Pure. A folder named twice (CUDA_HOME and /usr/local/cuda) is judged once."""
    rejected: list[str] = []
    seen: set[str] = set()
    for cand in candidates:
        if cand.home in seen:
            continue
        seen.add(cand.home)
        if cand.has_nvcc and cand.has_headers:
            return cand, rejected
        missing = [m for m, ok in (("bin/nvcc", cand.has_nvcc),
                                   ("include/cuda_runtime.h", cand.has_headers)) if not ok]
        # A folder that does not exist is only worth naming where the user pointed at it.
        if cand.has_nvcc or cand.has_headers or cand.source in ("CUDA_HOME", "CUDA_PATH",
                                                                 "nvcc on PATH"):
            rejected.append(f"{cand.home} (from {cand.source}): no " + ", no ".join(missing))
    return None, rejected


def _version_of(argv: list[str], parse: object) -> str | None:
    try:
        result = run_tool(argv)
    except (ToolMissing, ToolTimeout):
        return None
    if result.returncode != 0:
        return None
    return parse(result.stdout)  # type: ignore[operator, no-any-return]


def probe_toolchain(os_name: str, roots: HostRoots | None = None,
                    env: Mapping[str, str] | None = None, usr_local: Path | None = None,
                    program_files: Path | None = None) -> ToolchainFacts:
    env = os.environ if env is None else env
    roots = roots or HostRoots.from_env(env)
    usr_local = usr_local or roots.cuda_default.parent
    suffix = ".exe" if os_name == "windows" else ""
    if program_files is None and os_name == "windows":
        program_files = Path(roots.program_files)
    which = shutil.which("nvcc", path=roots.path)
    nvcc_on_path = Path(which) if which else None
    candidates = [inspect_candidate(home, source, suffix) for home, source in
                  cuda_home_candidates(env, os_name, nvcc_on_path, usr_local, program_files)]
    chosen, rejected = choose_cuda_home(candidates)
    # Without a toolkit, still name the nvcc that runs (a wrapper), so the finding can say so.
    nvcc = (chosen.nvcc if chosen else next((c.nvcc for c in candidates if c.has_nvcc),
                                             str(nvcc_on_path) if nvcc_on_path else None))
    nvcc_version = _version_of([nvcc, "--version"], parse_nvcc_version) if nvcc else None
    gcc = shutil.which("gcc", path=roots.path)
    ninja = shutil.which("ninja", path=roots.path)
    return ToolchainFacts(
        cuda_home=chosen.home if chosen else None,
        nvcc_path=nvcc if nvcc_version else None,
        nvcc_version=nvcc_version,
        gcc_version=_version_of([gcc, "--version"], parse_gcc_version) if gcc else None,
        ninja_version=_version_of([ninja, "--version"], parse_ninja_version) if ninja else None,
        cuda_home_rejected=tuple(rejected),
    )
