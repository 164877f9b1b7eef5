"""Where the probes look on this machine: /proc, /sys, PATH, the CUDA default and the Windows
folders. One value passed to every probe, so tests point them at a fake tree instead of the
host's real driver files and tools."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import SettingError

HOST_ROOT_VAR = "SAGEDOCTOR_HOST_ROOT"


@dataclass(frozen=True)
class HostRoots:
    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    path: str = os.defpath  # the PATH that tools are looked up on
    cuda_default: Path = Path("/usr/local/cuda")  # where torch's cpp_extension looks last
    system_root: str = r"C:\Windows"  # Windows: %SystemRoot%
    program_files: str = r"C:\Program Files"  # Windows: %ProgramFiles%
    nvml: bool = True  # ask NVML before nvidia-smi

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HostRoots:
        """The real roots, with PATH and the Windows folders from ``env``.

        SAGEDOCTOR_HOST_ROOT=DIR reads /proc, /sys and /usr/local/cuda under DIR (a mounted
        image, or a test's fake tree); SAGEDOCTOR_SKIP_NVML=1 leaves NVML out.
        """
        base = env.get(HOST_ROOT_VAR, "")
        prefix = Path("/")
        if base:
            prefix = Path(base)
            if not prefix.is_dir():
                raise SettingError(HOST_ROOT_VAR, base, "a folder (it stands for /)")
        return cls(
            proc=prefix / "proc",
            sys=prefix / "sys",
            path=env.get("PATH", os.defpath),
            cuda_default=prefix / "usr" / "local" / "cuda",
            system_root=env.get("SystemRoot") or r"C:\Windows",
            program_files=env.get("ProgramFiles") or r"C:\Program Files",
            nvml=not env.get("SAGEDOCTOR_SKIP_NVML"),
        )


def read_head(path: Path, limit: int = 64 * 1024) -> str:
    """The start of a small host file (/proc, /sys) as text; a huge or binary one cannot hurt."""
    with path.open("rb") as handle:
        return handle.read(limit).decode("utf-8", errors="replace")
