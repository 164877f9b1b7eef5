"""Facts + index + options -> one immutable Plan, or the findings that block it. Pure.

Every step says why it is there; `plan`, `install --dry-run` and the executor read the same
object, so what is shown is what is done.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.tags import cpython_tags
from packaging.version import Version

from . import __version__, compat
from .diagnose import (
    diagnose,
    gpu_label,
    linux_triton_fix,
    recorded_wrong_sageattn,
    torch_build_of,
    usable_gpus,
)
from .facts import Facts, Gpu, TargetFacts
from .findings import Finding, finding
from .index import LinuxIndex, WheelIndex, WindowsWheel, spec_text, wheel_supported_by

RUNTIME_DIST = "sagedoctor-runtime"

# Findings from `check` that no install step can fix: the plan stops and shows them. (SD144,
# torch without kernels for a GPU, only concerns GPUs older than any SageAttention serves.)
_BLOCKING_CODES = frozenset({
    "SD101", "SD111", "SD112", "SD113", "SD114", "SD116", "SD120", "SD131", "SD132", "SD133",
    "SD141", "SD142", "SD143", "SD145", "SD190", "SD228",
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


@dataclass(frozen=True)
class WheelDownload:
    file: str
    url: str
    sha256: str | None
    sha256_source: str | None


@dataclass(frozen=True)
class BuildSettings:
    source: str  # a local folder, or the pinned archive URL
    commit: str | None  # None for a user's own folder
    arch_list: str  # "8.9;9.0": semicolons, since upstream reads a space-separated list as one
    cuda_home: str
    max_jobs: int
    ext_parallel: int
    nvcc_threads: int
    build_requires: tuple[str, ...]  # installed into a private folder, not the venv
    source_sha256: str | None = None  # the archive's digest, where the index knows it

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return (
            ("TORCH_CUDA_ARCH_LIST", self.arch_list),
            ("CUDA_HOME", self.cuda_home),
            ("MAX_JOBS", str(self.max_jobs)),
            ("EXT_PARALLEL", str(self.ext_parallel)),
            ("NVCC_APPEND_FLAGS", f"--threads {self.nvcc_threads}"),
        )


@dataclass(frozen=True)
class Step:
    action: str  # one of ACTIONS
    title: str
    reason: str
    distributions: tuple[str, ...] = ()  # every distribution this step adds, replaces or removes
    requirement: str | None = None
    wheel: WheelDownload | None = None
    index_url: str | None = None
    build: BuildSettings | None = None  # build-from-source, or the fallback of install-from-index
    paths: tuple[str, ...] = ()
    config: tuple[tuple[str, str], ...] = ()


ACTIONS = ("uninstall", "remove-leftovers", "install", "install-wheel", "install-from-index",
           "build-from-source", "bundle-runtime", "enable-invokeai", "verify")


@dataclass(frozen=True)
class Plan:
    python: str
    prefix: str
    os: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    @property
    def changed_distributions(self) -> frozenset[str]:
        return frozenset(d for s in self.steps for d in s.distributions)


@dataclass(frozen=True)
class Blocked:
    findings: tuple[Finding, ...]


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
    if target.runtime != options.runtime_version:
        have = f"has {target.runtime}" if target.runtime else "has none"
        steps.append(Step(
            "bundle-runtime", f"Install the SDPA-routing runtime {options.runtime_version}",
            f"the venv {have}; the runtime routes attention to SageAttention only where it "
            "was proven correct and faster", distributions=(RUNTIME_DIST,),
            requirement=f"{RUNTIME_DIST}=={options.runtime_version}"))
    package = target.invokeai
    inv = facts.invokeai
    if options.enable_invokeai and package is not None and inv is not None:
        choice = next((c for c in package.attention_backend_choices if "sage" in c.lower()),
                      None)
        if package.attention_backend_supported and choice:
            if inv.attention_backend != choice:
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
    return steps, notes


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


def _windows_archs(index: WheelIndex, wheel_cuda: str) -> set[str]:
    archs = set(index.windows_archs)
    if Version(wheel_cuda) >= Version("12.8"):
        archs |= set(index.windows_archs_cuda_12_8)
    return archs


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
    rules = index.triton
    plain_triton = target.triton is not None
    if plain_triton:
        steps.append(Step(
            "uninstall", f"Uninstall triton {target.triton}",
            "plain `triton` has no Windows support and shadows triton-windows",
            distributions=("triton",)))
    pair = rules.pair_for(target.torch.version)
    minor = compat.minor_of(target.torch.version)
    if pair is None or pair.windows is None or minor in rules.windows_unknown:
        return steps, notes, [finding(
            "SD202", "error", f"torch {torch_label}: no triton-windows pairing in {index.source}")]
    turing = [g for g in gpus if g.compute_capability == "7.5"]
    if turing:
        spec = rules.turing_spec
        triton_reason = (f"{gpu_label(turing[0])}: Triton dropped Turing in 3.3; with torch "
                         f"{torch_label} this pairing is not guaranteed")
    else:
        spec = pair.windows
        triton_reason = f"torch {torch_label} works with Triton {spec_text(spec)}"
    requirement = f"{rules.windows_package}{spec_text(spec)}"
    have = target.triton_windows
    if have is None or not spec.contains(have, prereleases=True) or plain_triton:
        why = ("; reinstalled because removing triton deletes its files" if plain_triton
               and have else "")
        now = f"you have {have}" if have else "none installed"
        steps.append(Step("install", f"Install {requirement}",
                          f"{triton_reason} ({now}){why}",
                          distributions=(rules.windows_package,), requirement=requirement))

    # SageAttention: one wheel from the fork's releases, installed with --no-deps.
    wheel, why_not = _pick_windows_wheel(index, target, build.cuda, gpus)
    if wheel is None:
        detail = (f"torch {torch_label} (CUDA {build.cuda}), Python {target.python_version}"
                  + (f"; {'; '.join(why_not)}" if why_not else ""))
        return steps, notes, [finding("SD201", "error", detail)]
    covered = _windows_archs(index, wheel.cuda)
    served = [g for g in gpus if g.compute_capability in covered]
    for g in _nvidia(facts):
        if g not in served:
            notes.append(f"{gpu_label(g)} has no kernels in the Windows wheels; it will stay "
                         "on PyTorch attention")
    if not served:
        return steps, notes, [finding("SD203", "error", "; ".join(gpu_label(g) for g in gpus))]
    wrong = recorded_wrong_sageattn(facts)
    if wrong:
        notes.append("verify found `sageattn()` wrong on "
                     + ", ".join(f"{w.name} ({w.gpu})" for w in wrong)
                     + f": {wheel.file} is installed in its place")
    if wrong or rebuild or not _windows_sage_is_correct(target, index, wheel, gpus):
        steps.append(Step(
            "install-wheel", f"Install {wheel.file}",
            _wheel_reason(wheel, target, torch_label, build.cuda_major),
            distributions=("sageattention",),
            wheel=WheelDownload(wheel.file, wheel.url, wheel.sha256, wheel.sha256_source)))
    return steps, notes, []


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
    if wheel.sha256_source == "third-party":
        reason += ("; its sha256 comes from a third party and is checked against GitHub's "
                   "asset digest on first download")
    elif wheel.sha256 is None:
        reason += "; no digest known yet: GitHub's asset digest is recorded on download"
    if target.sageattention is not None:
        reason += f"; replaces {target.sageattention.version}"
    return reason


def _windows_sage_is_correct(target: TargetFacts, index: WheelIndex, best: WindowsWheel,
                             gpus: list[Gpu]) -> bool:
    """An installed wheel the index also offers for this machine, without known problems."""
    sage = target.sageattention
    if sage is None or target.torch is None:
        return False
    if sage.version == best.version:
        return _modules_complete(sage.compiled_modules, gpus)
    for wheel in index.windows_wheels:
        if wheel.version == sage.version and not wheel.problems:
            return (wheel.cuda_major == best.cuda_major
                    and wheel.torch.contains(_public(target.torch.version), prereleases=True)
                    and wheel_supported_by(wheel, _tags(target))
                    and _modules_complete(sage.compiled_modules, gpus))
    return False


def _modules_complete(modules: tuple[str, ...], gpus: list[Gpu]) -> bool:
    have = set(modules)
    needed = {"_fused"} | {m for g in gpus
                           for m in compat.required_sage_modules(g.compute_capability or "")}
    return needed <= have


# --- Linux -----------------------------------------------------------------------------------

def _linux_sage_is_correct(target: TargetFacts, gpus: list[Gpu]) -> bool:
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
            return entry
    return None


def _resolve_linux(facts: Facts, target: TargetFacts, index: WheelIndex, gpus: list[Gpu],
                   options: ResolveOptions) -> tuple[list[Step], list[str], list[Finding]]:
    assert target.torch is not None and facts.system is not None
    steps: list[Step] = []
    notes: list[str] = []
    build = torch_build_of(target.torch)
    pair = index.triton.pair_for(target.torch.version)
    have_triton = compat.minor_of(target.triton)
    if pair is not None and pair.linux is not None and have_triton != pair.linux:
        want = f"{pair.linux[0]}.{pair.linux[1]}"
        have = f"triton {target.triton}" if target.triton else "no triton"
        return steps, notes, [finding(
            "SD152" if target.triton else "SD151", "error",
            f"torch {build.label} pins Triton {want}; the venv has {have}",
            linux_triton_fix(target, want))]
    wrong = recorded_wrong_sageattn(facts)
    if wrong:
        notes.append("verify found `sageattn()` wrong on "
                     + ", ".join(f"{w.name} ({w.gpu})" for w in wrong)
                     + " with this build: it is replaced by a source build of the pinned commit")
    elif (_linux_sage_is_correct(target, gpus) and options.source_dir is None
          and not options.rebuild):
        return steps, notes, []

    archs = [cc for cc in _cc_list(gpus) if cc in index.build.archs]
    for g in _nvidia(facts):
        if g.compute_capability not in archs:
            notes.append(f"{gpu_label(g)}: upstream builds no kernels for it; it stays on "
                         "PyTorch attention")
    if not archs:
        return steps, notes, [finding("SD205", "error",
                                      "; ".join(gpu_label(g) for g in gpus) or "no NVIDIA GPU")]
    blockers = _toolchain_blockers(facts, index, archs, build.cuda_major)
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
        source_sha256=None if options.source_dir else index.build.archive_sha256)
    arch_why = (f"TORCH_CUDA_ARCH_LIST={settings.arch_list}: "
                + ", ".join(gpu_label(g) for g in gpus if g.compute_capability in archs))
    if options.source_dir:
        origin = f"your source folder {options.source_dir}"
    else:
        rejected = "; ".join(f"not {r.ref}: {r.reason}" for r in index.build.rejected)
        origin = (f"upstream {index.build.repository} at {index.build.commit[:7]}"
                  + (f" ({rejected})" if rejected else ""))
    build_reason = (f"no Linux wheel from the fork; build {origin}. {arch_why}. {parallel_why}. "
                    f"CUDA_HOME={cuda_home}")
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
        failures = [f for f in diagnose(facts) if f.code == "SD190"]
        return Blocked(tuple(failures) or (finding(
            "SD190", "error", "the target environment was not inspected", area="python",
            title="Could not check python"),))
    os_name = facts.system.os
    blockers = [f for f in diagnose(facts)
                if f.fatal or (f.code in _BLOCKING_CODES and f.severity == "error")]
    if blockers:
        return Blocked(tuple(blockers))
    gpus = usable_gpus(_nvidia(facts), os_name)
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
    return Plan(python=target.executable, prefix=target.prefix, os=os_name,
                steps=tuple(steps + final), notes=tuple(notes + final_notes))
