"""Linux: a wheel from a curated index where one matches this torch exactly, else a source
build of the pinned commit for these GPUs, with what its toolchain must provide. Pure."""

from __future__ import annotations

from packaging.version import Version

from ...facts import Facts, Gpu, TargetFacts
from ...index import LinuxIndex, WheelIndex, spec_text
from ...plan import BuildSettings, Step
from ..checks.sage import recorded_wrong_sageattn
from ..checks.triton import triton_problems
from ..findings import Finding, finding
from ..matrix import (
    gpu_label,
    gpu_service,
)
from ..toolchain import build_parallelism, cxx_standard_for, cxx_toolchain_problems
from ..versions import (
    parse_version,
    torch_build_of,
)
from .steps import ResolveOptions, cc_list, cuda_home_of, nvidia_gpus, public_label, sage_build_fits


def _toolchain_blockers(facts: Facts, index: WheelIndex, archs: list[str],
                        torch_cuda_major: int | None) -> list[Finding]:
    tool = facts.toolchain
    if tool is None or tool.nvcc_version is None:
        return [finding("SD204", "error", "no nvcc found (CUDA_HOME, CUDA_PATH, PATH, "
                        "/usr/local/cuda)")]
    out = []
    if tool.cuda_home is None:
        out.append(finding("SD204", "error", f"no CUDA toolkit folder with bin/nvcc and "
                           f"include/cuda_runtime.h (nvcc at {tool.nvcc_path})",
                           "Install the CUDA toolkit with its headers and set CUDA_HOME to it."))
    nvcc = parse_version(tool.nvcc_version)
    need = max((Version(index.min_nvcc_for(cc)) for cc in archs), default=Version("12.0"))
    if nvcc is None or nvcc < need:
        out.append(finding("SD204", "error", f"nvcc {tool.nvcc_version} is older than {need}, "
                           f"which building for {', '.join(archs)} needs"))
    if nvcc is not None and torch_cuda_major is not None and nvcc.major != torch_cuda_major:
        out.append(finding("SD204", "error", f"nvcc {tool.nvcc_version} is CUDA {nvcc.major}, "
                           f"torch is CUDA {torch_cuda_major}: the extension would not load"))
    if tool.gcc_version is None:
        out.append(finding("SD204", "error", "no gcc found"))
    return out


def _cxx_blockers(facts: Facts, standard: int, why: str) -> list[Finding]:
    """Before minutes of nvcc: can this gcc and nvcc compile the standard torch demands?"""
    tool = facts.toolchain
    if tool is None:
        return []
    problems = cxx_toolchain_problems(standard, tool.gcc_version,
                                                   tool.nvcc_version)
    return [finding("SD206", "error", f"C++{standard} ({why}): {p}") for p in problems]


def _matching_linux_index(index: WheelIndex, torch_version: str, torch_cuda: str,
                          archs: list[str] | None = None,
                          notes: list[str] | None = None) -> LinuxIndex | None:
    """The first index serving this torch and CUDA whose wheels are not known broken on any
    of these GPUs (its provenance says which architectures its source ref breaks)."""
    for entry in index.linux_indexes:
        if entry.cuda == torch_cuda and entry.torch.contains(public_label(torch_version),
                                                             prereleases=True):
            broken = entry.broken_on(archs or [])
            if broken:
                if notes is not None:
                    notes.append(f"{entry.name}'s wheels are built from "
                                 f"{entry.source_repository} at {entry.source_ref}, known "
                                 f"broken on sm{', sm'.join(b.replace('.', '') for b in broken)}"
                                 ": building the pinned commit instead")
                continue
            missing = entry.missing_for(archs or [])
            if missing:
                if notes is not None:
                    notes.append(f"{entry.name}'s {entry.url} builds carry no kernels for "
                                 f"sm{', sm'.join(m.replace('.', '') for m in missing)} "
                                 f"(built for {', '.join(entry.archs)}): building instead")
                continue
            return entry
    return None


