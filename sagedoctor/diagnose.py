"""Facts -> findings. Pure: no I/O, no clock, no environment; every rule is testable on Linux
with a Windows profile."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import replace

from packaging.version import Version

from . import __version__, compat, rules
from .areas import AREAS
from .facts import (
    PYVENV_CFG_SAYS,
    ComfyUIFacts,
    Facts,
    Gpu,
    GpuFacts,
    InvokeAIFacts,
    SystemFacts,
    TargetFacts,
    ToolchainFacts,
    TorchFacts,
    VerificationFacts,
    WrongKernel,
)
from .findings import Finding, finding
from .index import TritonRules, WheelIndex, shipped_index
from .requirements import (
    describe_pending,
    gpu_service,
    hooked_but_unverified,
    invokeai_switch_pending,
    known_wheel_problems,
    public_version,
    recovery_fix,
    runtime_shortfall,
    verification_is_current,
)

_PROBE_AREA = {"system": "system", "gpu": "gpu", "target": "python", "toolchain": "toolchain",
               "invokeai": "invokeai", "comfyui": "comfyui"}
# Findings that make the plan install SageAttention (a wheel or a build).
_NEEDS_BUILD_CODES = frozenset({"SD161", "SD162", "SD163", "SD164", "SD167", "SD192"})


def quote(arg: str, os_name: str) -> str:
    """Quote a path or argument for the user's shell (cmd/PowerShell on Windows)."""
    if os_name == "windows":
        return f'"{arg}"' if any(c in arg for c in ' &()[]{}^=;!\'+,`~') else arg
    return shlex.quote(arg)


def exit_code(findings: Iterable[Finding]) -> int:
    """0 ready, 1 fixable problems, 2 cannot work on this machine."""
    items = list(findings)
    if any(f.fatal for f in items):
        return 2
    if any(f.severity == "error" for f in items):
        return 1
    return 0


def gpu_label(gpu: Gpu) -> str:
    cc = f"sm{gpu.compute_capability.replace('.', '')}" if gpu.compute_capability else "sm?"
    return f"GPU {gpu.index} {gpu.name} ({cc})"


def usable_gpus(gpus: Iterable[Gpu], os_name: str) -> list[Gpu]:
    """NVIDIA GPUs SageAttention 2 can run on: sm80+ except Orin; sm75 only on Windows."""
    out = []
    for gpu in gpus:
        cc = compat.cc_tuple(gpu.compute_capability)
        if gpu.vendor != "nvidia" or cc is None or cc == (8, 7):
            continue
        if cc >= (8, 0) or (cc == (7, 5) and os_name == "windows"):
            out.append(gpu)
    return out


def _os_name(facts: Facts) -> str:
    return facts.system.os if facts.system else "linux"


def torch_build_of(torch: TorchFacts) -> compat.TorchBuild:
    return compat.torch_build(torch.version, torch.full_version, torch.cuda, torch.hip)


def has_pip(target: TargetFacts) -> bool:
    """`python -m pip` works in the target (older facts files only know pip's version)."""
    if target.pip_importable is not None:
        return target.pip_importable
    return target.pip is not None


def installer_command(target: TargetFacts, os_name: str, verb: str) -> str:
    """`<python> -m pip <verb>`, or `uv pip <verb> --python <python>` where the venv has no pip
    (uv and launcher venvs); the arguments follow."""
    python = quote(target.executable, os_name)
    if has_pip(target):
        return f"{python} -m pip {verb}"
    return f"uv pip {verb} --python {python}"


def uninstall_command(target: TargetFacts, os_name: str, names: str) -> str:
    # pip asks for confirmation without -y; uv pip never asks and has no -y.
    if has_pip(target):
        return f"{installer_command(target, os_name, 'uninstall')} -y {names}"
    return f"{installer_command(target, os_name, 'uninstall')} {names}"


def torch_fix(target: TargetFacts, os_name: str, requirement: str, index_url: str,
              force: bool) -> str:
    """A torch command that always names its index, so the CUDA variant cannot change behind
    the user's back; an InvokeAI venv is repaired by its launcher, which knows the pins."""
    if force:
        flag = "--force-reinstall" if has_pip(target) else "--reinstall-package torch"
        args = f"{flag} {requirement}"
    else:
        args = requirement
    command = (f"{installer_command(target, os_name, 'install')} {args} "
               f"--index-url {index_url}")
    if target.invokeai is not None:
        return (f"InvokeAI venv: run the Invoke launcher's Repair (it reinstalls the torch "
                f"InvokeAI {target.invokeai.version} pins), or: {command}")
    return command


