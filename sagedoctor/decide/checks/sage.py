"""The SageAttention area: the installed build, the runtime that routes to it, and what the
last verify found."""

from __future__ import annotations

from ... import __version__
from ...facts import (
    PYVENV_CFG_SAYS,
    Facts,
    GpuFacts,
    TargetFacts,
    VerificationFacts,
    WrongKernel,
)
from ...index import WheelIndex, shipped_index
from ..findings import Finding, finding
from ..fixes import (
    quoted_prefix,
    verify_command,
)
from ..matrix import (
    gpu_label,
    gpu_service,
    required_sage_modules,
    usable_gpus,
)
from ..requirements import (
    hooked_but_unverified,
    known_wheel_problems,
    runtime_shortfall,
    verification_is_current,
)
from ..versions import (
    parse_sage_local,
    parse_version,
    sage_serves_torch,
    torch_build_of,
)

# Findings that make the plan install SageAttention (a wheel or a build).
NEEDS_BUILD_CODES = frozenset({"SD161", "SD162", "SD163", "SD164", "SD167", "SD192"})


def check_sageattention(target: TargetFacts, gpu: GpuFacts | None, os_name: str,
                        index: WheelIndex | None = None,
                        runtime_version: str = __version__) -> list[Finding]:
    index = index or shipped_index()
    out = _check_sage_build(target, gpu, os_name, index)
    install = f"sagedoctor install --venv {quoted_prefix(target, os_name)}"
    if any(f.code in NEEDS_BUILD_CODES for f in out):
        out += route_findings(target, gpu, os_name, index)
    if target.sageattention is not None and target.sageattention.leftovers:
        out.append(finding("SD165", "error", "; ".join(target.sageattention.leftovers),
                           f"{install} (moves them aside, into its log folder)"))
    shortfall = runtime_shortfall(target, runtime_version)
    if shortfall is not None and target.torch is not None:
        out.append(finding("SD191", "error", f"{shortfall}: nothing routes attention to "
                           "SageAttention", install))
    return out


def route_findings(target: TargetFacts, gpu: GpuFacts | None, os_name: str,
                   index: WheelIndex) -> list[Finding]:
    """The arch gate of the install route, said by check as the plan would block on it."""
    usable = usable_gpus(gpu.nvidia if gpu else (), os_name)
    if not usable:
        return []  # SD111-SD114 already say the machine cannot run SageAttention
    cuda = torch_build_of(target.torch).cuda if target.torch else None
    service = gpu_service(usable, os_name, index, cuda)
    route = ("the fork's Windows wheels carry no kernels for it" if os_name == "windows"
             else "upstream builds no kernels for it")
    if not service.served:
        return [finding(service.code, "error",
                        "; ".join(f"{gpu_label(g)}: {route}" for g in service.unserved))]
    return [finding(service.code, "info", f"{gpu_label(g)}: {route}; it stays on PyTorch "
                    "attention", "", title="GPU not served by the install") for g in
            service.unserved]


def _check_sage_build(target: TargetFacts, gpu: GpuFacts | None, os_name: str,
                      index: WheelIndex) -> list[Finding]:
    out: list[Finding] = []
    sage = target.sageattention
    install = f"sagedoctor install --venv {quoted_prefix(target, os_name)}"
    if sage is None:
        out.append(finding("SD161", "error", f"not in {target.prefix}", install))
        return out
    version = parse_version(sage.version)
    major = version.release[0] if version else 0
    if major == 1:
        out.append(finding("SD162", "error", f"sageattention {sage.version} (SageAttention 1)",
                           install))
        return out
    torch = target.torch
    build = parse_sage_local(sage.version)
    if build is None:
        out.append(finding("SD166", "info", f"sageattention {sage.version}",
                           verify_command(target, os_name)))
    elif torch is not None:
        tb = torch_build_of(torch)
        built_torch = ".".join(map(str, build.torch)) + (" or newer" if build.and_higher else "")
        if tb.cuda_major is not None and tb.cuda_major != build.cuda_major:
            out.append(finding(
                "SD163", "error",
                f"built for CUDA {build.cuda_major} ({build.cuda_label}), you have torch "
                f"{tb.label} (CUDA {tb.cuda})", install))
        elif not sage_serves_torch(build, torch.version):
            out.append(finding(
                "SD163", "error",
                f"built for torch {built_torch}, you have torch {tb.label}", install))
    modules = set(sage.compiled_modules)
    missing_for: list[str] = []
    if "_fused" not in modules:
        missing_for.append("_fused (every GPU)")
    for g in usable_gpus(gpu.nvidia if gpu else (), os_name):
        for module in required_sage_modules(g.compute_capability or ""):
            if module not in modules:
                missing_for.append(f"{module} for {gpu_label(g)}")
    if missing_for:
        have = ", ".join(sorted(modules)) or "none"
        out.append(finding("SD164", "error", f"missing {'; '.join(missing_for)} (has: {have})",
                           install))
    problems = known_wheel_problems(target, index, os_name)
    if problems:
        out.append(finding("SD192", "error", f"sageattention {sage.version}: {problems}",
                           install))
    out.insert(0, finding("SD160", "ok", f"sageattention {sage.version} "
                          f"(compiled: {', '.join(sorted(modules)) or 'none'})"))
    return out


