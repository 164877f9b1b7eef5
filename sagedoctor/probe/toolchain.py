"""Build tools for Linux source builds: nvcc (and CUDA_HOME), gcc, ninja."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from ..facts import ToolchainFacts
from ..proc import ToolMissing, ToolTimeout, run_tool
from .roots import HostRoots


def parse_nvcc_version(text: str) -> str | None:
    """'Cuda compilation tools, release 13.0, V13.0.88' -> '13.0.88'."""
    match = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", text)
    if match:
        return match.group(1)
    match = re.search(r"release (\d+\.\d+)", text)
    return match.group(1) if match else None


def parse_gcc_version(text: str) -> str | None:
    first = text.splitlines()[0] if text else ""
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)\s*$", first) or re.search(r"(\d+\.\d+\.\d+)", first)
    return match.group(1) if match else None


def parse_ninja_version(text: str) -> str | None:
    match = re.match(r"\s*(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


def nvcc_candidates(env: Mapping[str, str], exe_suffix: str = "",
                    roots: HostRoots | None = None) -> list[tuple[str | None, Path]]:
    """(cuda_home, nvcc) pairs, CUDA_HOME/CUDA_PATH first, as torch's cpp_extension looks."""
    roots = roots or HostRoots(path=env.get("PATH", os.defpath))
    out: list[tuple[str | None, Path]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if home:
            out.append((home, Path(home, "bin", f"nvcc{exe_suffix}")))
    on_path = shutil.which("nvcc", path=roots.path)
    if on_path:
        out.append((str(Path(on_path).resolve().parent.parent), Path(on_path)))
    out.append((str(roots.cuda_default), roots.cuda_default / "bin" / f"nvcc{exe_suffix}"))
    return out


def _version_of(argv: list[str], parse: object) -> str | None:
    try:
        result = run_tool(argv)
    except (ToolMissing, ToolTimeout):
        return None
    if result.returncode != 0:
        return None
    return parse(result.stdout)  # type: ignore[operator, no-any-return]


def probe_toolchain(os_name: str, roots: HostRoots | None = None,
                    env: Mapping[str, str] | None = None) -> ToolchainFacts:
    env = os.environ if env is None else env
    roots = roots or HostRoots.from_env(env)
    suffix = ".exe" if os_name == "windows" else ""
    cuda_home = nvcc_path = nvcc_version = None
    for home, nvcc in nvcc_candidates(env, suffix, roots):
        if nvcc.is_file():
            nvcc_version = _version_of([str(nvcc), "--version"], parse_nvcc_version)
            cuda_home, nvcc_path = home, str(nvcc)
            break
    gcc = shutil.which("gcc", path=roots.path)
    ninja = shutil.which("ninja", path=roots.path)
    return ToolchainFacts(
        cuda_home=cuda_home,
        nvcc_path=nvcc_path,
        nvcc_version=nvcc_version,
        gcc_version=_version_of([gcc, "--version"], parse_gcc_version) if gcc else None,
        ninja_version=_version_of([ninja, "--version"], parse_ninja_version) if ninja else None,
    )
