"""The toolchain area: what a source build would need (nvcc, gcc, ninja, the C++ standard)."""

from __future__ import annotations

from packaging.version import Version

from ...facts import (
    GpuFacts,
    TargetFacts,
    ToolchainFacts,
)
from ...index import WheelIndex
from ..findings import Finding, finding
from ..matrix import (
    gpu_label,
    usable_gpus,
)
from ..toolchain import (
    cxx_standard_for,
    cxx_toolchain_problems,
)
from ..versions import (
    parse_version,
    torch_build_of,
)


def check_toolchain(tool: ToolchainFacts, target: TargetFacts | None, gpu: GpuFacts | None,
                    os_name: str, needs_build: bool, index: WheelIndex) -> list[Finding]:
    if os_name == "windows":
        return [finding("SD170", "ok", "not needed: Windows installs use prebuilt wheels")]
    severity = "warn" if needs_build else "info"
    why = " (a source build is needed)" if needs_build else " (needed only to build from source)"
    out = _nvcc_findings(tool, target, gpu, os_name, index, severity, why)
    if tool.cuda_home_rejected:
        from_env = any("(from CUDA_HOME)" in r or "(from CUDA_PATH)" in r
                       for r in tool.cuda_home_rejected)
        using = f"; using {tool.cuda_home}" if tool.cuda_home else ""
        out.append(finding("SD175", "warn" if from_env else "info",
                           "; ".join(tool.cuda_home_rejected) + using))
    if tool.cuda_home is None and tool.nvcc_path is not None:
        out.append(finding("SD176", severity, f"{tool.nvcc_path} runs, but no folder holds "
                           f"bin/nvcc and include/cuda_runtime.h{why}"))
    if tool.gcc_version is None:
        out.append(finding("SD174", severity, f"gcc not found{why}",
                           "Install gcc and g++ from the OS (e.g. `sudo apt install "
                           "build-essential`)."))
    if target is not None and target.torch is not None:
        standard, standard_why = cxx_standard_for(target.torch)
        for problem in cxx_toolchain_problems(standard, tool.gcc_version,
                                                    tool.nvcc_version):
            out.append(finding("SD149", severity, f"C++{standard} ({standard_why}): "
                               f"{problem}{why}"))
    if tool.ninja_version is None:
        out.append(finding("SD174", "info", "ninja not on PATH (a source build installs its "
                           "own into a private folder)", ""))
    parts = [f"nvcc {tool.nvcc_version}" if tool.nvcc_version else "no nvcc",
             f"gcc {tool.gcc_version}" if tool.gcc_version else "no gcc",
             f"ninja {tool.ninja_version}" if tool.ninja_version else "no ninja"]
    home = f" (CUDA_HOME {tool.cuda_home})" if tool.cuda_home else ""
    out.insert(0, finding("SD170", "ok", ", ".join(parts) + home))
    return out


def _nvcc_findings(tool: ToolchainFacts, target: TargetFacts | None, gpu: GpuFacts | None,
                   os_name: str, index: WheelIndex, severity: str, why: str) -> list[Finding]:
    """nvcc missing, too old for a GPU, or of another CUDA major than torch's."""
    if tool.nvcc_path is None or tool.nvcc_version is None:
        return [finding("SD171", severity, "no nvcc under CUDA_HOME, CUDA_PATH, PATH or "
                        f"/usr/local/cuda{why}")]
    out: list[Finding] = []
    nvcc = parse_version(tool.nvcc_version)
    for g in usable_gpus(gpu.nvidia if gpu else (), os_name):
        need = index.min_nvcc_for(g.compute_capability or "")
        if nvcc is not None and nvcc < Version(need):
            out.append(finding("SD172", severity, f"nvcc {tool.nvcc_version} < {need}, "
                               f"needed for {gpu_label(g)}{why}"))
    torch = target.torch if target else None
    if torch is not None and nvcc is not None:
        tb = torch_build_of(torch)
        if tb.cuda_major is not None and tb.cuda_major != nvcc.release[0]:
            out.append(finding("SD173", severity, f"nvcc {tool.nvcc_version} (CUDA "
                               f"{nvcc.release[0]}) vs torch {tb.label} (CUDA {tb.cuda})"
                               f"{why}"))
    return out
