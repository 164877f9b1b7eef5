"""Windows: the fork's prebuilt wheel for this torch, CUDA and Python (woct0rdho's releases in
the index), and the triton-windows that goes with it. Pure."""

from __future__ import annotations

from packaging.version import Version

from ...facts import Facts, Gpu, TargetFacts
from ...index import WheelIndex, WindowsWheel, spec_text, wheel_supported_by
from ...plan import Step, WheelDownload
from ..checks.sage import recorded_wrong_sageattn
from ..checks.triton import triton_problems
from ..findings import Finding, finding
from ..fixes import torch_fix
from ..matrix import (
    gpu_label,
    gpu_service,
    torch_release,
)
from ..versions import (
    minor_of,
    parse_version,
    torch_build_of,
)
from .steps import cc_list, modules_complete, nvidia_gpus, public_label, sage_build_fits, wheel_tags


def _pick_windows_wheel(index: WheelIndex, target: TargetFacts, torch_cuda: str,
                        gpus: list[Gpu] | None = None) -> tuple[WindowsWheel | None, list[str]]:
    """The best wheel for this torch, CUDA major and Python, and why others were passed over."""
    torch_version = public_label(target.torch.version if target.torch else "")
    torch_cuda_v = parse_version(torch_cuda)
    if torch_cuda_v is None:  # a facts file or a damaged torch/version.py: no wheel fits
        return None, [f"torch's CUDA version {torch_cuda!r:.40} is not a version"]
    cuda_major = torch_cuda_v.release[0]
    tags = wheel_tags(target)
    candidates = []
    why_not: list[str] = []
    ccs = set(cc_list(gpus or []))
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
    public = public_label(target.torch.version)
    tags = wheel_tags(target)
    majors = {w.cuda_major for w in index.windows_wheels
              if w.torch.contains(public, prereleases=True) and wheel_supported_by(w, tags)
              and not w.problems}
    release = torch_release(public)
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


def resolve_windows(facts: Facts, target: TargetFacts, index: WheelIndex,
                     gpus: list[Gpu], rebuild: bool = False
                     ) -> tuple[list[Step], list[str], list[Finding]]:
    assert target.torch is not None
    build = torch_build_of(target.torch)
    torch_label = build.label
    if build.cuda is None:
        return [], [], [finding("SD201", "error", f"torch {torch_label}: CUDA version unknown")]

    steps, notes, stop = _triton_steps(target, index, gpus, torch_label)
    if stop is not None:
        return steps, notes, stop

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
    for g in nvidia_gpus(facts):
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


def _triton_steps(target: TargetFacts, index: WheelIndex, gpus: list[Gpu], torch_label: str
                  ) -> tuple[list[Step], list[str], list[Finding] | None]:
    """triton-windows for this torch (plain `triton` out first); a list (the blockers, maybe
    none) where the plan stops here, None where SageAttention's steps follow."""
    steps: list[Step] = []
    notes: list[str] = []
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
    return steps, notes, None


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
    minor = minor_of(target.torch.version if target.torch else None)
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
        return modules_complete(sage.compiled_modules, gpus)
    cuda_major = torch_build_of(target.torch).cuda_major
    for wheel in index.windows_wheels:
        if wheel.version == sage.version:
            return (not wheel.problems and wheel.cuda_major == cuda_major
                    and wheel.torch.contains(public_label(target.torch.version), prereleases=True)
                    and wheel_supported_by(wheel, wheel_tags(target))
                    and modules_complete(sage.compiled_modules, gpus))
    return sage_build_fits(target, gpus)