def recorded_wrong_sageattn(facts: Facts) -> tuple[WrongKernel, ...]:
    """GPUs on which verify found `sageattn()` wrong, for the build installed now."""
    record, target = facts.verification, facts.target
    if record is None or target is None or target.sageattention is None:
        return ()
    return record.wrong_sageattn if verification_is_current(record, target) else ()


def check_verification(facts: Facts, os_name: str) -> list[Finding]:
    """What the last verify found, and what keeps the start-up hook off."""
    record, target = facts.verification, facts.target
    out = []
    if record is not None and record.hook_problem is not None and target is not None:
        out.append(finding("SD136", "error", f"{record.hook_problem}: no Python of this venv "
                           "reads it, so the start-up hook is off",
                           f"sagedoctor disable --venv {quoted_prefix(target, os_name)}  (removes "
                           "it; then `sagedoctor enable` to switch the hook on)"))
    return out + _check_verification(facts, os_name)


def pyvenv_cfg_finding(lie: str, prefix: str, hooked: bool = False,
                       hook_note: str = "") -> Finding:
    """SD168 where pyvenv.cfg names another Python X.Y than the venv runs: check says it, and
    verify too, in the same words (a verify that passed would otherwise send enable's user
    back to verify, forever)."""
    return finding("SD168", "error" if hooked else "warn", f"{lie}{hook_note}",
                   f"fix the version line of pyvenv.cfg in {prefix} (or recreate the venv)")


def _check_verification(facts: Facts, os_name: str) -> list[Finding]:
    """What the last verify found, said again by every later check of the venv."""
    record, target = facts.verification, facts.target
    if record is None or target is None or target.sageattention is None:
        return []
    verify = verify_command(target, os_name)
    hooked = hooked_but_unverified(facts)
    hook_note = ("; the start-up hook is on, so the runtime keeps SageAttention off until a "
                 "verify passes" if hooked else "")
    if record.status != "verified":
        why = "its record does not parse" if record.status == "corrupt" else "no record"
        return [finding("SD169", "error" if hooked else "info",
                        f"{why}; nothing has proven this build on this GPU{hook_note}", verify)]
    if not verification_is_current(record, target):
        return [_stale_finding(record, target, hooked, hook_note, verify)]
    out = []
    if record.verdict == "routing" and record.arming_problem is not None:
        out.append(_arming_finding(record, record.arming_problem, verify))
    out += [_wrong_sageattn_finding(record, wrong, target, os_name)
            for wrong in record.wrong_sageattn]
    return out


def _stale_finding(record: VerificationFacts, target: TargetFacts, hooked: bool,
                   hook_note: str, verify: str) -> Finding:
    """SD168 where the venv changed since verify: what changed, or the pyvenv.cfg lie that a
    new verify would not cure."""
    lies = [c for c in record.changed if c.startswith(PYVENV_CFG_SAYS)]
    if lies:  # verify again would not help: pyvenv.cfg names another Python
        return pyvenv_cfg_finding(lies[0], target.prefix, hooked, hook_note)
    return finding("SD168", "error" if hooked else "warn",
                   f"verified on {record.verified_at} with sageattention "
                   f"{record.sageattention} and torch {record.torch}; "
                   f"{_changed_since(record, target)}{hook_note}", verify)


def _changed_since(record: VerificationFacts, target: TargetFacts) -> str:
    """What changed since verify, in words: Python, distributions' installed files, or (where
    the record names nothing) the versions installed now."""
    dists = [c for c in record.changed if not c.startswith("python ")]
    now = "; ".join([*(f"{c} since" for c in record.changed if c.startswith("python ")),
                     *([f"the installed files of {', '.join(dists)} changed since (another "
                        "build or reinstall, whatever its version says)"] if dists else [])])
    if now:
        return now
    sage = target.sageattention.version if target.sageattention else "none"
    torch = target.torch.version if target.torch else "none"
    return f"now {sage} and {torch}"


def _arming_finding(record: VerificationFacts, problem: str, verify: str) -> Finding:
    """SD168 where verify passed but its record cannot arm the hook."""
    # check reads the user-state copy, the hook the venv's: they must say the same
    return finding("SD168", "error" if record.hooked else "warn",
                   f"verify ({record.verified_at}) passed, but {problem}; "
                   + ("the start-up hook arms only from it, so SageAttention stays off"
                      if record.hooked else "`sagedoctor enable` would refuse"),
                   verify)


def _wrong_sageattn_finding(record: VerificationFacts, wrong: WrongKernel,
                            target: TargetFacts, os_name: str) -> Finding:
    """SD167: verify found `sageattn()` itself wrong on a GPU; the fix replaces the build."""
    route = ("the fork's wheel" if os_name == "windows"
             else "a source build of the pinned commit")
    return finding(
        "SD167", "error",
        f"verify ({record.verified_at}) found `sageattn()` "
        f"({wrong.kernel or 'its auto kernel'}) wrong on {wrong.name} "
        f"sm{wrong.arch.replace('.', '')} ({wrong.gpu}); ComfyUI --use-sage-attention, "
        "KJNodes and diffusers call it directly and get garbage images (the router "
        "does not use it)",
        f"sagedoctor install --venv {quoted_prefix(target, os_name)}  (replaces the build "
        f"with {route})")