def _venv_arg(target: TargetFacts, os_name: str) -> str:
    return quote(target.prefix, os_name)


def verify_command(target: TargetFacts, os_name: str) -> str:
    """`sagedoctor verify` runs the runtime's self-test: without a runtime in the venv it
    cannot start, and the install (which verifies at its end) is the command to give."""
    if target.runtime is None:
        return (f"sagedoctor install --venv {_venv_arg(target, os_name)} (it bundles the "
                "runtime, then verifies)")
    return f"sagedoctor verify --venv {_venv_arg(target, os_name)}"


def linux_triton_fix(target: TargetFacts, want: str | None) -> str:
    """torch on Linux pins one triton: installing the same torch build again from its own
    index brings that triton back without changing torch."""
    assert target.torch is not None
    build = torch_build_of(target.torch)
    url = rules.torch_index_url(build, target.torch.version)
    if url is None:
        spec = f'"triton=={want}.*"' if want else "triton"
        return f"{installer_command(target, 'linux', 'install')} {spec}"
    return (torch_fix(target, "linux", f"torch=={build.label}", url, force=False)
            + " (this torch build again, which brings the triton it pins)")


# --- system -------------------------------------------------------------------------------

def check_system(system: SystemFacts) -> list[Finding]:
    out: list[Finding] = []
    if system.os == "windows":
        eleven = (system.windows_build or 0) >= 22000
        name = "Windows 11" if eleven else f"Windows {system.os_release}"
        label = f"{name} (build {system.windows_build}) {system.machine}"
    elif system.os == "linux":
        label = f"Linux {system.os_release} {system.machine}" + (" (WSL)" if system.wsl else "")
    else:
        label = f"{system.os} {system.os_release} {system.machine}"
    if system.os == "darwin":
        out.append(finding("SD101", "error", f"{label}: macOS has no CUDA", fatal=True))
    elif system.os not in ("linux", "windows"):
        out.append(finding("SD101", "error", f"{label} is not supported", fatal=True))
    elif system.os == "windows" and system.machine != "x86_64":
        out.append(finding("SD101", "error", f"{label}: no SageAttention wheels for Windows on "
                           f"{system.machine}", fatal=True))
    if system.wsl:
        out.append(finding("SD102", "info", label))
    out.insert(0, finding("SD100", "ok", f"{label}, {system.cpu_count} cores"
                          + (f", {system.memory_gib:g} GiB RAM" if system.memory_gib else "")))
    return out


# --- GPUs and driver -------------------------------------------------------------------------

def check_gpu(gpu: GpuFacts, os_name: str, target: TargetFacts | None) -> list[Finding]:
    out: list[Finding] = []
    nvidia = gpu.nvidia
    others = [g for g in gpu.gpus if g.vendor != "nvidia"]
    if not nvidia:
        notes = "; ".join(gpu.notes)
        if gpu.notes or gpu.source == "proc":
            driver = f"driver {gpu.driver_version} is loaded, but " if gpu.driver_version else ""
            return [finding("SD116", "error", f"{driver}{notes or 'no GPU was listed'}")]
        seen = ", ".join(f"{g.name}" for g in others)
        title = f"No NVIDIA GPU (found {seen})" if others else None
        detail = (f"found {seen}: SageAttention needs an NVIDIA GPU" if others
                  else "no NVIDIA GPU or driver found (NVML, nvidia-smi, /proc/driver/nvidia)")
        return [finding("SD111", "error", detail, title=title, fatal=True)]

    usable = usable_gpus(nvidia, os_name)
    for g in nvidia:
        cc = compat.cc_tuple(g.compute_capability)
        unused = " (it will not be used)" if usable else ""
        if cc is None:
            out.append(finding("SD115", "warn", f"{gpu_label(g)}: compute capability unknown"))
        elif cc == (8, 7):
            out.append(finding("SD114", "warn" if usable else "error", f"{gpu_label(g)}{unused}",
                               fatal=not usable))
        elif cc == (7, 5):
            if os_name == "windows":
                out.append(finding("SD113", "warn", f"{gpu_label(g)}: Triton kernels only",
                                   "Nothing to install for the GPU itself: the Triton finding "
                                   "names the triton-windows that serves it with this torch."))
            else:
                out.append(finding("SD113", "warn" if usable else "error",
                                   f"{gpu_label(g)}: upstream Linux builds reject sm75; "
                                   f"SageAttention needs compute capability 8.0 or newer here"
                                   f"{unused}", "Use a GPU of compute capability 8.0 or newer "
                                   "(RTX 30xx, A100 or newer).", fatal=not usable))
        elif cc < (8, 0):
            need = ("8.0 or newer (7.5 through Triton on Windows)" if os_name == "windows"
                    else "8.0 or newer")
            out.append(finding("SD112", "warn" if usable else "error",
                               f"{gpu_label(g)} has compute capability {g.compute_capability}; "
                               f"SageAttention needs {need}{unused}", fatal=not usable))

    listing = "; ".join(
        f"{gpu_label(g)}" + (f", {g.memory_mib // 1024} GiB" if g.memory_mib else "")
        for g in nvidia
    )
    driver = f"driver {gpu.driver_version}" if gpu.driver_version else "driver unknown"
    out.insert(0, finding("SD110", "ok", f"{listing}; {driver} (via {gpu.source})"))

    torch = target.torch if target else None
    if torch is not None:
        build = torch_build_of(torch)
        major = build.cuda_major
        if build.kind == "cuda" and major is not None:
            minimum = compat.min_driver_for_cuda(major, os_name)
            if gpu.driver_version is None:
                out.append(finding("SD121", "warn", f"torch {build.label} needs driver "
                                   f"{minimum} or newer; the driver version was not found"))
            elif minimum and compat.driver_satisfies(gpu.driver_version, minimum) is False:
                out.append(finding(
                    "SD120", "error",
                    f"torch {build.label} is built for CUDA {build.cuda} and needs driver "
                    f"{minimum} or newer; you have {gpu.driver_version}",
                    _driver_fix(target, gpu, os_name, minimum) if target else None,
                ))
    return out


