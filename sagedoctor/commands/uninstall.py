"""`sagedoctor uninstall`: take out what sagedoctor put into a venv, and put back what it
replaced (a triton-windows), as recorded in <venv>/sagedoctor/installed.json.

It holds the install's per-venv lock (an install's files are not pulled away under it), changes
packages through uv only (a uv-made venv has no pip), and with --all takes SageAttention out of
invokeai.yaml too: the file as it was where nothing changed it since sagedoctor's edit, else
only the key removed."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..facts import InvokeAIFacts, TargetFacts
from ..install_record import InstallRecord, read_record
from ..invokeai_config import ConfigEdit, load_edit_record, untouched_since
from ..resolve import RUNTIME_DIST
from .enable import hook_path

BACKEND_KEY = "attention_backend"


@dataclass(frozen=True)
class Action:
    kind: str  # "unlink" | "uninstall" | "install" | "restore-config" | "unset-key" | "rmtree"
    target: str  # a path, a distribution name or a requirement
    text: str


@dataclass(frozen=True)
class ConfigState:
    """invokeai.yaml as uninstall found it: where, its attention_backend, and whether it is
    still exactly as sagedoctor's recorded edit left it."""

    path: str
    backend: str | None
    as_edited: bool


def plan_uninstall(target: TargetFacts, record: InstallRecord | None, hook_exists: bool,
                   folder_exists: bool, everything: bool,
                   config: ConfigState | None = None) -> tuple[list[Action], list[str]]:
    """What uninstall does, in order, and what it leaves (with why). Pure."""
    actions: list[Action] = []
    notes: list[str] = []
    hook = str(hook_path(target))
    if hook_exists:
        actions.append(Action("unlink", hook, f"remove the start-up hook {hook}"))
    sage_config = config is not None and "sage" in (config.backend or "").lower()
    if config is not None and sage_config:
        if not everything:
            notes.append(f"{config.path} keeps {BACKEND_KEY}: {config.backend} (pass --all "
                         "to take it out with sageattention)")
        elif config.as_edited:
            actions.append(Action("restore-config", config.path,
                                  f"put back {config.path} as it was before sagedoctor set "
                                  f"{BACKEND_KEY}: {config.backend} (unchanged since)"))
        else:
            actions.append(Action("unset-key", config.path,
                                  f"remove {BACKEND_KEY}: {config.backend} from {config.path} "
                                  "(the rest of the file kept; a backup beside it)"))
    if target.runtime is not None:
        actions.append(Action("uninstall", RUNTIME_DIST,
                              f"uninstall {RUNTIME_DIST} {target.runtime}"))
    old_triton = record.replaced.get("triton-windows") if record else None
    if old_triton and target.triton_windows != old_triton:
        actions.append(Action("install", f"triton-windows=={old_triton}",
                              f"put back triton-windows {old_triton} (sagedoctor replaced it "
                              f"with {target.triton_windows or 'nothing'})"))
    sage = target.sageattention
    if sage is not None:
        ours = record is not None and "sageattention" in record.installed
        if everything:
            actions.append(Action("uninstall", "sageattention",
                                  f"uninstall sageattention {sage.version}"
                                  + ("" if ours else " (not installed by sagedoctor)")))
        else:
            notes.append(f"sageattention {sage.version} stays (pass --all to remove it too)")
    if old_triton and sage is not None and not everything:
        notes.append(f"triton-windows {old_triton} may not be the one sageattention was "
                     "verified with: run `sagedoctor check`")
    folder = str(Path(target.prefix) / "sagedoctor")
    if folder_exists:
        actions.append(Action("rmtree", folder, f"remove {folder} (records, verification)"))
    return actions, notes


def config_state(prefix: Path, invokeai: InvokeAIFacts | None) -> ConfigState | None:
    """The invokeai.yaml sagedoctor edited (its record), else the one of the InvokeAI root."""
    loaded = load_edit_record(prefix)
    if loaded is not None:
        edit, written = loaded
        path = Path(edit.path)
        return ConfigState(str(path), _backend_in(path, invokeai),
                           untouched_since(edit, written, path))
    if invokeai is None or invokeai.config_path is None or not invokeai.config_exists:
        return None
    return ConfigState(invokeai.config_path, invokeai.attention_backend, False)


