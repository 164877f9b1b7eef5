"""The install transaction, per distribution (a copy of a venv is gigabytes).

Before the first change: the installed files of every distribution the plan touches are hashed
and copied aside, torch's RECORD is hashed, and a journal names all of it plus every path the
new wheels will write. On any failure or signal the backed-up files come back, what was added
goes, and a second snapshot proves by sha256 that the venv is as it was. A run killed outright
leaves its journal; the next run finds it and rolls back before anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from ..errors import room_needed
from ..events import (
    BuildStopped,
    FileRemoved,
    FileRestored,
    NothingToUndo,
    OnEvent,
    RecoveryStarted,
    RollbackFinished,
    WorkFolderRemoved,
)
from ..file_meta import FileMeta, meta_of, restore_meta, write_atomic, write_keeping_meta
from ..proc import MAX_PID, ToolMissing, ToolTimeout
from ..target_answer import ask_target, with_answer_function
from .cache import file_sha256
from .errors import RollbackIncomplete
from .runner import InstallError

LIGHT = frozenset({"torch"})  # checked by version and RECORD digest, never copied

_STATE_SCRIPT = with_answer_function(r"""
import csv, importlib.metadata as m, json, os, re, stat, sys, sysconfig
names = set(json.loads(sys.argv[1]))
def declared(d):
    # torch/version.py's __version__ ('2.11.0+cu130', what check shows): PyPI's CUDA build
    # says 2.11.0 in its dist-info. A regular file of sane size only (no FIFO to block on).
    try:
        path = str(d.locate_file("torch/version.py"))
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > 65536:
            return None
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, ValueError):
        return None
    found = re.search(r"^__version__\s*(?::\s*str\s*)?=\s*['\"]([0-9][0-9A-Za-z.+_-]{0,63})"
                      r"['\"]", text, re.M)
    return found.group(1) if found else None
paths = sysconfig.get_paths()
out = {"python": "%d.%d" % sys.version_info[:2], "purelib": paths["purelib"],
       "scripts": paths["scripts"], "dists": {}, "all": {}}
for d in m.distributions():
    name = d.metadata["Name"]
    key = re.sub(r"[-_.]+", "-", name).lower() if name else ""
    if key:
        out["all"].setdefault(key, d.version)
    if key not in names:
        continue
    # RECORD read by hand: importlib.metadata's own reader crashes on a blank line.
    rows = [r for r in csv.reader((d.read_text("RECORD") or "").splitlines()) if r and r[0]]
    files = [os.path.normpath(os.path.abspath(str(d.locate_file(r[0])))) for r in rows]
    out["dists"].setdefault(key, []).append({"version": d.version, "files": files,
        "dist_info": os.path.normpath(os.path.abspath(str(getattr(d, "_path", "")))),
        "declared": declared(d) if key == "torch" else None})