def _driver_majors(driver: str | None, os_name: str) -> set[int] | None:
    """CUDA majors this driver runs (None: the driver version is unknown)."""
    if driver is None:
        return None
    return {major for major in (11, 12, 13)
            if (need := compat.min_driver_for_cuda(major, os_name))
            and compat.driver_satisfies(driver, need)}


def _driver_fix(target: TargetFacts, gpu: GpuFacts, os_name: str, minimum: str) -> str:
    """Update the driver, or the same torch built for a CUDA this driver runs (the matrix's)."""
    assert target.torch is not None
    update = f"Update the NVIDIA driver to {minimum} or newer"
    ccs = [g.compute_capability for g in gpu.nvidia if g.compute_capability]
    variant = rules.pick_variant(target.torch.version, ccs,
                                 _driver_majors(gpu.driver_version, os_name))
    public = public_version(target.torch.version) or target.torch.version
    if variant is None:
        return f"{update}: no torch {public} build runs on driver {gpu.driver_version}."
    return (f"{update}, or install torch {public} built for CUDA {variant.cuda}: "
            + torch_fix(target, os_name, f"torch=={public}", variant.index_url, force=True))


# --- the target interpreter ----------------------------------------------------------------

def check_python(target: TargetFacts, os_name: str) -> list[Finding]:
    out: list[Finding] = []
    kind = "venv" if target.is_venv else "not a venv"
    out.append(finding("SD130", "ok", f"Python {target.python_version} "
                       f"({target.implementation}, {kind}) at {target.executable}"))
    version = compat.parse_version(target.python_version)
    if version is None or not (3, 9) <= version.release[:2] <= (3, 14):
        out.append(finding("SD133", "error", f"Python {target.python_version}"))
    if os_name == "windows":
        missing = []
        if not target.has_python_h:
            missing.append(f"{target.include_dir}\\Python.h")
        if target.has_python_lib is False and target.libs_dir:
            major_minor = "".join(target.python_version.split(".")[:2])
            missing.append(f"{target.libs_dir}\\python{major_minor}.lib")
        if missing:
            out.append(finding("SD131", "error", "missing: " + ", ".join(missing)))
    if not target.site_packages_writable:
        out.append(finding("SD132", "error", f"{target.site_packages} is not writable"))
    if not target.is_venv:
        out.append(finding("SD134", "info", f"{target.prefix} is a base interpreter"))
    return out