def resolve_linux(facts: Facts, target: TargetFacts, index: WheelIndex, gpus: list[Gpu],
                   options: ResolveOptions) -> tuple[list[Step], list[str], list[Finding]]:
    assert target.torch is not None and facts.system is not None
    steps: list[Step] = []
    notes: list[str] = []
    build = torch_build_of(target.torch)
    # The same findings `check` reports (diagnose.triton_problems): torch pins its triton.
    _req, problems = triton_problems(target, gpus, "linux", index.triton)
    if problems:
        return steps, notes, problems
    wrong = recorded_wrong_sageattn(facts)
    if wrong:
        notes.append("verify found `sageattn()` wrong on "
                     + ", ".join(f"{w.name} ({w.gpu})" for w in wrong)
                     + " with this build: it is replaced by a source build of the pinned commit")
    elif (sage_build_fits(target, gpus) and options.source_dir is None
          and not options.rebuild):
        return steps, notes, []

    archs = cc_list(list(gpu_service(gpus, "linux", index, build.cuda).served))
    for g in nvidia_gpus(facts):
        if g.compute_capability not in archs:
            notes.append(f"{gpu_label(g)}: upstream builds no kernels for it; it stays on "
                         "PyTorch attention")
    if not archs:
        return steps, notes, [finding("SD205", "error", "; ".join(
            f"{gpu_label(g)}: upstream builds no kernels for it" for g in gpus)
            or "no NVIDIA GPU")]
    blockers = _toolchain_blockers(facts, index, archs, build.cuda_major)
    blockers += _cxx_blockers(facts, *cxx_standard_for(target.torch))
    build_step = _build_step(facts, target, index, gpus, archs, options)
    linux_index = (_matching_linux_index(index, target.torch.version, build.cuda or "",
                                         cc_list(gpus), notes)
                   if options.use_linux_indexes and not options.source_dir and not wrong
                   else None)
    if linux_index is not None:
        version = linux_index.version_for(target.torch.version)
        fallback = ("; if it is not reachable, build from source as below" if not blockers
                    else "; no source build possible here, so this is the only way")
        steps.append(Step(
            "install-from-index", f"Install sageattention=={version} from {linux_index.name}",
            f"{linux_index.name} builds for CUDA {linux_index.cuda} and torch "
            f"{spec_text(linux_index.torch)} (third-party, checked by the self-test){fallback}",
            distributions=("sageattention",), requirement=f"sageattention=={version}",
            index_url=linux_index.url, build=None if blockers else build_step.build))
        return steps, notes, []
    if blockers:
        return steps, notes, blockers
    steps.append(build_step)
    return steps, notes, []


def _build_step(facts: Facts, target: TargetFacts, index: WheelIndex, gpus: list[Gpu],
                archs: list[str], options: ResolveOptions) -> Step:
    """The source build of the pinned commit for these archs, sized for this machine."""
    assert target.torch is not None and facts.system is not None
    standard, standard_why = cxx_standard_for(target.torch)
    system = facts.system
    jobs, ext, threads, parallel_why = build_parallelism(
        system.cpu_count, system.memory_gib, len(archs), index.build.gib_per_nvcc_thread,
        index.build.reserve_gib)
    cuda_home = cuda_home_of(facts) or ""  # empty only where a blocker stops the build
    source = options.source_dir or index.build.archive
    settings = BuildSettings(
        source=source, commit=None if options.source_dir else index.build.commit,
        arch_list=";".join(archs), cuda_home=cuda_home, max_jobs=jobs, ext_parallel=ext,
        nvcc_threads=threads, build_requires=index.build.build_requires,
        source_sha256=None if options.source_dir else index.build.archive_sha256,
        cxx_standard=standard if standard > 17 else None)
    arch_why = (f"TORCH_CUDA_ARCH_LIST={settings.arch_list}: "
                + ", ".join(gpu_label(g) for g in gpus if g.compute_capability in archs))
    origin = _origin(index, options)
    cxx_why = (f". C++{standard} ({standard_why}): the build's copy of setup.py gets -std=c++"
               f"{standard}" if settings.cxx_standard else "")
    build_reason = (f"no Linux wheel from the fork; build {origin}. {arch_why}. {parallel_why}. "
                    f"CUDA_HOME={cuda_home}{cxx_why}")
    replaces = (f"; replaces {target.sageattention.version}"
                if target.sageattention is not None and target.sageattention.version[:1] == "2"
                else "")
    return Step("build-from-source", "Build SageAttention from source and install it",
                build_reason + replaces, distributions=("sageattention",), build=settings)


def _origin(index: WheelIndex, options: ResolveOptions) -> str:
    if options.source_dir:
        return f"your source folder {options.source_dir}"
    rejected = "; ".join(f"not {r.ref}: {r.reason}" for r in index.build.rejected)
    return (f"upstream {index.build.repository} at {index.build.commit[:7]}"
            + (f" ({rejected})" if rejected else ""))
