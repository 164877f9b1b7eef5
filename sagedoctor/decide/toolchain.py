"""What a source build needs of the toolchain: the C++ standard of torch's headers, the gcc
and nvcc that compile it, and how many jobs the machine can run at once. Pure."""

from __future__ import annotations

from packaging.version import Version

from ..facts import TorchFacts
from .versions import parse_version


def cxx_standard_for(torch: TorchFacts) -> tuple[int, str]:
    """The C++ standard an extension for this torch must be built with, and why: the guard in
    its ATen.h where the probe read it, else the torch version (2.14 made C++20 mandatory)."""
    version = parse_version(torch.version)
    label = ".".join(map(str, version.release[:2])) if version else torch.version
    if torch.cxx_standard is not None:
        return torch.cxx_standard, f"torch {label} requires it; read from its ATen.h"
    if version is not None and version.release[:2] >= (2, 14):
        return 20, f"torch {label} requires it"
    return 17, f"torch {label} builds with it"


# gcc accepts -std=c++20 since 10; nvcc since CUDA 12.0 (C++20 dialect support).
MIN_GCC_FOR = {20: "10", 17: "7"}


MIN_NVCC_FOR = {20: "12.0", 17: "11.0"}


def cxx_toolchain_problems(standard: int, gcc: str | None, nvcc: str | None) -> list[str]:
    """What stops a C++`standard` build with these compilers (nothing known: no complaint)."""
    out = []
    for name, have, need in (("gcc", gcc, MIN_GCC_FOR.get(standard)),
                             ("nvcc", nvcc, MIN_NVCC_FOR.get(standard))):
        version = parse_version(have)
        if need and version is not None and version < Version(need):
            out.append(f"{name} {have} cannot compile C++{standard} (needs {name} >= {need})")
    return out


def build_parallelism(cpu_count: int, memory_gib: float | None, arch_count: int,
                      gib_per_thread: float, reserve_gib: float) -> tuple[int, int, int, str]:
    """(MAX_JOBS, EXT_PARALLEL, nvcc threads, reason). Upstream's defaults multiply to
    32 x 4 x 8 concurrent nvcc threads; this keeps their product within cores and RAM."""
    if memory_gib is None:
        budget = max(1, min(cpu_count, 2))
        why = f"{cpu_count} cores, RAM unknown: 2 nvcc threads at most"
    else:
        by_memory = int(max(0.0, memory_gib - reserve_gib) // gib_per_thread)
        budget = max(1, min(cpu_count, by_memory))
        why = (f"{cpu_count} cores, {memory_gib:g} GiB RAM: up to {budget} nvcc threads at "
               f"about {gib_per_thread:g} GiB each")
    nvcc_threads = max(1, min(arch_count, 4, budget))
    ext_parallel = max(1, min(4, budget // nvcc_threads))
    max_jobs = max(1, budget // (ext_parallel * nvcc_threads))
    why += f" ({ext_parallel} extensions x {max_jobs} jobs x {nvcc_threads} nvcc threads)"
    return max_jobs, ext_parallel, nvcc_threads, why