def check_interrupted(facts: Facts, os_name: str) -> list[Finding]:
    """A journal a killed install left: the venv may be half-installed (SD199)."""
    pending, target = facts.interrupted_install, facts.target
    if pending is None or target is None:
        return []
    fix = ("wait for it to finish, then run `sagedoctor check` again" if pending.running
           else recovery_fix(f"--venv {_venv_arg(target, os_name)}"))
    return [finding("SD199", "error", describe_pending(pending), fix)]


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
               and not rules.build_serves(build, torch.version, g.compute_capability, machine)]
    if not lacking:
        return []
    public = public_version(torch.version) or torch.version
    everyone = [g.compute_capability for g in (*all_gpus, *lacking) if g.compute_capability]
    variant = None if machine != "x86_64" else (
        rules.pick_variant(torch.version, everyone)
        or rules.pick_variant(torch.version, [g.compute_capability or "" for g in lacking]))
    if variant is not None:
        fix = torch_fix(target, os_name, f"torch=={public}", variant.index_url, force=True)
        nvcc = compat.minor_of(nvcc_version) if os_name == "linux" else None
        nvcc_major = nvcc[0] if nvcc else None
        if nvcc_major is not None and nvcc_major != variant.cuda_major:
            # the source build then needs a toolkit of the new torch's CUDA major (SD173)
            fix = (f"Install a CUDA {variant.cuda_major} toolkit for the source build too "
                   f"(nvcc {nvcc_version} is CUDA {nvcc_major}), and: {fix}")
    else:
        newest = rules.newest_torch_serving([g.compute_capability or "" for g in lacking]) \
            if machine == "x86_64" else None
        fix = (f"No torch {public} build has kernels for it; torch {newest[0]} ({newest[1].label})"
               f" is the newest that does: "
               + torch_fix(target, os_name, f"torch=={newest[0]}.*", newest[1].index_url,
                           force=True) if newest else
               "Install a torch build for this GPU (see https://pytorch.org/get-started/), or "
               "use a GPU this torch serves.")
    variant_now = rules.variant_of(build, torch.version) if machine == "x86_64" else None
    covers = (f" (its kernels: sm{', sm'.join(a.replace('.', '') for a in variant_now.archs)})"
              if variant_now else "")
    return [finding("SD144", "error", f"torch {build.label} (CUDA {build.cuda}){covers} has no "
                    f"kernels for {gpu_label(g)}", fix) for g in lacking]


