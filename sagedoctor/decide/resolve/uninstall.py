"""What `sagedoctor uninstall` removes and restores: the start-up hook, the runtime, the venv's
sagedoctor folder, a triton-windows we replaced, InvokeAI's backend setting, sageattention with
--all. Pure: the facts of what is installed in, a Plan (or why not) out."""

from __future__ import annotations

from dataclasses import dataclass

from ...facts import InterruptedInstall, TargetFacts
from ...plan import Blocked, Plan, Step
from ...state import InstallRecord
from ..findings import finding
from ..requirements import (
    describe_pending,
)
from ..versions import (
    parse_version,
)
from .steps import RUNTIME_DIST

BACKEND_KEY = "attention_backend"


@dataclass(frozen=True)
class EditedConfig:
    """invokeai.yaml as uninstall found it: where, its attention_backend, and whether it is
    still exactly as sagedoctor's recorded edit left it."""

    path: str
    backend: str | None
    as_edited: bool
    # attention_backend as sagedoctor's recorded edit set it (None: no record, or no such key)
    set_to: str | None = None


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
    _add(steps, notes, _config_action(facts.config, everything))
    if target.runtime is not None:
        steps.append(Step("uninstall", f"uninstall {RUNTIME_DIST} {target.runtime}",
                          "sagedoctor's SDPA-routing runtime", distributions=(RUNTIME_DIST,)))
    old_triton, bad_triton = _replaced_triton(facts.record)
    if bad_triton is not None:
        notes.append(bad_triton)
    if old_triton and target.triton_windows != old_triton:
        steps.append(Step(
            "put-back", f"put back triton-windows {old_triton} (sagedoctor replaced it with "
            f"{target.triton_windows or 'nothing'})",
            "the user's own version before sagedoctor's install, through uv",
            distributions=("triton-windows",), requirement=f"triton-windows=={old_triton}"))
    sage = target.sageattention
    if sage is not None:
        _add(steps, notes, _sage_action(sage.version, _installed_by_us(facts.record),
                                        everything))
    if old_triton and sage is not None and not everything:
        notes.append(f"triton-windows {old_triton} may not be the one sageattention was "
                     "verified with: run `sagedoctor check`")
    if facts.records is not None:
        steps.append(Step("remove-records", f"remove {facts.records} (records, verification)",
                          "last, so a failed step before it leaves them for the next run",
                          paths=(facts.records,)))
    return Plan(python=target.executable, prefix=target.prefix, os=facts.os,
                steps=tuple(steps), notes=tuple(notes), purpose="uninstall")


def _add(steps: list[Step], notes: list[str], action: Step | str | None) -> None:
    """One helper's answer into the plan: a step, a note, or nothing."""
    if isinstance(action, Step):
        steps.append(action)
    elif action is not None:
        notes.append(action)


def _config_action(config: EditedConfig | None, everything: bool) -> Step | str | None:
    """What uninstall does with invokeai.yaml's attention_backend: a step, a note, or nothing."""
    if config is None:
        return None
    if "sage" in (config.backend or "").lower():
        return _sage_backend_action(config, everything)
    if config.set_to is not None and config.backend == config.set_to:
        return _hook_backend_action(config, everything)
    return None


def _sage_backend_action(config: EditedConfig, everything: bool) -> Step | str:
    """The file names a sage backend: it stays without --all; with it the file goes back, or
    only the key goes where the file changed since sagedoctor's edit."""
    setting = ((BACKEND_KEY, config.backend or ""),)
    if not everything:
        return (f"{config.path} keeps {BACKEND_KEY}: {config.backend} (pass --all "
                "to take it out with sageattention)")
    if config.as_edited:
        return Step(
            "restore-invokeai", f"put back {config.path} as it was before sagedoctor set "
            f"{BACKEND_KEY}: {config.backend} (unchanged since)",
            "nothing changed the file since sagedoctor's edit, so its backup is the "
            "user's own file", paths=(config.path,), config=setting)
    return Step(
        "unset-invokeai-key", f"remove {BACKEND_KEY}: {config.backend} from "
        f"{config.path} (the rest of the file kept; a backup beside it)",
        "the file changed since sagedoctor's edit: only the key goes",
        paths=(config.path,), config=setting)


def _hook_backend_action(config: EditedConfig, everything: bool) -> Step | str:
    """The install turned InvokeAI's own switch off for the hook (one router at a time):
    with the hook gone, the user's own setting comes back; --all takes SageAttention out
    too, so the switch stays off then."""
    if everything:
        return (f"{config.path} keeps {BACKEND_KEY}: {config.backend}, as the install "
                "set it for sagedoctor's hook (SageAttention goes with --all)")
    if config.as_edited:
        return Step(
            "restore-invokeai", f"put back {config.path} as it was before sagedoctor set "
            f"{BACKEND_KEY}: {config.backend} (unchanged since)",
            "the install turned InvokeAI's own switch off for sagedoctor's hook; with the "
            "hook gone, the user's own setting serves again", paths=(config.path,),
            config=((BACKEND_KEY, config.backend or ""),))
    return (f"{config.path} changed since sagedoctor set {BACKEND_KEY}: "
            f"{config.backend} for its hook: set it back by hand for InvokeAI's "
            "own switch")


def _replaced_triton(record: InstallRecord | None) -> tuple[str | None, str | None]:
    """The triton-windows version sagedoctor replaced (to put back), and a note where the
    record's entry is not a version (then nothing is put back)."""
    old = record.replaced.get("triton-windows") if record else None
    if old and parse_version(old) is None:
        return None, (f"the record's triton-windows {old!r:.40} is not a version: it is "
                      "not put back")
    return old, None


def _installed_by_us(record: InstallRecord | None) -> bool:
    """Whether sagedoctor's record says it installed sageattention."""
    return record is not None and "sageattention" in record.installed


def _sage_action(version: str, ours: bool, everything: bool) -> Step | str:
    """sageattention goes with --all (said where sagedoctor did not install it); else it stays."""
    if everything:
        return Step("uninstall", f"uninstall sageattention {version}"
                    + ("" if ours else " (not installed by sagedoctor)"),
                    "--all: SageAttention goes too", distributions=("sageattention",))
    return f"sageattention {version} stays (pass --all to remove it too)"