_answer(out)
""")


def target_state(python: Path, names: Iterable[str]) -> dict[str, Any]:
    """Where the target installs, and the files of these distributions (from RECORD)."""
    wanted = sorted({str(canonicalize_name(n)) for n in names})
    try:
        asked = ask_target([str(python), "-I", "-c", _STATE_SCRIPT, json.dumps(wanted)],
                           timeout=120)
        done = asked.result
        data = asked.json() if done.returncode == 0 else None
    except (ToolMissing, ToolTimeout, ValueError) as exc:
        raise InstallError(f"could not read the distributions of {python}: {exc}", "") from exc
    if not isinstance(data, dict) or not isinstance(data.get("dists"), dict):
        raise InstallError(f"could not read the distributions of {python}",
                           (done.stderr or "").strip()[-300:])
    return data


def _hash(path: str) -> str | None:
    try:
        return file_sha256(Path(path))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def take_snapshot(python: Path, names: Iterable[str]) -> dict[str, Any]:
    """{python, purelib, scripts, dists: {name: [{version, dist_info, files: {path: sha}}]}}."""
    state = target_state(python, set(names) | LIGHT)
    dists: dict[str, list[dict[str, Any]]] = {}
    for name, entries in state["dists"].items():
        for entry in entries:
            files = [str(Path(entry["dist_info"]) / "RECORD")] if name in LIGHT \
                else entry["files"]
            declared = entry.get("declared")
            dists.setdefault(name, []).append({
                "version": entry["version"], "dist_info": entry["dist_info"],
                "files": {f: _hash(f) for f in files},
                **({"declared": declared} if isinstance(declared, str) else {})})
    return {"python": state["python"], "purelib": state["purelib"],
            "scripts": state["scripts"], "dists": dists,
            "all": {str(k): str(v) for k, v in (state.get("all") or {}).items()}}


def snapshot_differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for name in sorted(set(before["dists"]) | set(after["dists"])):
        a = sorted(before["dists"].get(name, []), key=lambda e: e["dist_info"])
        b = sorted(after["dists"].get(name, []), key=lambda e: e["dist_info"])
        versions_a = [e["version"] for e in a] or ["(absent)"]
        versions_b = [e["version"] for e in b] or ["(absent)"]
        if versions_a != versions_b:
            out.append(f"{name} {', '.join(versions_a)} -> {', '.join(versions_b)}")
            continue
        for old, new in zip(a, b, strict=True):
            changed = [p for p in set(old["files"]) | set(new["files"])
                       if old["files"].get(p) != new["files"].get(p)]
            if changed:
                out.append(f"{name}: {len(changed)} file(s) differ, e.g. {sorted(changed)[0]}")
    return out


def file_count(snapshot: dict[str, Any]) -> int:
    return sum(len(e["files"]) for entries in snapshot["dists"].values() for e in entries)


def files_match(snapshot: dict[str, Any]) -> str:
    """'N files match' ('1 file matches'): what a rollback's check says of the venv."""
    count = file_count(snapshot)
    return f"{count} file matches" if count == 1 else f"{count} files match"


def describe(snapshot: dict[str, Any]) -> str:
    """'sageattention 1.0.6, torch 2.11.0+cu130': torch as its version.py declares it (as
    check shows it), where its dist-info lacks the local tag."""
    parts = []
    for name in sorted(snapshot["dists"]):
        for entry in snapshot["dists"][name]:
            parts.append(f"{name} {entry.get('declared') or entry['version']}")
    return ", ".join(parts) or "none of them installed"


# --- the journal ----------------------------------------------------------------------------

class Journal:
    """journal.json in the venv's install folder; present only while a run is under way."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / "journal.json"
        self.backup = folder / "backup"
        self.data: dict[str, Any] = {}

    def exists(self) -> bool:
        return self.path.is_file()

    def load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RollbackIncomplete(
                f"the journal of an interrupted install ({self.path}) cannot be read: {exc}",
                f"compare the venv with `sagedoctor check`; the backups are in {self.backup}") \
                from exc
        if not isinstance(data, dict):
            raise RollbackIncomplete(f"{self.path} is not a journal", "")
        self.data = data
        return data

    def write(self, **changes: Any) -> None:
        self.data.update(changes)
        with room_needed(self.path, "the install's journal"):
            write_atomic(self.path, json.dumps(self.data, ensure_ascii=False).encode("utf-8"))

    def begin(self, python: Path, prefix: Path, work: Path, log: Path) -> None:
        self.data = {}
        self.write(schema_version=1, pid=os.getpid(), started=time.time(), python=str(python),
                   prefix=str(prefix), work=str(work), log=str(log), phase="preparing",
                   build_pgid=None, boot=boot_id())

    def finish(self) -> None:
        if self.backup.exists():
            shutil.rmtree(self.backup, ignore_errors=True)
        self.path.unlink(missing_ok=True)


def back_up(snapshot: dict[str, Any], folder: Path,
            extra: Iterable[Path] = ()) -> dict[str, str]:
    """Copies of every file the touched distributions own, and of `extra` files the new
    wheels would overwrite; {original: copy}."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    copies: dict[str, str] = {}

    def keep(path: str) -> None:
        if path not in copies:
            copy = folder / str(len(copies))
            with room_needed(folder, "the backups of the files the install replaces; the "
                             "venv was not changed yet"):
                shutil.copy2(path, copy)
            copies[path] = str(copy)

    for name, entries in snapshot["dists"].items():
        if name in LIGHT:
            continue
        for entry in entries:
            for path, digest in entry["files"].items():
                if digest is not None and not digest.startswith("unreadable"):
                    keep(path)
    for path in extra:
        keep(str(path))
    return copies


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """A second Ctrl+C or SIGTERM must not cut a rollback short."""
    if sys.platform == "win32":
        yield
        return
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kinds = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    old = {s: signal.signal(s, signal.SIG_IGN) for s in kinds}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _prune(folders: set[Path], keep: set[Path], stop: Path) -> None:
    """Remove folders left empty (or holding only __pycache__) by removed files."""
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        current = folder
        while current != stop and stop in current.parents and current not in keep:
            try:
                entries = list(current.iterdir())
            except OSError:
                break
            if any(e.name != "__pycache__" for e in entries):
                break
            shutil.rmtree(current, ignore_errors=True)
            current = current.parent