def check_torch(target: TargetFacts, gpu: GpuFacts | None, os_name: str,
                machine: str = "x86_64", nvcc_version: str | None = None) -> list[Finding]:
    torch = target.torch
    if torch is None:
        return [finding("SD141", "error", f"no torch in {target.prefix}")]
    build = torch_build_of(torch)
    nvidia = gpu.nvidia if gpu else ()
    out: list[Finding] = []
    public = compat.parse_version(torch.version)
    public_text = public.public if public else torch.version
    if build.kind == "cpu":
        if nvidia:
            ccs = [g.compute_capability for g in nvidia if g.compute_capability]
            variant = (rules.pick_variant(torch.version, ccs, _driver_majors(
                gpu.driver_version if gpu else None, os_name)) or rules.pick_variant(
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


def triton_problems(target: TargetFacts, gpus: list[Gpu], os_name: str,
                    triton_rules: TritonRules) -> tuple[rules.TritonRequirement | None,
                                                       list[Finding]]:
    """The Triton requirement of this torch here and what the venv lacks against it: the one
    answer `check` reports and `plan` installs (or stops at)."""
    torch = target.torch
    if torch is None or torch_build_of(torch).kind != "cuda":
        return None, []
    req = rules.triton_requirement(torch, gpus, os_name, triton_rules)
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
        have = compat.minor_of(have_text)
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
    req = (rules.triton_requirement(torch, gpus, os_name, triton_rules)
           if torch is not None and (cuda or os_name == "windows") else None)
    if os_name == "windows" and target.triton:
        out.append(finding("SD153", "error", f"triton {target.triton} is installed",
                           _plain_triton_fix(target, req)))
    if torch is None or not cuda:
        what = ("no torch installed" if torch is None
                else f"torch {torch_build_of(torch).label} is not a CUDA build")
        if torch is not None and req is not None and req.spec is not None \
                and target.triton_windows and not req.satisfied_by(target.triton_windows):
            pip = installer_command(target, os_name, "install")
            out.append(finding("SD152", "error", f"torch {torch.version} needs "
                               f"{req.requirement}; you have {req.package} "
                               f"{target.triton_windows}", f'{pip} "{req.requirement}"'))
        return [finding("SD150", "info", f"not matched: {what}"), *out]
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


def _plain_triton_fix(target: TargetFacts, req: rules.TritonRequirement | None) -> str:
    """triton and triton-windows share the folder triton/: removing one deletes the other's
    files, so triton-windows goes back in (forced) right after."""
    remove = uninstall_command(target, "windows", "triton")
    if req is None or req.requirement is None:
        return remove
    pip = installer_command(target, "windows", "install")
    again = "--force-reinstall" if has_pip(target) else f"--reinstall-package {req.package}"
    return (f"`sagedoctor install --venv {_venv_arg(target, 'windows')}` (removes triton, puts "
            f"{req.package} back), or by hand: {remove}, then {pip} {again} "
            f'"{req.requirement}"')


def check_sageattention(target: TargetFacts, gpu: GpuFacts | None, os_name: str,
                        index: WheelIndex | None = None,
                        runtime_version: str = __version__) -> list[Finding]:
    index = index or shipped_index()
    out = _check_sage_build(target, gpu, os_name, index)
    install = f"sagedoctor install --venv {_venv_arg(target, os_name)}"
    if any(f.code in _NEEDS_BUILD_CODES for f in out):
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
    install = f"sagedoctor install --venv {_venv_arg(target, os_name)}"
    if sage is None:
        out.append(finding("SD161", "error", f"not in {target.prefix}", install))
        return out
    version = compat.parse_version(sage.version)
    major = version.release[0] if version else 0
    if major == 1:
        out.append(finding("SD162", "error", f"sageattention {sage.version} (SageAttention 1)",
                           install))
        return out
    torch = target.torch
    build = compat.parse_sage_local(sage.version)
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
        elif not compat.sage_serves_torch(build, torch.version):
            out.append(finding(
                "SD163", "error",
                f"built for torch {built_torch}, you have torch {tb.label}", install))
    modules = set(sage.compiled_modules)
    missing_for: list[str] = []
    if "_fused" not in modules:
        missing_for.append("_fused (every GPU)")
    for g in usable_gpus(gpu.nvidia if gpu else (), os_name):
        for module in compat.required_sage_modules(g.compute_capability or ""):
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


def check_toolchain(tool: ToolchainFacts, target: TargetFacts | None, gpu: GpuFacts | None,
                    os_name: str, needs_build: bool, index: WheelIndex) -> list[Finding]:
    if os_name == "windows":
        return [finding("SD170", "ok", "not needed: Windows installs use prebuilt wheels")]
    severity = "warn" if needs_build else "info"
    why = " (a source build is needed)" if needs_build else " (needed only to build from source)"
    out: list[Finding] = []
    if tool.nvcc_path is None or tool.nvcc_version is None:
        out.append(finding("SD171", severity, "no nvcc under CUDA_HOME, CUDA_PATH, PATH or "
                           f"/usr/local/cuda{why}"))
    else:
        nvcc = compat.parse_version(tool.nvcc_version)
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
        standard, standard_why = rules.cxx_standard_for(target.torch)
        for problem in rules.cxx_toolchain_problems(standard, tool.gcc_version,
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


def check_invokeai(facts: Facts) -> list[Finding]:
    inv = facts.invokeai
    if inv is None:
        return []
    if inv.root is None:
        return [finding("SD181", "info", "no InvokeAI install found")]
    out: list[Finding] = []
    package = facts.target.invokeai if facts.target else None
    config = (f"invokeai.yaml schema {inv.schema_version or '?'}, attention_type "
              f"{inv.attention_type or 'auto (default)'}" if inv.config_exists
              else "no invokeai.yaml yet")
    if package is None and inv.marked is False:
        source = inv.root_source
        return [finding("SD180", "ok", f"no InvokeAI at {inv.root} (from {source})"),
                finding("SD186", "warn", f"{inv.root} (from {source}) holds no invokeai.yaml, "
                        "no launcher marker and no invokeai package in a .venv")]
    if package is not None:
        version = f"InvokeAI {package.version}"
    elif facts.target is not None and inv.venv is not None and facts.target.prefix == inv.venv:
        version = "InvokeAI root (its venv holds no invokeai package)"
    else:
        version = "InvokeAI (its venv not inspected" + (
            f": the target is {facts.target.prefix})" if facts.target else ")")
    out.append(finding("SD180", "ok", f"{version} at {inv.root} (from {inv.root_source}); "
                       f"{config}"))
    pending = invokeai_switch_pending(facts)
    if inv.root_source == "--root" and not inv.installed and not inv.config_exists:
        # The plan's edit would create invokeai.yaml in a folder InvokeAI never reads.
        out.append(finding("SD197", "error" if pending else "warn",
                           f"{inv.root} (from --root) holds no invokeai.yaml and no .venv"))
    if inv.config_error:
        # The plan's edit step would meet this file: the plan blocks on it, so check says so.
        out.append(finding("SD183", "error" if pending else "warn", inv.config_error))
    elif pending is not None and facts.target is not None:
        os_name = facts.system.os if facts.system else "linux"
        out.append(finding("SD193", "error", f"{inv.config_path or 'invokeai.yaml'} does not "
                           f"set attention_backend: {pending}",
                           f"sagedoctor install --venv {_venv_arg(facts.target, os_name)}"))
    if inv.attention_type == "sliced":
        out.append(finding("SD185", "warn", f"{inv.config_path} sets attention_type: sliced"))
    out += launcher_update_findings(inv, facts.verification,
                                    facts.system.os if facts.system else "linux")
    if package is not None and package.attention_backend_supported is False:
        out.append(finding("SD182", "info", f"InvokeAI {package.version}"))
        if inv.attention_backend is not None:
            out.append(finding("SD184", "error",
                               f"{inv.config_path} sets attention_backend: "
                               f"{inv.attention_backend}"))
    return out


def runs_comfyui(comfy: ComfyUIFacts, target: TargetFacts | None, os_name: str) -> bool:
    """Whether the inspected target is the Python this ComfyUI runs."""
    if target is None or comfy.python is None:
        return False

    def norm(path: str) -> str:
        return path.casefold().replace("/", "\\") if os_name == "windows" else path

    python, prefix = norm(comfy.python), norm(target.prefix).rstrip("/\\")
    return python == norm(target.executable) or python.startswith(prefix + (
        "\\" if os_name == "windows" else "/"))


def _pth_lists(comfy: ComfyUIFacts, folder: str, os_name: str) -> bool:
    """Whether the ._pth puts ``folder`` on sys.path (its lines are relative to its own
    folder, as CPython reads them)."""
    import ntpath
    import posixpath

    paths = ntpath if os_name == "windows" else posixpath
    base = paths.dirname(comfy.pth_file or "")

    def norm(path: str) -> str:
        normal = str(paths.normpath(path))
        return normal.casefold() if os_name == "windows" else normal

    return norm(folder) in {norm(paths.join(base, line)) for line in comfy.pth_paths}


def _comfyui_summary(comfy: ComfyUIFacts, target: TargetFacts | None, os_name: str) -> str:
    kind = {"portable": "portable build", "desktop": "ComfyUI Desktop",
            "clone": "git clone"}.get(comfy.layout, comfy.layout)
    version = f"ComfyUI {comfy.version}" if comfy.version else "ComfyUI (version unknown)"
    python = comfy.python or "no Python found"
    if runs_comfyui(comfy, target, os_name) and target is not None:
        embedded = "embedded " if comfy.layout == "portable" else ""
        python = f"{embedded}Python {target.python_version} at {comfy.python}"
    flag = {True: "supported", False: "not in this version", None: "support unknown"}[
        comfy.sage_flag_supported]
    on = f", on in {', '.join(comfy.sage_flag_in)}" if comfy.sage_flag_in else ""
    return (f"{version} ({kind}) at {comfy.root} (from {comfy.source}); runs {python}; "
            f"{SAGE_FLAG}: {flag}{on}")


SAGE_FLAG = "--use-sage-attention"


def check_comfyui(facts: Facts, os_name: str) -> list[Finding]:
    """ComfyUI: what it is, the Python it runs, and its own switch against verify's record."""
    comfy, target = facts.comfyui, facts.target
    if comfy is None:
        if "comfyui" in facts.areas and facts.failure_for("comfyui") is None:
            return [finding("SD221", "info", "no ComfyUI found (--comfyui DIR, the target's "
                            "folder, ComfyUI Desktop's config.json)")]
        return []
    out = [finding("SD220", "ok", _comfyui_summary(comfy, target, os_name))]
    folder = quote(comfy.root, os_name)
    ours = runs_comfyui(comfy, target, os_name)
    if comfy.problem:
        out.append(finding("SD226", "warn", comfy.problem))
    if not ours and comfy.python:
        where = target.prefix if target else "none"
        out.append(finding("SD227", "info", f"ComfyUI runs {comfy.python}; this check "
                           f"inspected {where}", f"sagedoctor check --comfyui {folder}"))
    if comfy.pth_file and comfy.pth_imports_site is False:
        if ours and target is not None and not _pth_lists(comfy, target.site_packages, os_name):
            out.append(finding("SD228", "error", f"{comfy.pth_file} neither imports site nor "
                               f"lists {target.site_packages}: nothing installed there can be "
                               "imported"))
        else:
            out.append(finding("SD225", "warn", f"{comfy.pth_file} has no `import site` line: "
                               "this Python never reads site-packages' .pth files"))
    where = ", ".join(comfy.sage_flag_in)
    if comfy.sage_flag_in and comfy.sage_flag_supported is False:
        # A warning: no install fixes a launcher, so an error would leave check and plan
        # disagreeing (check 1, plan empty); the detail says what happens at start.
        out.append(finding("SD224", "warn", f"{where} passes {SAGE_FLAG}, which ComfyUI "
                           f"{comfy.version or '(this version)'} does not declare: it stops "
                           "at start with 'unrecognized arguments'"))
    if comfy.sage_flag_in and ours:
        install = f"sagedoctor install --comfyui {folder}"
        for wrong in recorded_wrong_sageattn(facts):
            out.append(finding(
                "SD222", "error",
                f"ComfyUI starts with {SAGE_FLAG} ({where}), and verify found `sageattn()` "
                f"({wrong.kernel or 'its auto kernel'}) wrong on {wrong.name} "
                f"sm{wrong.arch.replace('.', '')}: every image it makes is garbage",
                f"{install}  (replaces the build); until then remove {SAGE_FLAG} from {where}"))
        record = facts.verification
        if (record is not None and record.status == "verified" and target is not None
                and verification_is_current(record, target) and record.verdict == "sdpa-only"
                and not recorded_wrong_sageattn(facts)):
            out.append(finding(
                "SD223", "warn",
                f"ComfyUI starts with {SAGE_FLAG} ({where}), but verify "
                f"({record.verified_at}) found no SageAttention kernel faster than SDPA on "
                "this GPU at the shapes it measured: the flag makes attention slower",
                f"remove {SAGE_FLAG} from {where}; `sagedoctor enable --comfyui {folder}` "
                "routes only where verify proved a gain"))
    return out


def _after(when: str | None, than: str | None) -> bool:
    """Whether ISO time `when` is later than `than` (no `than`: yes)."""
    import datetime

    if when is None:
        return False
    if than is None:
        return True
    try:
        a, b = datetime.datetime.fromisoformat(when), datetime.datetime.fromisoformat(than)
        if (a.tzinfo is None) != (b.tzinfo is None):
            return True  # not comparable: say it rather than stay silent
        return a > b
    except ValueError:
        return True


def launcher_update_findings(inv: InvokeAIFacts, record: VerificationFacts | None,
                             os_name: str) -> list[Finding]:
    """InvokeAI's launcher markers newer than the last verify: torch may have changed."""
    verified_at = record.verified_at if record is not None and record.status == "verified" \
        else None
    separator = "\\" if os_name == "windows" else "/"
    venv = inv.venv or (f"{inv.root}{separator}.venv" if inv.root else "VENV")
    fix = f"sagedoctor post-update --venv {quote(venv, os_name)}"
    out = []
    if _after(inv.first_run_at, verified_at):
        out.append(finding("SD187", "warn", f"the launcher installed or updated InvokeAI at "
                           f"{inv.first_run_at} (its .first_run marker)"
                           + (f"; last verify {verified_at}" if verified_at else
                              "; no verify since"), fix))
    if verified_at is not None and _after(inv.bootstrap_changed_at, verified_at):
        out.append(finding("SD188", "warn", f".launcher-bootstrap changed at "
                           f"{inv.bootstrap_changed_at}; last verify {verified_at}", fix))
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
        out.append(finding("SD194", "error", f"{record.hook_problem}: no Python of this venv "
                           "reads it, so the start-up hook is off",
                           f"sagedoctor disable --venv {_venv_arg(target, os_name)}  (removes "
                           "it; then `sagedoctor enable` to switch the hook on)"))
    return out + _check_verification(facts, os_name)


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
        sage = target.sageattention.version
        torch = target.torch.version if target.torch else "none"
        lies = [c for c in record.changed if c.startswith(PYVENV_CFG_SAYS)]
        if lies:  # verify again would not help: pyvenv.cfg names another Python
            return [finding("SD168", "error" if hooked else "warn", f"{lies[0]}{hook_note}",
                            f"fix the version line of pyvenv.cfg in {target.prefix} (or "
                            "recreate the venv)")]
        dists = [c for c in record.changed if not c.startswith("python ")]
        now = "; ".join([*(f"{c} since" for c in record.changed if c.startswith("python ")),
                         *([f"the installed files of {', '.join(dists)} changed since (another "
                            "build or reinstall, whatever its version says)"] if dists else [])]
                        ) or f"now {sage} and {torch}"
        return [finding("SD168", "error" if hooked else "warn",
                        f"verified on {record.verified_at} with sageattention "
                        f"{record.sageattention} and torch {record.torch}; {now}{hook_note}",
                        verify)]
    out = []
    if record.verdict == "routing" and record.arming_problem is not None:
        # check reads the user-state copy, the hook the venv's: they must say the same
        out.append(finding("SD168", "error" if record.hooked else "warn",
                           f"verify ({record.verified_at}) passed, but {record.arming_problem}; "
                           + ("the start-up hook arms only from it, so SageAttention stays off"
                              if record.hooked else "`sagedoctor enable` would refuse"),
                           verify))
    for wrong in record.wrong_sageattn:
        route = ("the fork's wheel" if os_name == "windows"
                 else "a source build of the pinned commit")
        out.append(finding(
            "SD167", "error",
            f"verify ({record.verified_at}) found `sageattn()` "
            f"({wrong.kernel or 'its auto kernel'}) wrong on {wrong.name} "
            f"sm{wrong.arch.replace('.', '')} ({wrong.gpu}); ComfyUI --use-sage-attention, "
            "KJNodes and diffusers call it directly and get garbage images (the router "
            "does not use it)",
            f"sagedoctor install --venv {_venv_arg(target, os_name)}  (replaces the build "
            f"with {route})"))
    return out


def diagnose(facts: Facts, index: WheelIndex | None = None,
             runtime_version: str = __version__) -> list[Finding]:
    """Every finding for the facts at hand, in area order; areas without facts are skipped.

    The index supplies the Triton pairing and nvcc minimums (default: the shipped one)."""
    index = index or shipped_index()
    os_name = _os_name(facts)
    out: list[Finding] = []
    if facts.system:
        out += check_system(facts.system)
    if facts.gpu:
        out += check_gpu(facts.gpu, os_name, facts.target)
    sage: list[Finding] = []
    if facts.target:
        out += check_python(facts.target, os_name)
        out += check_interrupted(facts, os_name)
        out += check_torch(facts.target, facts.gpu, os_name,
                           facts.system.machine if facts.system else "x86_64",
                           facts.toolchain.nvcc_version if facts.toolchain else None)
        out += check_triton(facts.target, facts.gpu, os_name, index.triton)
        sage = check_sageattention(facts.target, facts.gpu, os_name, index, runtime_version)
        sage += check_verification(facts, os_name)
        out += sage
    if facts.toolchain:
        needs_build = any(f.code in _NEEDS_BUILD_CODES for f in sage)
        out += check_toolchain(facts.toolchain, facts.target, facts.gpu, os_name, needs_build,
                               index)
    out += check_invokeai(facts)
    out += check_comfyui(facts, os_name)
    for failure in facts.probe_failures:
        area = _PROBE_AREA.get(failure.area, failure.area)
        out.append(finding("SD190", "error", failure.message, area=area,
                           title=f"Could not check {area}"))
    if facts.comfyui is not None and runs_comfyui(facts.comfyui, facts.target, os_name):
        out = for_comfyui_target(out, facts.comfyui, facts.target, os_name)
    order = {a: i for i, a in enumerate(AREAS)}
    return sorted(out, key=lambda f: order.get(f.area, len(order)))  # stable within an area


def for_comfyui_target(findings: list[Finding], comfy: ComfyUIFacts,
                       target: TargetFacts | None, os_name: str) -> list[Finding]:
    """ComfyUI's own Python is the app's interpreter, not a system one: no SD134 for the
    portable build's embedded Python, and fix commands name it by --comfyui DIR (an embedded
    Python has no venv that --venv could name)."""
    assert target is not None
    venv = f"--venv {_venv_arg(target, os_name)}"
    ours = f"--comfyui {quote(comfy.root, os_name)}"
    out = []
    for f in findings:
        if f.code == "SD134" and comfy.layout == "portable":
            continue
        if f.code == "SD141":  # no torch in ComfyUI's own Python: its requirements bring it
            f = replace(f, fix=f"Install ComfyUI's requirements into {target.executable} "
                        "first (they bring its torch)")
        out.append(replace(f, fix=f.fix.replace(venv, ours)) if venv in f.fix else f)
    return out


def findings_for_areas(findings: Iterable[Finding], areas: Iterable[str]) -> list[Finding]:
    wanted = set(areas)
    return [f for f in findings if f.area in wanted]
