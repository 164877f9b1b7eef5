"""The PyTorch area: a CUDA torch whose kernels cover these GPUs and that the driver runs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

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
    build_serves,
    gpu_label,
    newest_torch_serving,
    pick_variant,
    usable_gpus,
    variant_of,
)
from ..versions import (
    minor_of,
    parse_version,
    public_version,
    torch_build_of,
)
from .gpu import driver_majors


def torch_kernel_findings(target: TargetFacts, gpus: Iterable[Gpu], os_name: str,
                          all_gpus: Iterable[Gpu] = (), machine: str = "x86_64",
                          nvcc_version: str | None = None) -> list[Finding]:
    """SD144 for each GPU this torch CUDA build has no kernels for, with the one build of the
    same torch (PyTorch's CUDA matrix) that serves them all; `check` and `plan` both ask."""
    torch = target.torch
    if torch is None:
        return []
    build = torch_build_of(torch)
    if build.kind != "cuda":
        return []
    lacking = [g for g in gpus if g.compute_capability
               and not build_serves(build, torch.version, g.compute_capability, machine)]
    if not lacking:
        return []
    fix = _kernel_fix(target, lacking, all_gpus, os_name, machine, nvcc_version)
    variant_now = variant_of(build, torch.version) if machine == "x86_64" else None
    covers = (f" (its kernels: sm{', sm'.join(a.replace('.', '') for a in variant_now.archs)})"
              if variant_now else "")
    return [finding("SD144", "error", f"torch {build.label} (CUDA {build.cuda}){covers} has no "
                    f"kernels for {gpu_label(g)}", fix) for g in lacking]


def _kernel_fix(target: TargetFacts, lacking: list[Gpu], all_gpus: Iterable[Gpu], os_name: str,
                machine: str, nvcc_version: str | None) -> str:
    """The same torch built for a CUDA whose kernels serve these GPUs (and the toolkit a
    source build then needs), else the newest torch that serves them."""
    torch = target.torch
    assert torch is not None
    public = public_version(torch.version) or torch.version
    everyone = [g.compute_capability for g in (*all_gpus, *lacking) if g.compute_capability]
    variant = None if machine != "x86_64" else (
        pick_variant(torch.version, everyone)
        or pick_variant(torch.version, [g.compute_capability or "" for g in lacking]))
    if variant is not None:
        fix = torch_fix(target, os_name, f"torch=={public}", variant.index_url, force=True)
        nvcc = minor_of(nvcc_version) if os_name == "linux" else None
        nvcc_major = nvcc[0] if nvcc else None
        if nvcc_major is not None and nvcc_major != variant.cuda_major:
            # the source build then needs a toolkit of the new torch's CUDA major (SD173)
            fix = (f"Install a CUDA {variant.cuda_major} toolkit for the source build too "
                   f"(nvcc {nvcc_version} is CUDA {nvcc_major}), and: {fix}")
    else:
        newest = newest_torch_serving([g.compute_capability or "" for g in lacking]) \
            if machine == "x86_64" else None
        fix = (f"No torch {public} build has kernels for it; torch {newest[0]} ({newest[1].label})"
               f" is the newest that does: "
               + torch_fix(target, os_name, f"torch=={newest[0]}.*", newest[1].index_url,
                           force=True) if newest else
               "Install a torch build for this GPU (see https://pytorch.org/get-started/), or "
               "use a GPU this torch serves.")
    return fix


def check_torch(target: TargetFacts, gpu: GpuFacts | None, os_name: str,
                machine: str = "x86_64", nvcc_version: str | None = None) -> list[Finding]:
    torch = target.torch
    if torch is None:
        return [finding("SD141", "error", f"no torch in {target.prefix}")]
    build = torch_build_of(torch)
    nvidia = gpu.nvidia if gpu else ()
    out: list[Finding] = []
    public = parse_version(torch.version)
    public_text = public.public if public else torch.version
    if build.kind == "cpu":
        if nvidia:
            ccs = [g.compute_capability for g in nvidia if g.compute_capability]
            variant = (pick_variant(torch.version, ccs, driver_majors(
                gpu.driver_version if gpu else None, os_name)) or pick_variant(
                    torch.version, ccs))
            fix = (torch_fix(target, os_name, f"torch=={public_text}", variant.index_url,
                             force=True) if variant else
                   f"Reinstall a CUDA build of torch {public_text} (sagedoctor does not know "
                   "which CUDA builds that torch has: see https://pytorch.org/get-started/)")
            out.append(finding("SD142", "error", f"torch {build.label} has no CUDA", fix))
    elif build.kind != "cuda":
        out.append(finding("SD143", "error", f"torch {build.label}"))
    if public is not None and public.release[:2] < (2, 4):
        out.append(finding("SD145", "error", f"torch {public_text} is older than 2.4"))
    served = usable_gpus(nvidia, os_name)
    out += torch_kernel_findings(target, [g for g in nvidia if g in served], os_name,
                                 all_gpus=nvidia, machine=machine, nvcc_version=nvcc_version)
    # an ignored GPU (SD112): reinstalling torch for it would gain nothing
    out += [replace(f, severity="info", fix="", detail=f.detail + "; SageAttention does not use "
                    "that GPU, so torch need not change")
            for f in torch_kernel_findings(target, [g for g in nvidia if g not in served],
                                           os_name, machine=machine)]
    cuda = f"CUDA {build.cuda}" if build.cuda else build.kind.upper()
    out.insert(0, finding("SD140", "ok", f"torch {build.label} ({cuda})"))
    return out