def journal_entry_for_edit(path: Path, backup: Path | None, keep: Path) -> dict[str, Any]:
    """What the journal keeps of a file the install is about to edit (invokeai.yaml): a copy
    of its backup in the journal's own folder `keep` (the one beside the file is the user's to
    delete), the sha256 the file had (None: the install creates it), its mode, owner and
    group, and where the backup beside it is (a rollback removes it)."""
    if backup is None:
        return {"path": str(path), "backup": None, "sha256_before": None}
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(backup, keep)
    meta = meta_of(path)
    return {"path": str(path), "backup": str(keep), "sha256_before": file_sha256(keep),
            "meta": meta.to_dict() if meta is not None else None, "beside": str(backup)}


def restore_edited_files(entries: list[dict[str, Any]], emit: OnEvent) -> int:
    """Put each journaled file back from its backup, newest edit first, proven by sha256."""
    for entry in reversed(entries):
        path = Path(str(entry.get("path")))
        before = entry.get("sha256_before")
        if before is None:
            if path.exists():
                path.unlink()
                emit(FileRemoved(str(path)))
            continue
        if _hash(str(path)) != before:
            backup = Path(str(entry.get("backup")))
            if _hash(str(backup)) != before:
                raise RollbackIncomplete(
                    f"{path} cannot be put back: its backup {backup} is gone or changed",
                    f"restore {path} by hand; the journal is kept")
            meta = FileMeta.from_dict(entry.get("meta")) or meta_of(path)
            try:
                write_keeping_meta(path, backup.read_bytes(), meta)
            except OSError as exc:
                raise RollbackIncomplete(f"{path} cannot be put back: {exc.strerror or exc}",
                                         f"restore {path} from {backup} by hand; the journal "
                                         "is kept") from exc
        if _hash(str(path)) != before:
            raise RollbackIncomplete(f"{path} could not be restored from {entry.get('backup')}",
                                     f"restore {path} by hand; the journal is kept")
        meta = FileMeta.from_dict(entry.get("meta"))
        if meta is not None:
            with contextlib.suppress(OSError):  # the content is what matters; said below
                restore_meta(path, meta)
        beside = entry.get("beside")
        if isinstance(beside, str) and _hash(beside) == before:  # only our copy, unchanged
            Path(beside).unlink(missing_ok=True)
        emit(FileRestored(str(path), before))
    return len(entries)


def roll_back(data: dict[str, Any], emit: OnEvent) -> str:
    """Undo the change phase the journal describes; returns the proven state, or raises."""
    python = Path(data["python"])
    before: dict[str, Any] = data["snapshot"]
    names = set(before["dists"]) | set(data.get("names", []))
    with signals_ignored():
        for original, moved in data.get("moved", []):
            if Path(moved).exists() and not Path(original).exists():
                shutil.move(moved, original)
        now = target_state(python, names - LIGHT)
        owned_before = {p for entries in before["dists"].values() for e in entries
                        for p in e["files"]}
        dist_infos_before = {Path(e["dist_info"]) for entries in before["dists"].values()
                             for e in entries}
        added = _added_since(data, now, dist_infos_before)
        removed_from, failures = _remove_added(added, owned_before)
        failures += _restore_backups(data.get("backups", {}), before)
        keep = {Path(p).parent for p in owned_before} | dist_infos_before
        _prune(removed_from, keep, Path(before["purelib"]))
        edited = restore_edited_files(list(data.get("edited_files") or []), emit)
        after = take_snapshot(python, names)
    differences = failures + snapshot_differences(before, after)
    if differences:
        raise RollbackIncomplete(
            "the rollback could not restore everything: " + "; ".join(differences),
            f"the backed-up files are kept in {data.get('backup_dir')}; reinstall the "
            "named distributions with the venv's installer")
    configs = f"; {edited} edited config file(s) restored" if edited else ""
    return (f"the venv is as before the install: {describe(before)}; "
            f"{files_match(before)} their sha256 from before{configs}")


