"""OS, version, architecture, WSL, cores and memory of this machine."""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping

from ..facts import SystemFacts
from .roots import HostRoots, read_head

_MACHINE_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


def normalise_machine(raw: str) -> str:
    return _MACHINE_ALIASES.get(raw.lower(), raw.lower() or "unknown")


def windows_build_from_version(version: str) -> int | None:
    """'10.0.22631' -> 22631: the build number is what tells Windows 10 from 11."""
    match = re.fullmatch(r"\d+\.\d+\.(\d+)(?:\.\d+)?", version.strip())
    return int(match.group(1)) if match else None


def is_wsl(kernel_release: str, proc_version: str) -> bool:
    text = f"{kernel_release} {proc_version}".lower()
    return "microsoft" in text or "wsl" in text


def _linux_memory_gib(meminfo: str) -> float | None:
    match = re.search(r"^MemTotal:\s+(\d+)\s+kB", meminfo, re.MULTILINE)
    return round(int(match.group(1)) / 1024 / 1024, 1) if match else None


def diffusers_backend(env: Mapping[str, str]) -> str | None:
    """DIFFUSERS_ATTN_BACKEND as set; hostile input: only a backend-like name is kept."""
    value = env.get("DIFFUSERS_ATTN_BACKEND", "").strip()
    if not value:
        return None
    if len(value) <= 60 and re.fullmatch(r"[A-Za-z0-9_\-]+", value):
        return value
    return "(a value that is no backend name)"


def probe_system(roots: HostRoots | None = None,
                 env: Mapping[str, str] | None = None) -> SystemFacts:
    proc = (roots or HostRoots()).proc
    system = platform.system().lower() or "unknown"
    release = platform.release()
    version = platform.version()
    proc_version = ""
    memory: float | None = None
    if system == "linux":
        try:
            proc_version = read_head(proc / "version")
        except OSError:
            proc_version = ""
        try:
            memory = _linux_memory_gib(read_head(proc / "meminfo"))
        except OSError:
            memory = None
    return SystemFacts(
        os=system,
        os_release=release,
        os_version=version,
        windows_build=windows_build_from_version(version) if system == "windows" else None,
        machine=normalise_machine(platform.machine()),
        wsl=system == "linux" and is_wsl(release, proc_version),
        cpu_count=os.cpu_count() or 1,
        memory_gib=memory,
        diffusers_attn_backend=diffusers_backend(os.environ if env is None else env),
    )
