"""The GPU area: which GPUs SageAttention can run on, and whether the driver serves the
target's torch."""

from __future__ import annotations

from ...facts import (
    Gpu,
    GpuFacts,
    TargetFacts,
)
from ..findings import Finding, finding
from ..fixes import (
    torch_fix,
)
from ..matrix import (
    driver_satisfies,
    gpu_label,
    min_driver_for_cuda,
    pick_variant,
    usable_gpus,
)
from ..versions import (
    cc_tuple,
    public_version,
    torch_build_of,
)


def check_gpu(gpu: GpuFacts, os_name: str, target: TargetFacts | None) -> list[Finding]:
    nvidia = gpu.nvidia
    if not nvidia:
        return _no_nvidia(gpu)
    usable = usable_gpus(nvidia, os_name)
    out = [f for g in nvidia if (f := _arch_finding(g, usable, os_name)) is not None]
    listing = "; ".join(
        f"{gpu_label(g)}" + (f", {g.memory_mib // 1024} GiB" if g.memory_mib else "")
        for g in nvidia
    )
    driver = f"driver {gpu.driver_version}" if gpu.driver_version else "driver unknown"
    out.insert(0, finding("SD110", "ok", f"{listing}; {driver} (via {gpu.source})"))
    return out + _driver_findings(gpu, os_name, target)


def _no_nvidia(gpu: GpuFacts) -> list[Finding]:
    others = [g for g in gpu.gpus if g.vendor != "nvidia"]
    notes = "; ".join(gpu.notes)
    if gpu.notes or gpu.source == "proc":
        driver = f"driver {gpu.driver_version} is loaded, but " if gpu.driver_version else ""
        return [finding("SD116", "error", f"{driver}{notes or 'no GPU was listed'}")]
    seen = ", ".join(f"{g.name}" for g in others)
    title = f"No NVIDIA GPU (found {seen})" if others else None
    detail = (f"found {seen}: SageAttention needs an NVIDIA GPU" if others
              else "no NVIDIA GPU or driver found (NVML, nvidia-smi, /proc/driver/nvidia)")
    return [finding("SD111", "error", detail, title=title, fatal=True)]


def _arch_finding(g: Gpu, usable: list[Gpu], os_name: str) -> Finding | None:
    """What this GPU's compute capability means for SageAttention (None: it is served)."""
    cc = cc_tuple(g.compute_capability)
    unused = " (it will not be used)" if usable else ""
    if cc is None:
        return finding("SD115", "warn", f"{gpu_label(g)}: compute capability unknown")
    if cc == (8, 7):
        return finding("SD114", "warn" if usable else "error", f"{gpu_label(g)}{unused}",
                       fatal=not usable)
    if cc == (7, 5):
        if os_name == "windows":
            return finding("SD113", "warn", f"{gpu_label(g)}: Triton kernels only",
                           "Nothing to install for the GPU itself: the Triton finding "
                           "names the triton-windows that serves it with this torch.")
        return finding("SD113", "warn" if usable else "error",
                       f"{gpu_label(g)}: upstream Linux builds reject sm75; "
                       f"SageAttention needs compute capability 8.0 or newer here"
                       f"{unused}", "Use a GPU of compute capability 8.0 or newer "
                       "(RTX 30xx, A100 or newer).", fatal=not usable)
    if cc < (8, 0):
        need = ("8.0 or newer (7.5 through Triton on Windows)" if os_name == "windows"
                else "8.0 or newer")
        return finding("SD112", "warn" if usable else "error",
                       f"{gpu_label(g)} has compute capability {g.compute_capability}; "
                       f"SageAttention needs {need}{unused}", fatal=not usable)
    return None


def _driver_findings(gpu: GpuFacts, os_name: str, target: TargetFacts | None
                     ) -> list[Finding]:
    """Whether the driver runs the CUDA the target's torch was built for."""
    torch = target.torch if target else None
    if torch is None:
        return []
    build = torch_build_of(torch)
    major = build.cuda_major
    if build.kind != "cuda" or major is None:
        return []
    minimum = min_driver_for_cuda(major, os_name)
    if gpu.driver_version is None:
        return [finding("SD121", "warn", f"torch {build.label} needs driver "
                        f"{minimum} or newer; the driver version was not found")]
    if minimum and driver_satisfies(gpu.driver_version, minimum) is False:
        return [finding(
            "SD120", "error",
            f"torch {build.label} is built for CUDA {build.cuda} and needs driver "
            f"{minimum} or newer; you have {gpu.driver_version}",
            _driver_fix(target, gpu, os_name, minimum) if target else None,
        )]
    return []


def driver_majors(driver: str | None, os_name: str) -> set[int] | None:
    """CUDA majors this driver runs (None: the driver version is unknown)."""
    if driver is None:
        return None
    return {major for major in (11, 12, 13)
            if (need := min_driver_for_cuda(major, os_name))
            and driver_satisfies(driver, need)}


def _driver_fix(target: TargetFacts, gpu: GpuFacts, os_name: str, minimum: str) -> str:
    """Update the driver, or the same torch built for a CUDA this driver runs (the matrix's)."""
    assert target.torch is not None
    update = f"Update the NVIDIA driver to {minimum} or newer"
    ccs = [g.compute_capability for g in gpu.nvidia if g.compute_capability]
    variant = pick_variant(target.torch.version, ccs,
                                 driver_majors(gpu.driver_version, os_name))
    public = public_version(target.torch.version) or target.torch.version
    if variant is None:
        return f"{update}: no torch {public} build runs on driver {gpu.driver_version}."
    return (f"{update}, or install torch {public} built for CUDA {variant.cuda}: "
            + torch_fix(target, os_name, f"torch=={public}", variant.index_url, force=True))