def boot_id() -> str | None:
    """This boot's identity (Linux), None where unknown: a journal's build group is killed
    only in the boot that wrote it (after a reboot its number is another process's)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None


def _added_since(data: dict[str, Any], now: dict[str, Any], dist_infos_before: set[Path]
                 ) -> set[Path]:
    """Only paths that did not exist before the change go: what the new wheels wrote, and
    dist-info folders that appeared (the installer adds files to them of its own)."""
    added: set[Path] = {Path(p) for p in data.get("additions", [])}
    for entries in now["dists"].values():
        for entry in entries:
            if Path(entry["dist_info"]) not in dist_infos_before:
                added.add(Path(entry["dist_info"]))
                # its files too: a version uv put in place (uninstall's put-back) has
                # no prepared wheel whose paths the journal could list beforehand
                # (files only: a folder at such a path is someone else's)
                added.update(Path(f) for f in entry["files"]
                             if Path(f).is_symlink() or not Path(f).is_dir())
    return added


def _remove_added(added: set[Path], owned_before: set[str]) -> tuple[set[Path], list[str]]:
    """(the folders something was removed from, what could not be removed): each path is
    tried; the proof after the rollback says what stayed wrong."""
    removed_from: set[Path] = set()
    failures: list[str] = []
    for path in sorted(added, key=lambda p: len(p.parts), reverse=True):
        if str(path) in owned_before or not (path.exists() or path.is_symlink()):
            continue
        try:
            _remove(path)
        except OSError as exc:
            failures.append(f"cannot remove {path}: {exc.strerror or exc}")
            continue
        removed_from.add(path.parent)
    return removed_from, failures


def _restore_backups(copies: dict[str, str], before: dict[str, Any]) -> list[str]:
    """Put each backed-up file back where it changed; what could not be restored."""
    failures: list[str] = []
    digests_before = {p: d for entries in before["dists"].values() for e in entries
                      for p, d in e["files"].items()}
    for original, copy in copies.items():
        target = Path(original)
        # Unchanged files are left be: one the installer could not touch (chattr +i, a
        # read-only folder) cannot be written by us either, and needs nothing.
        if target.is_file() and not target.is_symlink() and _hash(original) == (
                digests_before.get(original) or _hash(copy)):
            continue
        try:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)  # a file replaced by a folder: put the file back
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(copy, target)
        except OSError as exc:
            failures.append(f"cannot restore {original}: {exc.strerror or exc}")
    return failures


def kill_group(pgid: int | None) -> bool:
    """Kill a build's whole process group that outlived its sagedoctor."""
    if (not isinstance(pgid, int) or isinstance(pgid, bool) or not 0 < pgid <= MAX_PID
            or sys.platform == "win32"):
        return False
    try:
        if os.getpgid(pgid) != pgid:
            return False
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OverflowError):
        return False
    return True


def recover_interrupted(folder: Path, emit: OnEvent) -> bool:
    """Finish what a killed run left behind (call with the venv's lock held)."""
    journal = Journal(folder)
    if not journal.exists():
        return False
    data = journal.load()
    pid = data.get("pid")
    # Its writer held this lock while it ran: a live process of that PID now is another one.
    emit(RecoveryStarted(pid if isinstance(pid, int) else None))
    pgid = data.get("build_pgid")
    if data.get("boot") == boot_id() and isinstance(pgid, int) and kill_group(pgid):
        emit(BuildStopped(pgid))
    work = data.get("work")
    if isinstance(work, str) and Path(work).exists():
        shutil.rmtree(work, ignore_errors=True)
        emit(WorkFolderRemoved(work))
    if data.get("phase") == "changing":
        emit(RollbackFinished(roll_back(data, emit)))
    else:
        emit(NothingToUndo())
    journal.finish()
    return True
