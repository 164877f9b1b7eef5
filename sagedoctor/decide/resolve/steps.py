"""What every plan shares, whatever the OS: its options, the clean-up of leftovers first, the
runtime and the verify last, and the roll-back of an interrupted install. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath

from packaging.tags import cpython_tags
from packaging.version import Version

from ... import __version__
from ...facts import Facts, Gpu, TargetFacts
from ...plan import Step, Switch
from ...runtime.files import HOOK_FILE
from ..app_switch import choose_invokeai_switch
from ..matrix import required_sage_modules
from ..requirements import (
    describe_pending,
    hooked_but_unverified,
    invokeai_sage_choice,
    invokeai_switch_pending,
    invokeai_switch_reset,
    runtime_shortfall,
)
from ..versions import (
    cc_tuple,
    parse_sage_local,
    parse_version,
    sage_serves_torch,
    torch_build_of,
)

RUNTIME_DIST = "sagedoctor-runtime"


@dataclass(frozen=True)
class ResolveOptions:
    source_dir: str | None = None  # build this folder instead of the pinned commit (Linux)
    use_linux_indexes: bool = True
    enable_invokeai: bool = True
    # --use app|sagedoctor: which switch routes an app that has its own (None: the better one)
    use: str | None = None
    runtime_version: str = __version__
    # post-update: the installed build stopped working (it no longer imports after a torch
    # change), so it is replaced even where its files look complete.
    rebuild: bool = False


def wheel_tags(target: TargetFacts) -> tuple[str, ...]:
    if target.tags:
        return target.tags
    version = parse_version(target.python_version)
    if version is None:
        return ()
    return tuple(str(t) for t in cpython_tags(version.release[:2], platforms=["win_amd64"]))


def public_label(version: str) -> str:
    parsed = parse_version(version)
    return parsed.public if parsed else version


def cc_list(gpus: list[Gpu]) -> list[str]:
    return sorted({g.compute_capability for g in gpus if g.compute_capability},
                  key=lambda cc: cc_tuple(cc) or (0, 0))


def nvidia_gpus(facts: Facts) -> tuple[Gpu, ...]:
    return facts.gpu.nvidia if facts.gpu else ()


def cuda_home_of(facts: Facts) -> str | None:
    # Only a validated folder (bin/nvcc and include/cuda_runtime.h): nvcc's parent's parent
    # may be /usr/local of a wrapper script, whose missing headers fail the build late.
    return facts.toolchain.cuda_home if facts.toolchain else None


def cleanup_steps(target: TargetFacts) -> list[Step]:
    steps: list[Step] = []
    sage = target.sageattention
    if sage is not None and (parse_version(sage.version) or Version("0")).major == 1:
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


def final_steps(facts: Facts, target: TargetFacts, options: ResolveOptions,
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
        choice = invokeai_switch_pending(facts, options.use)
        sage = invokeai_sage_choice(facts)
        if sage is not None:
            switch = choose_invokeai_switch(facts, options.use)
            if choice is not None:
                steps.append(Step(
                    "enable-invokeai", f"Set attention_backend: {choice} in invokeai.yaml",
                    f"InvokeAI {package.version} has an attention_backend setting; "
                    f"{switch.why}",
                    paths=(inv.config_path,) if inv.config_path else (),
                    config=(("attention_backend", choice),)))
            elif switch.use == "sagedoctor":
                reset = invokeai_switch_reset(facts, options.use)
                hooked = facts.verification is not None and facts.verification.hooked
                hook = "the start-up hook is on" if hooked else \
                    "`sagedoctor enable` turns the hook on"
                if reset is not None:
                    # The hook stands aside while InvokeAI's own switch is on: turned off
                    # through the same edit (backup, InvokeAI's loader, undone on rollback).
                    steps.append(Step(
                        "enable-invokeai", f"Set attention_backend: {reset} in invokeai.yaml "
                        f"(was {sage}: sagedoctor's hook routes instead)",
                        f"InvokeAI's own switch and sagedoctor's hook would both route, and "
                        f"the hook stands aside while it is on: {switch.why}; {hook}",
                        paths=(inv.config_path,) if inv.config_path else (),
                        config=(("attention_backend", reset),)))
                else:
                    on = (f"; {inv.config_path} sets attention_backend: {sage} now, and this "
                          "InvokeAI offers no other value to set: the hook stands aside while "
                          "it does" if inv.attention_backend == sage else "")
                    notes.append(f"InvokeAI {package.version}: attention_backend: {sage} is "
                                 f"not written: {switch.why}{on}; {hook}")
        elif package.attention_backend_unread is not None:
            notes.append(f"InvokeAI {package.version} declares attention_backend, but "
                         f"{package.attention_backend_unread}: nothing is written to "
                         "invokeai.yaml; `sagedoctor enable` turns the runtime on through a "
                         "start-up hook")
        else:
            notes.append(f"InvokeAI {package.version} has no attention_backend setting: "
                         "`sagedoctor enable` turns the runtime on through a start-up hook")
    if inv is not None and inv.attention_type == "sliced":
        notes.append(f"{inv.config_path} sets attention_type: sliced; SD1.5/SDXL then never "
                     "call SDPA, so the runtime cannot speed them up (set it to auto)")
    steps += hook_path_steps(facts, target)
    if changed or steps:
        steps.append(Step("verify", "Verify in the target venv",
                          "check every kernel against SDPA on each GPU and time it"))
    elif hooked_but_unverified(facts):
        steps.append(Step("verify", "Verify in the target venv",
                          "the start-up hook is on and no verify covers the build installed "
                          "now, so the runtime keeps SageAttention off until one passes"))
    return steps, notes


def hook_path_steps(facts: Facts, target: TargetFacts) -> list[Step]:
    """Something that is no file at the start-up hook's path (a folder, a FIFO) keeps the hook
    off, as check says (SD136): the install moves it aside, so check and plan agree."""
    record = facts.verification
    if record is None or record.hook_problem is None or not target.site_packages:
        return []
    windows = facts.system is not None and facts.system.os == "windows"
    site = PureWindowsPath(target.site_packages) if windows else PurePosixPath(
        target.site_packages)
    return [Step("remove-hook", "Move aside what is at the start-up hook's path",
                 f"{record.hook_problem}: it keeps the start-up hook off; `sagedoctor enable` "
                 "writes the hook after the install", paths=(str(site / HOOK_FILE),))]


def app_switches(facts: Facts, options: ResolveOptions) -> tuple[Switch, ...]:
    """The switch chosen for each app here that has one of its own (the plan's --json)."""
    target = facts.target
    if not options.enable_invokeai or target is None or target.invokeai is None \
            or invokeai_sage_choice(facts) is None:
        return ()
    choice = choose_invokeai_switch(facts, options.use)
    return (Switch(choice.app, choice.use, choice.why, choice.forced),)


def recover_steps(facts: Facts) -> tuple[list[Step], list[str]]:
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


def sage_build_fits(target: TargetFacts, gpus: list[Gpu]) -> bool:
    """SageAttention 2 whose label (if any) matches torch, with every module the GPUs need:
    what `check` asks of a build (SD162, SD163, SD164)."""
    sage = target.sageattention
    if sage is None or target.torch is None:
        return False
    version = parse_version(sage.version)
    if version is None or version.major != 2:
        return False
    label = parse_sage_local(sage.version)
    if label is not None:
        build = torch_build_of(target.torch)
        if label.cuda_major != build.cuda_major or not sage_serves_torch(
                label, target.torch.version):
            return False
    return modules_complete(sage.compiled_modules, gpus)


def modules_complete(modules: tuple[str, ...], gpus: list[Gpu]) -> bool:
    have = set(modules)
    needed = {"_fused"} | {m for g in gpus
                           for m in required_sage_modules(g.compute_capability or "")}
    return needed <= have
