"""Facts + index + options -> one immutable Plan, or the findings that block it. Pure.

Every step says why it is there; `plan`, `install --dry-run` and the executor read the same
object, so what is shown is what is done.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.tags import cpython_tags
from packaging.version import Version

from . import __version__, compat, rules
from .diagnose import (
    diagnose,
    gpu_label,
    recorded_wrong_sageattn,
    torch_build_of,
    torch_fix,
    torch_kernel_findings,
    triton_problems,
    usable_gpus,
)
from .facts import Facts, Gpu, InterruptedInstall, TargetFacts
from .findings import Finding, finding
from .index import LinuxIndex, WheelIndex, WindowsWheel, spec_text, wheel_supported_by
from .plan import Blocked, BuildSettings, Plan, Step, WheelDownload
from .requirements import (
    describe_pending,
    gpu_service,
    hooked_but_unverified,
    invokeai_sage_choice,
    invokeai_switch_pending,
    runtime_shortfall,
)
from .state import InstallRecord

RUNTIME_DIST = "sagedoctor-runtime"

# Findings from `check` that no install step can fix: the plan stops and shows them, at the
# severity check gives them (SD144 is an error only for a GPU SageAttention would use; SD183
# and SD197 only where the plan would edit that invokeai.yaml; SD184: InvokeAI would not
# start).
_BLOCKING_CODES = frozenset({
    "SD101", "SD111", "SD112", "SD113", "SD114", "SD116", "SD120", "SD131", "SD132", "SD133",
    "SD141", "SD142", "SD143", "SD144", "SD145", "SD183", "SD184", "SD190", "SD197", "SD228",
})


@dataclass(frozen=True)
class ResolveOptions:
    source_dir: str | None = None  # build this folder instead of the pinned commit (Linux)
    use_linux_indexes: bool = True
    enable_invokeai: bool = True
    runtime_version: str = __version__
    # post-update: the installed build stopped working (it no longer imports after a torch
    # change), so it is replaced even where its files look complete.
    rebuild: bool = False


# --- small pure helpers --------------------------------------------------------------------

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


def _tags(target: TargetFacts) -> tuple[str, ...]:
    if target.tags:
        return target.tags
    version = compat.parse_version(target.python_version)
    if version is None:
        return ()
    return tuple(str(t) for t in cpython_tags(version.release[:2], platforms=["win_amd64"]))


def _public(version: str) -> str:
    parsed = compat.parse_version(version)
    return parsed.public if parsed else version


def _cc_list(gpus: list[Gpu]) -> list[str]:
    return sorted({g.compute_capability for g in gpus if g.compute_capability},
                  key=lambda cc: compat.cc_tuple(cc) or (0, 0))


def _nvidia(facts: Facts) -> tuple[Gpu, ...]:
    return facts.gpu.nvidia if facts.gpu else ()


def _cuda_home(facts: Facts) -> str | None:
    # Only a validated folder (bin/nvcc and include/cuda_runtime.h): nvcc's parent's parent
    # may be /usr/local of a wrapper script, whose missing headers fail the build late.
    return facts.toolchain.cuda_home if facts.toolchain else None


# --- the steps every OS shares -------------------------------------------------------------

def _cleanup_steps(target: TargetFacts) -> list[Step]:
    steps: list[Step] = []
    sage = target.sageattention
    if sage is not None and (compat.parse_version(sage.version) or Version("0")).major == 1:
        steps.append(Step(
            "uninstall", "Uninstall SageAttention 1",
            f"sageattention {sage.version} is SageAttention 1 (PyPI); SageAttention 2 uses the "
            "same import name", distributions=("sageattention",)))
    if sage is not None and sage.leftovers:
        steps.append(Step(
            "remove-leftovers", "Remove stale SageAttention eggs",
            "old `setup.py install` leftovers shadow the installed package",
            paths=sage.leftovers))
    return steps


def _final_steps(facts: Facts, target: TargetFacts, options: ResolveOptions,
                 changed: bool) -> tuple[list[Step], list[str]]:
    steps: list[Step] = []
    notes: list[str] = []
    shortfall = runtime_shortfall(target, options.runtime_version)
    if shortfall is not None:
        steps.append(Step(
            "bundle-runtime", f"Install the SDPA-routing runtime {options.runtime_version}",
            f"{shortfall}; the runtime routes attention to SageAttention only where it "
            "was proven correct and faster", distributions=(RUNTIME_DIST,),
            requirement=f"{RUNTIME_DIST}=={options.runtime_version}"))
    package = target.invokeai
    inv = facts.invokeai
    if options.enable_invokeai and package is not None and inv is not None:
        choice = invokeai_switch_pending(facts)
        if invokeai_sage_choice(facts) is not None:
            if choice is not None:
                steps.append(Step(
                    "enable-invokeai", f"Set attention_backend: {choice} in invokeai.yaml",
                    f"InvokeAI {package.version} has an attention_backend setting",
                    paths=(inv.config_path,) if inv.config_path else (),
                    config=(("attention_backend", choice),)))
        else:
            notes.append(f"InvokeAI {package.version} has no attention_backend setting: "
                         "`sagedoctor enable` turns the runtime on through a start-up hook")
    if inv is not None and inv.attention_type == "sliced":
        notes.append(f"{inv.config_path} sets attention_type: sliced; SD1.5/SDXL then never "
                     "call SDPA, so the runtime cannot speed them up (set it to auto)")
    if changed or steps:
        steps.append(Step("verify", "Verify in the target venv",
                          "check every kernel against SDPA on each GPU and time it"))
    elif hooked_but_unverified(facts):
        steps.append(Step("verify", "Verify in the target venv",
                          "the start-up hook is on and no verify covers the build installed "
                          "now, so the runtime keeps SageAttention off until one passes"))
    return steps, notes


def _recover_steps(facts: Facts) -> tuple[list[Step], list[str]]:
    """A journal a killed install left (SD199): the install rolls the venv back before
    anything else, then plans again from the venv as it is then."""
    pending = facts.interrupted_install
    if pending is None:
        return [], []
    step = Step("recover", "Roll back the interrupted install",
                f"{describe_pending(pending)}; the rollback comes before anything else",
                paths=(pending.journal,))
    return [step], ["the steps after the rollback are planned again by `sagedoctor install` "
                    "from the venv as the rollback leaves it"]


# --- Windows ---------------------------------------------------------------------------------

def _pick_windows_wheel(index: WheelIndex, target: TargetFacts, torch_cuda: str,
                        gpus: list[Gpu] | None = None) -> tuple[WindowsWheel | None, list[str]]:
    """The best wheel for this torch, CUDA major and Python, and why others were passed over."""
    torch_version = _public(target.torch.version if target.torch else "")
    torch_cuda_v = compat.parse_version(torch_cuda)
    if torch_cuda_v is None:  # a facts file or a damaged torch/version.py: no wheel fits
        return None, [f"torch's CUDA version {torch_cuda!r:.40} is not a version"]
    cuda_major = torch_cuda_v.release[0]
    tags = _tags(target)
    candidates = []
    why_not: list[str] = []
    ccs = set(_cc_list(gpus or []))
    for wheel in index.windows_wheels:
        if wheel.cuda_major != cuda_major:
            continue
        if ccs & set(wheel.broken_archs):
            why_not.append(f"{wheel.file} is known broken on "
                           f"{', '.join(sorted(ccs & set(wheel.broken_archs)))}")
            continue
        if not wheel.torch.contains(torch_version, prereleases=True):
            continue
        if not wheel_supported_by(wheel, tags):
            why_not.append(f"{wheel.file} needs Python >= {wheel.python_min[0]}."
                           f"{wheel.python_min[1]}")
            continue
        candidates.append(wheel)

    def rank(wheel: WindowsWheel) -> tuple[int, int, int, int, Version]:
        return (0 if wheel.problems else 1, wheel.post or 0, 0 if wheel.and_higher else 1,
                1 if Version(wheel.cuda) == torch_cuda_v else 0, Version(wheel.cuda))

    return (max(candidates, key=rank) if candidates else None), why_not


def _other_cuda_fix(index: WheelIndex, target: TargetFacts, gpus: list[Gpu]) -> str | None:
    """Where the fork has wheels for this torch, but for another CUDA major: the build of the
    same torch (PyTorch's CUDA matrix) whose CUDA the wheels serve."""
    assert target.torch is not None
    public = _public(target.torch.version)
    tags = _tags(target)
    majors = {w.cuda_major for w in index.windows_wheels
              if w.torch.contains(public, prereleases=True) and wheel_supported_by(w, tags)
              and not w.problems}
    release = rules.torch_release(public)
    if not majors or release is None:
        return None
    ccs = [g.compute_capability or "" for g in gpus]
    for variant in sorted(release.variants, key=lambda v: Version(v.cuda), reverse=True):
        if variant.cuda_major in majors and all(variant.serves(cc) for cc in ccs):
            return (f"The fork's wheels for torch {public} are built for CUDA "
                    f"{', '.join(map(str, sorted(majors)))}: "
                    + torch_fix(target, "windows", f"torch=={public}", variant.index_url,
                                force=True))
    return None


def _resolve_windows(facts: Facts, target: TargetFacts, index: WheelIndex,
                     gpus: list[Gpu], rebuild: bool = False
                     ) -> tuple[list[Step], list[str], list[Finding]]:
    assert target.torch is not None
    steps: list[Step] = []
    notes: list[str] = []
    build = torch_build_of(target.torch)
    torch_label = build.label
    if build.cuda is None:
        return [], [], [finding("SD201", "error", f"torch {torch_label}: CUDA version unknown")]

    # Triton: plain `triton` and triton-windows share the module folder `triton/`.
    triton_rules = index.triton
    plain_triton = target.triton is not None
    if plain_triton:
        steps.append(Step(
            "uninstall", f"Uninstall triton {target.triton}",
            "plain `triton` has no Windows support and shadows triton-windows",
            distributions=("triton",)))
    # The same requirement `check` names in its fix (diagnose.triton_problems).
    req, problems = triton_problems(target, gpus, "windows", triton_rules)
    if req is None or (req.blocked and req.blocked_code == "SD202"):
        return steps, notes, [finding(
            "SD202", "error", f"torch {torch_label}: no triton-windows pairing in {index.source}")]
    if req.blocked or req.spec is None:
        return steps, notes, [f for f in problems if f.code in ("SD146", "SD147")]
    for g in req.turing_left_out:
        notes.append(f"{gpu_label(g)} cannot run Triton {spec_text(req.spec)} (Triton dropped "
                     "Turing in 3.3): it stays on PyTorch attention")
    requirement = req.requirement or ""
    have = target.triton_windows
    if not req.satisfied_by(have) or plain_triton:
        why = ("; reinstalled because removing triton deletes its files" if plain_triton
               and have else "")
        now = f"you have {have}" if have else "none installed"
        steps.append(Step("install", f"Install {requirement}",
                          f"{req.reason} ({now}){why}",
                          distributions=(triton_rules.windows_package,),
                          requirement=requirement))

    # SageAttention: one wheel from the fork's releases, installed with --no-deps.
    wheel, why_not = _pick_windows_wheel(index, target, build.cuda, gpus)
    wrong = recorded_wrong_sageattn(facts)
    if not wrong and not rebuild and _windows_sage_is_correct(target, index, wheel, gpus):
        return steps, notes, []  # a build check finds nothing wrong with stays, ours or not
    if wheel is None:
        detail = (f"torch {torch_label} (CUDA {build.cuda}), Python {target.python_version}"
                  + (f"; {'; '.join(why_not)}" if why_not else ""))
        return steps, notes, [finding("SD201", "error", detail,
                                      _other_cuda_fix(index, target, gpus))]
    service = gpu_service(gpus, "windows", index, wheel.cuda)
    for g in _nvidia(facts):
        if g not in service.served:
            notes.append(f"{gpu_label(g)} has no kernels in the Windows wheels; it will stay "
                         "on PyTorch attention")
    if not service.served:
        return steps, notes, [finding("SD203", "error", "; ".join(
            f"{gpu_label(g)}: the fork's Windows wheels carry no kernels for it" for g in gpus))]
    if wrong:
        notes.append("verify found `sageattn()` wrong on "
                     + ", ".join(f"{w.name} ({w.gpu})" for w in wrong)
                     + f": {wheel.file} is installed in its place")
    steps.append(Step(
        "install-wheel", f"Install {wheel.file}",
        _wheel_reason(wheel, target, torch_label, build.cuda_major),
        distributions=("sageattention",),
        wheel=WheelDownload(wheel.file, wheel.url, wheel.sha256, wheel.sha256_source)))
    return steps, notes, []


# The post6 `andhigher` wheels are reported working with torch 2.12 and 2.13 (DazzleML's
# supported_wheels.md, 3rd-party); beyond that only the fork's ">= 2.10" and the smoke check.
_ANDHIGHER_REPORTED_UP_TO = (2, 13)


def _wheel_reason(wheel: WindowsWheel, target: TargetFacts, torch_label: str,
                  cuda_major: int | None) -> str:
    """'cu130 wheel: torch 2.13.0+cu130 is CUDA 13; andhigher.post6: torch >= 2.10, Python
    3.12' and what else the user should know about it."""
    built = Version(wheel.version).local or ""
    built_torch = built.split("torch", 1)[1].split("andhigher")[0].split(".post")[0]
    label = ("andhigher" if wheel.and_higher else f"torch{built_torch}") + (
        f".post{wheel.post}" if wheel.post is not None else "")
    served = (f"torch >= {'.'.join(built_torch.split('.')[:2])}" if wheel.and_higher
              else f"torch {'.'.join(built_torch.split('.')[:2])}.x only")
    python = ".".join(target.python_version.split(".")[:2])
    reason = (f"cu{wheel.cuda.replace('.', '')} wheel: torch {torch_label} is CUDA {cuda_major}; "
              f"{label}: {served}, Python {python}")
    minor = compat.minor_of(target.torch.version if target.torch else None)
    if wheel.and_higher and minor is not None and minor > _ANDHIGHER_REPORTED_UP_TO:
        reason += (f"; reported working up to torch {_ANDHIGHER_REPORTED_UP_TO[0]}."
                   f"{_ANDHIGHER_REPORTED_UP_TO[1]}: the smoke check after the install decides")
    if wheel.sha256_source == "third-party":
        reason += ("; its sha256 comes from a third party and is checked against GitHub's "
                   "asset digest on first download")
    elif wheel.sha256 is None:
        reason += "; no digest known yet: GitHub's asset digest is recorded on download"
    if target.sageattention is not None:
        reason += f"; replaces {target.sageattention.version}"
    return reason


def _windows_sage_is_correct(target: TargetFacts, index: WheelIndex,
                             best: WindowsWheel | None, gpus: list[Gpu]) -> bool:
    """An installed wheel the index also offers for this machine, without known problems; or
    a build the index does not know that `check` finds nothing wrong with (the user's own)."""
    sage = target.sageattention
    if sage is None or target.torch is None:
        return False
    if best is not None and sage.version == best.version:
        return _modules_complete(sage.compiled_modules, gpus)
    cuda_major = torch_build_of(target.torch).cuda_major
    for wheel in index.windows_wheels:
        if wheel.version == sage.version:
            return (not wheel.problems and wheel.cuda_major == cuda_major
                    and wheel.torch.contains(_public(target.torch.version), prereleases=True)
                    and wheel_supported_by(wheel, _tags(target))
                    and _modules_complete(sage.compiled_modules, gpus))
    return _sage_build_fits(target, gpus)


def _modules_complete(modules: tuple[str, ...], gpus: list[Gpu]) -> bool:
    have = set(modules)
    needed = {"_fused"} | {m for g in gpus
                           for m in compat.required_sage_modules(g.compute_capability or "")}
    return needed <= have


# --- Linux -----------------------------------------------------------------------------------

def _sage_build_fits(target: TargetFacts, gpus: list[Gpu]) -> bool:
    """SageAttention 2 whose label (if any) matches torch, with every module the GPUs need:
    what `check` asks of a build (SD162, SD163, SD164)."""
    sage = target.sageattention
    if sage is None or target.torch is None:
        return False
    version = compat.parse_version(sage.version)
    if version is None or version.major != 2:
        return False
    label = compat.parse_sage_local(sage.version)
    if label is not None:
        build = torch_build_of(target.torch)
        if label.cuda_major != build.cuda_major or not compat.sage_serves_torch(
                label, target.torch.version):
            return False
    return _modules_complete(sage.compiled_modules, gpus)


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
    nvcc = compat.parse_version(tool.nvcc_version)
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
    problems = rules.cxx_toolchain_problems(standard, tool.gcc_version,
                                                   tool.nvcc_version)
    return [finding("SD206", "error", f"C++{standard} ({why}): {p}") for p in problems]


def _matching_linux_index(index: WheelIndex, torch_version: str, torch_cuda: str,
                          archs: list[str] | None = None,
                          notes: list[str] | None = None) -> LinuxIndex | None:
    """The first index serving this torch and CUDA whose wheels are not known broken on any
    of these GPUs (its provenance says which architectures its source ref breaks)."""
    for entry in index.linux_indexes:
        if entry.cuda == torch_cuda and entry.torch.contains(_public(torch_version),
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


def _resolve_linux(facts: Facts, target: TargetFacts, index: WheelIndex, gpus: list[Gpu],
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
    elif (_sage_build_fits(target, gpus) and options.source_dir is None
          and not options.rebuild):
        return steps, notes, []

    archs = _cc_list(list(gpu_service(gpus, "linux", index, build.cuda).served))
    for g in _nvidia(facts):
        if g.compute_capability not in archs:
            notes.append(f"{gpu_label(g)}: upstream builds no kernels for it; it stays on "
                         "PyTorch attention")
    if not archs:
        return steps, notes, [finding("SD205", "error", "; ".join(
            f"{gpu_label(g)}: upstream builds no kernels for it" for g in gpus)
            or "no NVIDIA GPU")]
    blockers = _toolchain_blockers(facts, index, archs, build.cuda_major)
    standard, standard_why = rules.cxx_standard_for(target.torch)
    blockers += _cxx_blockers(facts, standard, standard_why)
    system = facts.system
    jobs, ext, threads, parallel_why = build_parallelism(
        system.cpu_count, system.memory_gib, len(archs), index.build.gib_per_nvcc_thread,
        index.build.reserve_gib)
    cuda_home = _cuda_home(facts) or ""  # empty only where a blocker stops the build
    source = options.source_dir or index.build.archive
    settings = BuildSettings(
        source=source, commit=None if options.source_dir else index.build.commit,
        arch_list=";".join(archs), cuda_home=cuda_home, max_jobs=jobs, ext_parallel=ext,
        nvcc_threads=threads, build_requires=index.build.build_requires,
        source_sha256=None if options.source_dir else index.build.archive_sha256,
        cxx_standard=standard if standard > 17 else None)
    arch_why = (f"TORCH_CUDA_ARCH_LIST={settings.arch_list}: "
                + ", ".join(gpu_label(g) for g in gpus if g.compute_capability in archs))
    if options.source_dir:
        origin = f"your source folder {options.source_dir}"
    else:
        rejected = "; ".join(f"not {r.ref}: {r.reason}" for r in index.build.rejected)
        origin = (f"upstream {index.build.repository} at {index.build.commit[:7]}"
                  + (f" ({rejected})" if rejected else ""))
    cxx_why = (f". C++{standard} ({standard_why}): the build's copy of setup.py gets -std=c++"
               f"{standard}" if settings.cxx_standard else "")
    build_reason = (f"no Linux wheel from the fork; build {origin}. {arch_why}. {parallel_why}. "
                    f"CUDA_HOME={cuda_home}{cxx_why}")
    replaces = (f"; replaces {target.sageattention.version}"
                if target.sageattention is not None and target.sageattention.version[:1] == "2"
                else "")
    build_step = Step("build-from-source", "Build SageAttention from source and install it",
                      build_reason + replaces, distributions=("sageattention",),
                      build=settings)
    linux_index = (_matching_linux_index(index, target.torch.version, build.cuda or "",
                                         _cc_list(gpus), notes)
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
            index_url=linux_index.url, build=None if blockers else settings))
        return steps, notes, []
    if blockers:
        return steps, notes, blockers
    steps.append(build_step)
    return steps, notes, []


# --- the entry point -------------------------------------------------------------------------

def resolve_plan(facts: Facts, index: WheelIndex,
                 options: ResolveOptions | None = None) -> Plan | Blocked:
    options = options or ResolveOptions()
    target = facts.target
    if facts.system is None or target is None:
        # What could not be checked, and what no target could change (no GPU): exit 2 then,
        # as check says for the same machine.
        failures = [f for f in diagnose(facts, index) if f.code == "SD190" or f.fatal]
        return Blocked(tuple(failures) or (finding(
            "SD190", "error", "the target environment was not inspected", area="python",
            title="Could not check python"),))
    os_name = facts.system.os
    blockers = [f for f in diagnose(facts, index, options.runtime_version)
                if f.fatal or (f.code in _BLOCKING_CODES and f.severity == "error")]
    if blockers:
        return Blocked(tuple(blockers))
    gpus = usable_gpus(_nvidia(facts), os_name)
    # torch without kernels for a GPU SageAttention would serve: nothing to install fixes it
    # (the same SD144 as `check`, with the torch build that does serve it).
    no_kernels = torch_kernel_findings(target, gpus, os_name, _nvidia(facts),
                                       facts.system.machine,
                                       facts.toolchain.nvcc_version if facts.toolchain else None)
    if no_kernels:
        return Blocked(tuple(no_kernels))
    steps = _cleanup_steps(target)
    if os_name == "windows":
        more, notes, problems = _resolve_windows(facts, target, index, gpus, options.rebuild)
        if options.source_dir:
            notes.append(f"--source {options.source_dir} is not used on Windows: the fork's "
                         "prebuilt wheels need no compiler")
    else:
        more, notes, problems = _resolve_linux(facts, target, index, gpus, options)
    if problems:
        return Blocked(tuple(problems))
    steps += more
    final, final_notes = _final_steps(facts, target, options, changed=bool(steps))
    recover, recover_notes = _recover_steps(facts)
    return Plan(python=target.executable, prefix=target.prefix, os=os_name,
                steps=tuple(recover + steps + final),
                notes=tuple(recover_notes + notes + final_notes))


# --- uninstall -------------------------------------------------------------------------------

BACKEND_KEY = "attention_backend"


@dataclass(frozen=True)
class EditedConfig:
    """invokeai.yaml as uninstall found it: where, its attention_backend, and whether it is
    still exactly as sagedoctor's recorded edit left it."""

    path: str
    backend: str | None
    as_edited: bool


@dataclass(frozen=True)
class UninstallFacts:
    """What uninstall reads before deciding: the venv, sagedoctor's record of what it
    installed and replaced, and which of its files exist."""

    target: TargetFacts | None
    os: str = ""  # platform.system().lower(), as SystemFacts names it
    record: InstallRecord | None = None
    hook: str | None = None  # the start-up hook .pth, where it exists
    records: str | None = None  # the <venv>/sagedoctor folder, where it exists
    config: EditedConfig | None = None
    interrupted: InterruptedInstall | None = None


def resolve_uninstall(facts: UninstallFacts, everything: bool) -> Plan | Blocked:
    """What uninstall does, in order, and what it leaves (with why); records last. Pure."""
    target = facts.target
    if target is None:
        return Blocked((finding("SD190", "error", "the target environment was not inspected",
                                area="python", title="Could not check python"),))
    steps: list[Step] = []
    notes: list[str] = []
    if facts.interrupted is not None:
        steps.append(Step("recover", "Roll back the interrupted install",
                          f"{describe_pending(facts.interrupted)}; the rollback comes first, "
                          "then uninstall reads what sagedoctor left anew",
                          paths=(facts.interrupted.journal,)))
    if facts.hook is not None:
        steps.append(Step("remove-hook", f"remove the start-up hook {facts.hook}",
                          "without it no interpreter of the venv arms the runtime",
                          paths=(facts.hook,)))
    config = facts.config
    if config is not None and "sage" in (config.backend or "").lower():
        setting = ((BACKEND_KEY, config.backend or ""),)
        if not everything:
            notes.append(f"{config.path} keeps {BACKEND_KEY}: {config.backend} (pass --all "
                         "to take it out with sageattention)")
        elif config.as_edited:
            steps.append(Step(
                "restore-invokeai", f"put back {config.path} as it was before sagedoctor set "
                f"{BACKEND_KEY}: {config.backend} (unchanged since)",
                "nothing changed the file since sagedoctor's edit, so its backup is the "
                "user's own file", paths=(config.path,), config=setting))
        else:
            steps.append(Step(
                "unset-invokeai-key", f"remove {BACKEND_KEY}: {config.backend} from "
                f"{config.path} (the rest of the file kept; a backup beside it)",
                "the file changed since sagedoctor's edit: only the key goes",
                paths=(config.path,), config=setting))
    if target.runtime is not None:
        steps.append(Step("uninstall", f"uninstall {RUNTIME_DIST} {target.runtime}",
                          "sagedoctor's SDPA-routing runtime", distributions=(RUNTIME_DIST,)))
    record = facts.record
    old_triton = record.replaced.get("triton-windows") if record else None
    if old_triton and compat.parse_version(old_triton) is None:
        notes.append(f"the record's triton-windows {old_triton!r:.40} is not a version: it is "
                     "not put back")
        old_triton = None
    if old_triton and target.triton_windows != old_triton:
        steps.append(Step(
            "put-back", f"put back triton-windows {old_triton} (sagedoctor replaced it with "
            f"{target.triton_windows or 'nothing'})",
            "the user's own version before sagedoctor's install, through uv",
            distributions=("triton-windows",), requirement=f"triton-windows=={old_triton}"))
    sage = target.sageattention
    if sage is not None:
        ours = record is not None and "sageattention" in record.installed
        if everything:
            steps.append(Step("uninstall", f"uninstall sageattention {sage.version}"
                              + ("" if ours else " (not installed by sagedoctor)"),
                              "--all: SageAttention goes too", distributions=("sageattention",)))
        else:
            notes.append(f"sageattention {sage.version} stays (pass --all to remove it too)")
    if old_triton and sage is not None and not everything:
        notes.append(f"triton-windows {old_triton} may not be the one sageattention was "
                     "verified with: run `sagedoctor check`")
    if facts.records is not None:
        steps.append(Step("remove-records", f"remove {facts.records} (records, verification)",
                          "last, so a failed step before it leaves them for the next run",
                          paths=(facts.records,)))
    return Plan(python=target.executable, prefix=target.prefix, os=facts.os,
                steps=tuple(steps), notes=tuple(notes), purpose="uninstall")
