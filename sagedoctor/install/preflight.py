"""Before any download or build: everything the commit phase will touch, checked.

A source build takes minutes; an invokeai.yaml that will not round-trip, a running InvokeAI, a
root that is no InvokeAI root or a full disk used to be found only after it, and then rolled
back. Here they refuse the install up front, with the finding, and nothing is changed.
`gather_state` does the I/O; `preflight_findings` decides, over plain values.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..apps.invokeai import (
    InvokeAIConfigError,
    ProcessInfo,
    edited_text,
    invokeai_processes,
    read_config_text,
    running_processes,
)
from ..decide.findings import Finding, finding
from ..errors import SagedoctorError
from ..plan import CHANGING_ACTIONS, Plan

GIB = 1 << 30
# Margins, not measurements of one build: nvcc's objects for several architectures, the
# unpacked source and the wheel; the venv side holds the new files and the backups.
BUILD_NEEDS_BYTES = 3 * GIB
VENV_NEEDS_BYTES = GIB // 2
ROOT_MARKERS = ("invokeai.yaml", ".venv", "databases", "models")


class PreflightRefused(SagedoctorError):
    """Something the install would meet only after its downloads and build: refused first."""

    code = "SD931"

    def __init__(self, findings: list[Finding]) -> None:
        lines = "; ".join(f"{f.code} {f.title}: {f.detail}" for f in findings)
        fixes = "; ".join(f"{f.code}: {f.fix}" for f in findings if f.fix)
        super().__init__(f"refused before any download or build: {lines}",
                         f"{fixes.rstrip('.')}. Nothing was changed.")
        self.findings = findings


@dataclass(frozen=True)
class ConfigState:
    """invokeai.yaml as the enable-invokeai step would meet it."""

    path: str
    settings: tuple[tuple[str, str], ...]
    exists: bool
    problem: str | None  # it does not read, parse or round-trip (duplicate key, not UTF-8...)
    writable: bool  # the file (where it exists) and its folder, for the backup and the rename
    root_markers: tuple[str, ...]  # which of ROOT_MARKERS the folder holds


@dataclass(frozen=True)
class PreflightState:
    config: ConfigState | None
    running: tuple[ProcessInfo, ...]  # the target's InvokeAI, running now
    free: tuple[tuple[str, str, int | None, int], ...]  # (what, folder, free bytes, needed)
    # records the commit writes whose path holds something else: (path, what it is)
    blocked_records: tuple[tuple[str, str], ...] = ()


def preflight_findings(plan: Plan, state: PreflightState) -> list[Finding]:
    """What would fail in the commit phase, as findings. Pure."""
    out: list[Finding] = []
    if state.running:
        pids = ", ".join(str(p.pid) for p in state.running)
        out.append(finding("SD196", "error", f"InvokeAI is running from {plan.prefix} (pid "
                           f"{pids}); its files are in use and it rewrites invokeai.yaml"))
    config = state.config
    if config is not None:
        folder = str(Path(config.path).parent)
        if not config.root_markers:
            out.append(finding("SD197", "error", f"{folder} holds none of "
                               f"{', '.join(ROOT_MARKERS)}: the edit would write "
                               f"{Path(config.path).name} into a folder InvokeAI never reads"))
        if config.problem is not None:
            out.append(finding("SD183", "error", config.problem,
                               "Fix the file (a duplicate key, a syntax error) or move it "
                               "away, then run again; InvokeAI writes a default one at start."))
        if not config.writable:
            out.append(finding("SD195", "error", f"{config.path} or its folder is not "
                               "writable by this user"))
    for path, kind in state.blocked_records:
        out.append(finding("SD135", "error", f"{path} is {kind}, not a file: the record the "
                           "install writes there after its commit could not be written"))
    for what, folder, free, needed in state.free:
        if free is not None and free < needed:
            out.append(finding("SD198", "error", f"{what}: {free / GIB:.1f} GiB free in "
                               f"{folder}, {needed / GIB:.1f} GiB needed"))
    return out


def _writable(path: Path, exists: bool) -> bool:
    folder_ok = os.access(path.parent, os.W_OK | os.X_OK)
    return folder_ok and (not exists or os.access(path, os.W_OK))


def config_state(path: Path, settings: tuple[tuple[str, str], ...]) -> ConfigState:
    exists = path.exists() or path.is_symlink()
    problem = None
    if exists:
        try:
            edited_text(read_config_text(path), dict(settings), path)  # the round trip
        except InvokeAIConfigError as exc:
            problem = exc.message
    try:
        markers = tuple(m for m in ROOT_MARKERS if (path.parent / m).exists())
    except OSError:
        markers = ()
    return ConfigState(str(path), settings, exists, problem,
                       _writable(path, exists) if path.parent.is_dir() else False, markers)


def _free(folder: Path) -> int | None:
    """Free bytes on the file system of the folder (or of its nearest existing parent)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None  # unknowable: say nothing rather than refuse


def _not_a_file(path: Path) -> str | None:
    """What stands at a record's path where it is not a regular file (or a link to one)."""
    import stat

    try:
        mode = path.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None  # a link is replaced whole by the atomic write
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device")


def gather_state(plan: Plan, work: Path, state_dir: Path,
                 processes: Callable[[], Iterable[ProcessInfo]] = running_processes
                 ) -> PreflightState:
    prefix = Path(plan.prefix)
    actions = {s.action for s in plan.steps}
    edit = next((s for s in plan.steps if s.action == "enable-invokeai"), None)
    config = None
    root = prefix.parent
    if edit is not None and edit.paths:
        config = config_state(Path(edit.paths[0]), edit.config)
        root = Path(edit.paths[0]).parent
    running = tuple(invokeai_processes(processes(), prefix, root)) if actions & CHANGING_ACTIONS \
        else ()
    free: list[tuple[str, str, int | None, int]] = []
    if "build-from-source" in actions:
        free.append(("the source build", str(work), _free(work), BUILD_NEEDS_BYTES))
    if actions & (CHANGING_ACTIONS - {"enable-invokeai"}):
        free.append(("the venv's new files", str(prefix), _free(prefix), VENV_NEEDS_BYTES))
        free.append(("the backups of what is replaced", str(state_dir), _free(state_dir),
                     VENV_NEEDS_BYTES))
    blocked: list[tuple[str, str]] = []
    if plan.purpose != "uninstall" and actions & CHANGING_ACTIONS:
        from ..apps.invokeai import edit_record_path
        from ..state import VenvFiles

        records = [VenvFiles(prefix).installed] + ([Path(edit_record_path(prefix))]
                                                     if edit is not None else [])
        blocked = [(str(p), kind) for p in records if (kind := _not_a_file(p)) is not None]
    return PreflightState(config, running, tuple(free), tuple(blocked))


def run_preflight(plan: Plan, work: Path, state_dir: Path,
                  processes: Callable[[], Iterable[ProcessInfo]] = running_processes) -> None:
    problems = preflight_findings(plan, gather_state(plan, work, state_dir, processes))
    if problems:
        raise PreflightRefused(problems)
