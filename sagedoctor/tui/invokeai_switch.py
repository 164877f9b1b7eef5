"""SageAttention on or off for the InvokeAI of the target venv, through the existing stages.

Where that InvokeAI declares `attention_backend`, enable sets it in invokeai.yaml (the install's
InvokeAI step: feature-detected, proven by InvokeAI's loader, backed up, refused while InvokeAI
runs); elsewhere enable is `sagedoctor enable`, the venv's start-up hook. Disable undoes
whichever applies. No textual here: the actions screen calls these in a worker."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from ..commands.enable import hook_path, run_disable, run_enable
from ..errors import SagedoctorError
from ..facts import InvokeAIFacts, TargetFacts
from ..invokeai_config import (
    ConfigEdit,
    ProcessInfo,
    apply_settings,
    edit_record_path,
    load_edit_record,
    refuse_if_running,
    running_processes,
    save_edit_record,
    undo_edit,
    untouched_since,
)
from ..probe.invokeai import parse_config, read_config

KEY = "attention_backend"


class InvokeAISwitchError(SagedoctorError):
    code = "SD971"


@dataclass(frozen=True)
class Route:
    """How SageAttention reaches this InvokeAI: its own setting, or the start-up hook."""

    kind: str  # "setting" | "hook"
    choice: str | None  # the attention_backend value that means SageAttention
    why: str


def choose_route(target: TargetFacts) -> Route:
    """Pure: the setting where the release declares it with a SageAttention choice."""
    package = target.invokeai
    if package is None:
        raise InvokeAISwitchError(f"InvokeAI is not installed in {target.prefix}",
                                  "pass --venv <InvokeAI root>/.venv (and --root DIR)")
    choice = next((c for c in package.attention_backend_choices if "sage" in c.lower()), None)
    if package.attention_backend_supported and choice:
        return Route("setting", choice, f"InvokeAI {package.version} has an {KEY} setting")
    return Route("hook", None, f"InvokeAI {package.version} has no {KEY} setting")


def state_line(target: TargetFacts, inv: InvokeAIFacts | None) -> str:
    """One line: is SageAttention on for this InvokeAI, and by which route."""
    try:
        route = choose_route(target)
    except InvokeAISwitchError:
        return "InvokeAI: not installed in this venv"
    version = target.invokeai.version if target.invokeai else "?"
    if route.kind == "hook":
        state = "on" if hook_path(target).exists() else "off"
        return f"InvokeAI {version}: no {KEY} setting; start-up hook {state}"
    value = inv.attention_backend if inv is not None else None
    state = "on" if value == route.choice else "off"
    return f"InvokeAI {version}: {KEY}: {value or 'not set'} (SageAttention {state})"


def _record_path(target: TargetFacts) -> Path:
    return edit_record_path(target.prefix)


def _save_record(target: TargetFacts, edit: ConfigEdit) -> None:
    save_edit_record(target.prefix, edit)


def _load_record(target: TargetFacts) -> tuple[ConfigEdit, str | None] | None:
    return load_edit_record(target.prefix)


def reread(inv: InvokeAIFacts) -> InvokeAIFacts:
    """invokeai.yaml as it is now (the facts were read before any switch)."""
    if inv.config_path is None:
        return inv
    exists = Path(inv.config_path).exists() or Path(inv.config_path).is_symlink()
    return read_config(replace(inv, config_exists=exists, schema_version=None,
                               attention_type=None, attention_backend=None,
                               config_error=None))


def _config(inv: InvokeAIFacts | None) -> tuple[InvokeAIFacts, Path]:
    if inv is None or inv.config_path is None:
        raise InvokeAISwitchError("no InvokeAI root is known, so there is no invokeai.yaml",
                                  "pass --root DIR (the folder that holds invokeai.yaml)")
    fresh = reread(inv)
    if fresh.config_error:
        raise InvokeAISwitchError(fresh.config_error, "fix or move the file; nothing was "
                                  "changed")
    return fresh, Path(inv.config_path)


def _value_before(path: Path, inv: InvokeAIFacts, record: ConfigEdit | None) -> str | None:
    """attention_backend as it was before sagedoctor set it: from the backup the edit made
    (this switch's record, else the newest sagedoctor backup beside the file)."""
    backups = [Path(record.backup)] if record and record.backup else sorted(
        path.parent.glob(f"{path.name}.sagedoctor-*.bak"), reverse=True)
    for backup in backups[:1]:
        try:
            return parse_config(inv, backup.read_bytes()).attention_backend
        except OSError:
            return None
    return None


def enable_in_invokeai(target: TargetFacts, inv: InvokeAIFacts | None,
                       processes: Callable[[], Iterable[ProcessInfo]] = running_processes,
                       now: datetime | None = None) -> str:
    """Turn SageAttention on for this InvokeAI; says which route was taken."""
    route = choose_route(target)
    if route.kind == "hook":
        out = io.StringIO()
        run_enable(target, out)
        return (f"{route.why}, so SageAttention is on through the venv's start-up hook. "
                + out.getvalue().strip())
    if target.sageattention is None:
        raise InvokeAISwitchError(f"SageAttention is not installed in {target.prefix}",
                                  f"run `sagedoctor install --venv {target.prefix}` first")
    fresh, path = _config(inv)
    assert route.choice is not None
    if fresh.attention_backend == route.choice:
        return f"Nothing to do: {path} already sets {KEY}: {route.choice}."
    edit = apply_settings(path, {KEY: route.choice}, Path(target.executable),
                          Path(target.prefix), processes, now)
    _save_record(target, edit)
    return (f"{route.why}: set {KEY}: {route.choice} in {path} (checked by "
            f"{edit.validated_by}; backup: {edit.backup or 'none, the file is new'}). "
            "Restart InvokeAI to use it.")


def disable_in_invokeai(target: TargetFacts, inv: InvokeAIFacts | None,
                        processes: Callable[[], Iterable[ProcessInfo]] = running_processes,
                        now: datetime | None = None) -> str:
    """Turn it off again: the file as it was where nothing else changed it since, else only
    the one key put back to its earlier value."""
    route = choose_route(target)
    if route.kind == "hook":
        out = io.StringIO()
        run_disable(target, out)
        return f"{route.why}: the start-up hook is the switch. " + out.getvalue().strip()
    fresh, path = _config(inv)
    if fresh.attention_backend != route.choice:
        return (f"Nothing to do: {path} sets {KEY}: {fresh.attention_backend or 'nothing'}, "
                "not SageAttention.")
    loaded = _load_record(target)
    record, written = loaded if loaded else (None, None)
    if record is not None and untouched_since(record, written, path):
        refuse_if_running(path, Path(target.prefix), processes)
        done = undo_edit(record)
        _record_path(target).unlink(missing_ok=True)
        return f"Disabled in InvokeAI: {done} (unchanged since sagedoctor's edit)."
    before = _value_before(path, fresh, record)
    choices = target.invokeai.attention_backend_choices if target.invokeai else ()
    value = before if before and before != route.choice else next(
        (c for c in ("auto", *choices) if c in choices and "sage" not in c.lower()), None)
    if value is None:
        raise InvokeAISwitchError(f"this InvokeAI offers no {KEY} other than {route.choice}",
                                  f"edit {path} by hand")
    edit = apply_settings(path, {KEY: value}, Path(target.executable), Path(target.prefix),
                          processes, now)
    _record_path(target).unlink(missing_ok=True)
    return (f"Disabled in InvokeAI: set {KEY}: {value} in {path} (checked by "
            f"{edit.validated_by}; backup: {edit.backup}).")

