"""The Triton area: the Triton this torch needs here, installed or not."""

from __future__ import annotations

from ...facts import (
    Gpu,
    GpuFacts,
    TargetFacts,
)
from ...index import TritonRules
from ..findings import Finding, finding
from ..fixes import (
    has_pip,
    installer_command,
    linux_triton_fix,
    quoted_prefix,
    uninstall_command,
)
from ..matrix import (
    gpu_label,
    usable_gpus,
)
from ..triton import (
    TritonRequirement,
    triton_requirement,
)
from ..versions import (
    minor_of,
    torch_build_of,
)


def triton_problems(target: TargetFacts, gpus: list[Gpu], os_name: str,
                    triton_rules: TritonRules) -> tuple[TritonRequirement | None,
                                                       list[Finding]]:
    """The Triton requirement of this torch here and what the venv lacks against it: the one
    answer `check` reports and `plan` installs (or stops at)."""
    torch = target.torch
    if torch is None or torch_build_of(torch).kind != "cuda":
        return None, []
    req = triton_requirement(torch, gpus, os_name, triton_rules)
    if req.blocked and req.blocked_code != "SD202":
        return req, [finding(req.blocked_code or "SD202", "error", req.blocked, req.blocked_fix)]
    label = torch_build_of(torch).label
    windows = os_name == "windows"
    have_text = target.triton_windows if windows else target.triton
    package = req.package
    pip = installer_command(target, os_name, "install")
    want = f"{req.minor[0]}.{req.minor[1]}" if req.minor else None
    fix = f'{pip} "{req.requirement or package}"' if windows else linux_triton_fix(target, want)
    out = []
    if have_text is None:
        out.append(finding("SD151", "error", f"no {package} in {target.prefix}", fix))
    elif (req.spec is not None or req.minor is not None) and not req.satisfied_by(have_text):
        have = minor_of(have_text)
        turing = [g for g in gpus if g.compute_capability == "7.5"]
        need = req.requirement or f"Triton {want}"
        if windows and turing and not req.turing_left_out and have and have >= (3, 3):
            out.append(finding("SD154", "error", f"{gpu_label(turing[0])} with {package} "
                               f"{have_text}; torch {label} needs {need}", fix))
        else:
            out.append(finding("SD152", "error", f"torch {label} needs {need}; you have "
                               f"{package} {have_text}", fix))
    for g in req.turing_left_out:
        out.append(finding("SD148", "warn", f"{gpu_label(g)}: torch {label} needs "
                           f"{req.requirement}, and Triton dropped Turing in 3.3; this GPU "
                           "stays on PyTorch attention"))
    return req, out


def check_triton(target: TargetFacts, gpu: GpuFacts | None, os_name: str,
                 triton_rules: TritonRules) -> list[Finding]:
    out: list[Finding] = []
    torch = target.torch
    gpus = usable_gpus(gpu.nvidia if gpu else (), os_name)
    cuda = torch is not None and torch_build_of(torch).kind == "cuda"
    # Windows pairs triton-windows with torch's minor whatever its build: said now, so the
    # CUDA torch that SD142 asks for does not reveal it later
    req = (triton_requirement(torch, gpus, os_name, triton_rules)
           if torch is not None and (cuda or os_name == "windows") else None)
    if os_name == "windows" and target.triton:
        out.append(finding("SD153", "error", f"triton {target.triton} is installed",
                           _plain_triton_fix(target, req)))
    if torch is None or not cuda:
        info, mismatch = _not_matched(target, os_name, req)
        return [info, *out, *mismatch]
    req, problems = triton_problems(target, gpus, os_name, triton_rules)
    out += problems
    if any(f.code == "SD151" for f in problems):
        return out
    package = req.package if req else "triton"
    have_text = target.triton_windows if os_name == "windows" else target.triton
    if req is None or req.source == "unknown":
        note = f" (no known Triton pairing for torch {torch.version})"
    elif req.source != "index" and os_name == "windows" and req.spec is not None:
        note = f" (derived from torch's own pin: {req.requirement})"
    else:
        note = ""
    out.insert(0, finding("SD150", "ok", f"{package} {have_text or 'not installed'}{note}"))
    return out


def _not_matched(target: TargetFacts, os_name: str, req: TritonRequirement | None
                 ) -> tuple[Finding, list[Finding]]:
    """No CUDA torch to match a Triton to; on Windows the pairing with torch's minor holds
    whatever the build, so a triton-windows that breaks it is said now."""
    torch = target.torch
    what = ("no torch installed" if torch is None
            else f"torch {torch_build_of(torch).label} is not a CUDA build")
    info = finding("SD150", "info", f"not matched: {what}")
    if torch is not None and req is not None and req.spec is not None \
            and target.triton_windows and not req.satisfied_by(target.triton_windows):
        pip = installer_command(target, os_name, "install")
        return info, [finding("SD152", "error", f"torch {torch.version} needs "
                              f"{req.requirement}; you have {req.package} "
                              f"{target.triton_windows}", f'{pip} "{req.requirement}"')]
    return info, []


def _plain_triton_fix(target: TargetFacts, req: TritonRequirement | None) -> str:
    """triton and triton-windows share the folder triton/: removing one deletes the other's
    files, so triton-windows goes back in (forced) right after."""
    remove = uninstall_command(target, "windows", "triton")
    if req is None or req.requirement is None:
        return remove
    pip = installer_command(target, "windows", "install")
    again = "--force-reinstall" if has_pip(target) else f"--reinstall-package {req.package}"
    return (f"`sagedoctor install --venv {quoted_prefix(target, 'windows')}` (removes triton, puts "
            f"{req.package} back), or by hand: {remove}, then {pip} {again} "
            f'"{req.requirement}"')
