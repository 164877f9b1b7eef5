"""The system area: the OS, its version and architecture."""

from __future__ import annotations

from ...facts import (
    SystemFacts,
)
from ..findings import Finding, finding


def check_system(system: SystemFacts) -> list[Finding]:
    out: list[Finding] = []
    if system.os == "windows":
        eleven = (system.windows_build or 0) >= 22000
        name = "Windows 11" if eleven else f"Windows {system.os_release}"
        label = f"{name} (build {system.windows_build}) {system.machine}"
    elif system.os == "linux":
        label = f"Linux {system.os_release} {system.machine}" + (" (WSL)" if system.wsl else "")
    else:
        label = f"{system.os} {system.os_release} {system.machine}"
    if system.os == "darwin":
        out.append(finding("SD101", "error", f"{label}: macOS has no CUDA", fatal=True))
    elif system.os not in ("linux", "windows"):
        out.append(finding("SD101", "error", f"{label} is not supported", fatal=True))
    elif system.os == "windows" and system.machine != "x86_64":
        out.append(finding("SD101", "error", f"{label}: no SageAttention wheels for Windows on "
                           f"{system.machine}", fatal=True))
    if system.wsl:
        out.append(finding("SD102", "info", label))
    out.insert(0, finding("SD100", "ok", f"{label}, {system.cpu_count} cores"
                          + (f", {system.memory_gib:g} GiB RAM" if system.memory_gib else "")))
    return out