def _backend_in(path: Path, invokeai: InvokeAIFacts | None) -> str | None:
    if invokeai is not None and invokeai.config_path == str(path):
        return invokeai.attention_backend
    from ..invokeai_config import InvokeAIConfigError, read_config_text

    try:
        import yaml

        data = yaml.safe_load(read_config_text(path))
    except (InvokeAIConfigError, ValueError, yaml.YAMLError):
        return None  # unreadable: nothing is planned for it
    value = data.get(BACKEND_KEY) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def run_uninstall(target: TargetFacts, *, yes: bool, dry_run: bool, everything: bool,
                  out: TextIO | None = None, answers: TextIO | None = None,
                  invokeai: InvokeAIFacts | None = None, state_root: Path | None = None) -> int:
    stream = out or sys.stdout
    prefix = Path(target.prefix)
    if dry_run:
        return _uninstall(target, prefix, stream, answers, invokeai, yes=yes, dry_run=True,
                          everything=everything)
    from ..install.errors import InstallLocked, RecoveredInterruptedRun
    from ..install.lock import venv_lock, venv_state_dir
    from ..install.transaction import recover_interrupted

    def say(line: str) -> None:
        stream.write(f"{line}\n")

    folder = venv_state_dir(prefix, state_root)
    try:  # the install's lock: its in-flight files are not removed under it
        with venv_lock(folder, prefix, say):
            # an interrupted install (SD199) is rolled back first, as install does; what
            # sagedoctor left is then read anew by the next run, not from facts taken before
            if recover_interrupted(folder, say):
                raise RecoveredInterruptedRun(
                    "an interrupted install was rolled back first; nothing else was removed",
                    "run `sagedoctor uninstall` again to remove what sagedoctor left")
            return _uninstall(target, prefix, stream, answers, invokeai, yes=yes,
                              dry_run=False, everything=everything)
    except InstallLocked as exc:
        raise InstallLocked(f"cannot uninstall now: {exc.message}",
                            "wait for the install to finish, then run uninstall again; "
                            "nothing was changed") from None


def _uninstall(target: TargetFacts, prefix: Path, stream: TextIO, answers: TextIO | None,
               invokeai: InvokeAIFacts | None, *, yes: bool, dry_run: bool,
               everything: bool) -> int:
    actions, notes = plan_uninstall(target, read_record(prefix), hook_path(target).exists(),
                                    (prefix / "sagedoctor").is_dir(), everything,
                                    config_state(prefix, invokeai))
    if not actions:
        stream.write(f"Nothing to do: sagedoctor left nothing in {prefix}\n")
        for note in notes:
            stream.write(f"  note: {note}\n")
        return 0
    stream.write(f"{'Would' if dry_run else 'Will'} change {prefix}:\n")
    for number, action in enumerate(actions, 1):
        stream.write(f"  {number}. {action.text}\n")
    for note in notes:
        stream.write(f"  note: {note}\n")
    if dry_run:
        return 0
    if not yes:
        stream.write("Proceed? [y/N] ")
        stream.flush()
        reply = (answers or sys.stdin).readline().strip().lower()
        if reply not in ("y", "yes"):
            stream.write("Nothing was changed.\n")
            return 1
    from ..install.runner import Installer
    from ..invokeai_config import refuse_if_running

    for action in actions:  # a running InvokeAI rewrites invokeai.yaml: refused up front
        if action.kind in ("restore-config", "unset-key"):
            refuse_if_running(Path(action.target), prefix)
    # uv only: a uv-made venv has no pip, and the install itself ran through uv.
    installer = Installer.for_target(Path(target.executable), allow_pip=False)
    python = Path(target.executable)
    for action in actions:
        if action.kind == "unlink":
            Path(action.target).unlink(missing_ok=True)
        elif action.kind == "uninstall":
            installer.uninstall([action.target])
        elif action.kind == "install":
            installer.install([action.target], reinstall=True)
        elif action.kind in ("restore-config", "unset-key"):
            _undo_config(action, prefix, python)
        elif action.kind == "rmtree":
            shutil.rmtree(action.target)
        stream.write(f"done: {action.text}\n")
    return 0


def _undo_config(action: Action, prefix: Path, python: Path) -> None:
    from ..invokeai_config import apply_settings, refuse_if_running, undo_edit

    path = Path(action.target)
    loaded: tuple[ConfigEdit, str | None] | None = load_edit_record(prefix)
    if action.kind == "restore-config" and loaded is not None:
        refuse_if_running(path, prefix)
        undo_edit(loaded[0])
    else:  # changed since (or never recorded): only the key goes, the rest stays as it is
        apply_settings(path, {}, python, prefix, remove=(BACKEND_KEY,))
