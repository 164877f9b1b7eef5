"""The uninstall flow: take out what sagedoctor put into a venv, and put back what it
replaced (a triton-windows), as recorded in <venv>/sagedoctor/installed.json.

This module gathers the facts and carries the plan out: `resolve.resolve_uninstall` decides
the plan and the install executor carries it out (the venv's lock, the journal, the rollback,
uv only; with --all invokeai.yaml as it was, or only the key removed; the records go last).
commands/uninstall shows the plan and asks."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from ..apps.invokeai import load_edit_record, untouched_since
from ..decide.resolve.uninstall import BACKEND_KEY, EditedConfig, UninstallFacts, resolve_uninstall
from ..events import OnEvent
from ..facts import InvokeAIFacts, TargetFacts
from ..hook import hook_path
from ..plan import Blocked, Plan
from ..state import VenvFiles, read_install_record


def config_state(prefix: Path, invokeai: InvokeAIFacts | None) -> EditedConfig | None:
    """The invokeai.yaml sagedoctor edited (its record), else the one of the InvokeAI root."""
    loaded = load_edit_record(prefix)
    if loaded is not None:
        edit, written = loaded
        path = Path(edit.path)
        return EditedConfig(str(path), _backend_in(path, invokeai),
                            untouched_since(edit, written, path),
                            dict(edit.settings).get(BACKEND_KEY))
    if invokeai is None or invokeai.config_path is None or not invokeai.config_exists:
        return None
    return EditedConfig(invokeai.config_path, invokeai.attention_backend, False)


def _backend_in(path: Path, invokeai: InvokeAIFacts | None) -> str | None:
    if invokeai is not None and invokeai.config_path == str(path):
        return invokeai.attention_backend
    from ..apps.invokeai import InvokeAIConfigError, read_config_text

    try:
        import yaml

        data = yaml.safe_load(read_config_text(path))
    except (InvokeAIConfigError, ValueError, yaml.YAMLError):
        return None  # unreadable: nothing is planned for it
    value = data.get(BACKEND_KEY) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def uninstall_facts(target: TargetFacts, invokeai: InvokeAIFacts | None,
                    state_root: Path | None = None) -> UninstallFacts:
    from ..state import pending_install

    prefix = Path(target.prefix)
    hook = hook_path(target)
    records = VenvFiles(prefix).records
    return UninstallFacts(
        target, platform.system().lower() or "unknown", read_install_record(prefix),
        str(hook) if hook.exists() or hook.is_symlink() else None,
        str(records) if records.is_dir() else None, config_state(prefix, invokeai),
        pending_install(prefix, state_root))


def refuse_if_not_writable(target: TargetFacts) -> None:
    """A read-only mount or another user's venv: said before anything is asked or begun
    (each step would fail and be rolled back)."""
    import os

    from ..errors import NotWritable

    records = VenvFiles(Path(target.prefix)).records
    for folder in (Path(target.site_packages), records):
        if folder.is_dir() and not os.access(folder, os.W_OK):
            raise NotWritable(folder, _read_only_mount(folder))


def _read_only_mount(folder: Path) -> bool:
    import os

    try:
        return bool(os.statvfs(folder).f_flag & getattr(os, "ST_RDONLY", 0))
    except (OSError, AttributeError):  # Windows has no statvfs
        return False


@dataclass(frozen=True)
class UninstallOptions:
    target: TargetFacts
    everything: bool = False  # --all
    invokeai: InvokeAIFacts | None = None
    state_root: Path | None = None
    log_dir: Path | None = None


def plan_uninstall(options: UninstallOptions) -> Plan | Blocked:
    """What uninstall would change; refused while an install is at work."""
    facts = uninstall_facts(options.target, options.invokeai, options.state_root)
    if facts.interrupted is not None and facts.interrupted.running:
        from ..decide.requirements import describe_pending
        from ..install.errors import InstallLocked

        # an install at work, not an interrupted one: nothing to roll back, nothing to plan
        raise InstallLocked(f"cannot uninstall now: {describe_pending(facts.interrupted)}",
                            "wait for the install to finish, then run uninstall again; "
                            "nothing was changed")
    return resolve_uninstall(facts, options.everything)


def carry_out(options: UninstallOptions, plan: Plan, on_event: OnEvent) -> None:
    """The plan through the install executor, under the venv's lock, its progress as
    events."""
    from .. import __version__
    from ..apps.invokeai import refuse_if_running
    from ..install.errors import InstallLocked
    from ..install.execute import execute_plan
    from ..install.runlog import default_log_dir

    prefix = Path(options.target.prefix)
    for step in plan.steps:  # a running InvokeAI rewrites invokeai.yaml: refused up front
        if step.action in ("restore-invokeai", "unset-invokeai-key"):
            refuse_if_running(Path(step.paths[0]), prefix)
    try:  # the install's lock: its in-flight files are not removed under it
        execute_plan(plan, None, options.log_dir or default_log_dir(), __version__,
                     state_root=options.state_root, on_event=on_event)
    except InstallLocked as exc:
        raise InstallLocked(f"cannot uninstall now: {exc.message}",
                            "wait for the install to finish, then run uninstall again; "
                            "nothing was changed") from None
