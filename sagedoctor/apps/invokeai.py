"""InvokeAI: the install's step that sets keys in invokeai.yaml safely (and its undo), and
the switch that turns SageAttention on or off for the target venv's InvokeAI.

Only keys the installed InvokeAI declares are written (its settings class forbids unknown
keys: 6.14.2 has no `attention_backend` and would refuse to start). The edit keeps comments
(ruamel.yaml), the BOM and line endings; it is written atomically beside a timestamped backup,
never while that InvokeAI runs (it rewrites the file from its settings page), and the edited
copy is first loaded by InvokeAI's own loader in the target interpreter.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path

from ..errors import SagedoctorError
from ..events import ConfigEdited, OnEvent
from ..facts import Facts, InvokeAIFacts, TargetFacts
from ..file_meta import FileMeta, meta_of, restore_meta, write_atomic, write_keeping_meta
from ..proc import ToolMissing, ToolTimeout
from ..runtime.records import read_record_bytes
from ..target_answer import ask_target, with_answer_function

MAX_CONFIG_BYTES = 1_000_000
BOM = b"\xef\xbb\xbf"
LOADER_TIMEOUT_S = 120.0


class InvokeAIRunning(SagedoctorError):
    code = "SD941"


class InvokeAIConfigError(SagedoctorError):
    code = "SD942"


class InvokeAIConfigRejected(SagedoctorError):
    code = "SD943"


@dataclass(frozen=True)
class ConfigEdit:
    """What the step changed; `undo_edit` puts it back. JSON-able for a journal."""

    path: str
    backup: str | None  # None: the file did not exist before
    settings: tuple[tuple[str, str], ...]
    validated_by: str
    meta: FileMeta | None = None  # the file's mode, owner and group before the edit

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["meta"] = self.meta.to_dict() if self.meta is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ConfigEdit:
        settings = data.get("settings")
        backup = data.get("backup")
        if (not isinstance(data.get("path"), str) or not isinstance(settings, list | tuple)
                or not (backup is None or isinstance(backup, str))):
            raise InvokeAIConfigError("the InvokeAI edit record is damaged", "")
        pairs = tuple((str(k), str(v)) for k, v in settings)
        return cls(str(data["path"]), backup, pairs, str(data.get("validated_by", "")),
                   FileMeta.from_dict(data.get("meta")))


# --- is InvokeAI running? -------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    argv: tuple[str, ...]
    exe: str | None
    cwd: str | None = None  # the process's own folder: what its relative arguments mean


def _inside(path: str, folder: Path) -> bool:
    # As written and with links resolved: a venv's bin/python links out of the venv.
    try:
        plain = Path(os.path.abspath(path)).is_relative_to(os.path.abspath(folder))
        return plain or Path(path).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


def _located(arg: str, cwd: str | None, program: bool = False) -> str | None:
    """Where an argument names a file, as an absolute path; None where that is unknowable.

    A relative path means the process's own folder, never the asking one's (the auto-repair
    asks from inside the venv, which made `python invokeai-web` anywhere "from the venv"). A
    bare program name (argv[0]) is no path at all: the shell found it on PATH."""
    if os.path.isabs(arg):
        return arg
    if cwd is None or not os.path.isabs(cwd) or (program and Path(arg).name == arg):
        return None
    return os.path.join(cwd, arg)


def _is_sagedoctor(argv: tuple[str, ...]) -> bool:
    """`sagedoctor check invokeai --root ~/invokeai` names InvokeAI and is none."""
    stems = {Path(a).name.lower().removesuffix(".exe").removesuffix("-script.py")
             for a in argv[:2]}
    module = any(a == "-m" and b.split(".")[0] == "sagedoctor" for a, b in pairwise(argv))
    return module or "sagedoctor" in stems


def invokeai_processes(processes: Iterable[ProcessInfo], venv: Path,
                       root: Path) -> list[ProcessInfo]:
    """Processes running the InvokeAI of this venv or root. Pure over the records given.

    `invokeai-web` from the venv (as the launcher starts it, or run by the venv's python),
    or any InvokeAI started with `--root` this root; no sagedoctor command."""
    out = []
    for proc in processes:
        if _is_sagedoctor(proc.argv):
            continue
        names = [Path(a).name.lower() for a in proc.argv]
        runs_invokeai = any(n.startswith("invokeai") for n in names) or any(
            "invokeai" in a for a in proc.argv if a.startswith("invokeai."))
        if not runs_invokeai:
            continue
        paths = [where for i, a in enumerate(proc.argv) if Path(a).name.lower().startswith(
            ("invokeai", "python")) and (where := _located(a, proc.cwd, i == 0)) is not None]
        exe = _located(proc.exe, None) if proc.exe is not None else None
        from_venv = any(_inside(p, venv) for p in ([exe] if exe else []) + paths)
        argv = list(proc.argv)
        roots = [_located(argv[i + 1], proc.cwd) for i, a in enumerate(argv[:-1])
                 if a == "--root"]
        with_root = any(r is not None and _inside(r, root) and _inside(str(root), Path(r))
                        for r in roots)
        if from_venv or with_root:
            out.append(proc)
    return out


def running_processes() -> list[ProcessInfo]:
    """Every process psutil may read but this one (an install run from a pytest or a shell
    named after InvokeAI is no InvokeAI); others (another user's) are skipped."""
    import psutil

    out = []
    own = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline", "exe", "cwd"]):
        info = proc.info
        if info["pid"] == own:
            continue
        argv = info.get("cmdline") or []
        out.append(ProcessInfo(int(info["pid"]), tuple(str(a) for a in argv),
                               info.get("exe") or None, info.get("cwd") or None))
    return out


# --- editing --------------------------------------------------------------------------------

def _read(path: Path) -> tuple[bool, str, str]:
    """(has BOM, text with \\n endings, the original line ending)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read for ever
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise InvokeAIConfigError(f"{path} is {kind}; InvokeAI cannot read it",
                                      "move it away; nothing was changed")
        if info.st_size > MAX_CONFIG_BYTES:
            raise InvokeAIConfigError(f"{path} is larger than 1 MB", "check the file by hand")
        raw = path.read_bytes()
    except OSError as exc:
        raise InvokeAIConfigError(f"cannot read {path}: {exc.strerror or exc}",
                                  "check its permissions") from exc
    bom = raw.startswith(BOM)
    try:
        text = raw[len(BOM) if bom else 0:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvokeAIConfigError(f"{path} is not UTF-8 ({exc.reason} at byte {exc.start})",
                                  "save it as UTF-8; nothing was changed") from exc
    newline = "\r\n" if "\r\n" in text else "\n"
    return bom, text.replace("\r\n", "\n"), newline


def read_config_text(path: Path) -> str:
    """The file's text as the edit reads it (the install's preflight reads it the same way)."""
    return _read(path)[1]


MAX_FLOW_DEPTH = 64  # InvokeAI's own file nests 2 deep


def flow_depth(text: str) -> int:
    """How deep `[`/`{` nest outside quotes and comments (an upper bound is enough).

    ruamel's scanner is quadratic in open flow collections: 2,000 `[` take it 5 s to refuse."""
    depth = deepest = 0
    quote = ""
    comment = False
    for char in text:
        if comment:
            comment = char != "\n"
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            comment = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def edited_text(text: str, settings: Mapping[str, str], path: Path,
                remove: tuple[str, ...] = ()) -> str:
    """The file with each key set (and each of `remove` taken out), comments and order
    kept. Pure."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    if flow_depth(text) > MAX_FLOW_DEPTH:
        raise InvokeAIConfigError(f"{path} is not valid YAML for InvokeAI: nested more than "
                                  f"{MAX_FLOW_DEPTH} deep", "fix the file (or move it away) "
                                  "and run again")

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    try:
        data = yaml.load(text) if text.strip() else None
    except YAMLError as exc:
        # ruamel's first line is the context ("while constructing a mapping"); the problem
        # ("found duplicate key ...") and its line say what to fix.
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [""])[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InvokeAIConfigError(f"{path} is not valid YAML: {str(problem)[:200]}{where}",
                                  "fix the file (or move it away) and run again") from exc
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # ruamel's constructors raise these for values such as a date with month 13.
        why = "nested too deeply" if isinstance(exc, RecursionError) else f"{exc}"[:120]
        raise InvokeAIConfigError(f"{path} is not valid YAML: {why}",
                                  "fix the file (or move it away) and run again") from None
    if data is None:
        from ruamel.yaml.comments import CommentedMap

        data = CommentedMap()
    if not hasattr(data, "items") or not hasattr(data, "__setitem__"):
        raise InvokeAIConfigError(f"{path} must hold a mapping at the top level",
                                  "fix the file and run again")
    for key, value in settings.items():
        data[key] = value
    for key in remove:
        data.pop(key, None)
    out = io.StringIO()
    try:
        yaml.dump(data, out)
    except (YAMLError, RecursionError) as exc:
        raise InvokeAIConfigError(f"{path} cannot be written back as it was read: "
                                  f"{type(exc).__name__}", "edit the file by hand") from None
    if remove and not settings:
        # ruamel hangs the comment lines below a key on that key: popping it loses them.
        # A plain `key: word` line is dropped from the text itself where that is provably
        # the same mapping without the key; every other byte stays.
        return _without_lines(text, remove) or out.getvalue()
    return out.getvalue()


def _without_lines(text: str, keys: tuple[str, ...]) -> str | None:
    import re

    import yaml

    lines = text.splitlines(keepends=True)
    pattern = re.compile(r"(?P<key>[A-Za-z_][\w-]*):[ \t]+[\w.-]+[ \t]*(#.*)?\n?")
    drop = [i for i, line in enumerate(lines)
            if (m := pattern.fullmatch(line)) is not None and m["key"] in keys]
    candidate = "".join(line for i, line in enumerate(lines) if i not in drop)
    try:
        before, after = yaml.safe_load(text), yaml.safe_load(candidate) or {}
    except (yaml.YAMLError, ValueError, RecursionError):
        return None
    if not isinstance(before, dict) or not isinstance(after, dict):
        return None
    wanted = {k: v for k, v in before.items() if k not in keys}
    return candidate if after == wanted else None


_LOADER_SCRIPT = with_answer_function(r"""
import sys
from pathlib import Path
try:
    from invokeai.app.services.config.config_default import load_and_migrate_config
except Exception as exc:
    _answer({"loader": False, "error": "%s: %s" % (type(exc).__name__, exc)})
    sys.exit(0)
try:
    load_and_migrate_config(Path(sys.argv[1]))
except BaseException as exc:
    _answer({"loader": True, "ok": False,
             "error": ("%s: %s" % (type(exc).__name__, exc))[:2000]})
    sys.exit(0)
_answer({"loader": True, "ok": True})
""")


def prove_loads(python: Path, text: str, settings: Mapping[str, str], path: Path) -> str:
    """Load a copy with InvokeAI's own loader in the target (it may migrate: only the copy).

    Where that loader cannot be imported (a stand-in, a broken install), a strict YAML parse
    of the copy is the proof, and the returned text says so."""
    with tempfile.TemporaryDirectory(prefix="sagedoctor-invokeai-") as tmp:
        copy = Path(tmp) / "invokeai.yaml"
        copy.write_text(text, encoding="utf-8")
        try:
            answer = ask_target([str(python), "-I", "-c", _LOADER_SCRIPT, str(copy)],
                                timeout=LOADER_TIMEOUT_S).json()
        except (ToolMissing, ToolTimeout, ValueError, RecursionError) as exc:
            answer = {"loader": False, "error": str(exc)}
    if not isinstance(answer, dict):
        answer = {"loader": False, "error": "unexpected answer"}
    if answer.get("loader") is True:
        if answer.get("ok") is True:
            return "InvokeAI's own loader"
        raise InvokeAIConfigRejected(
            f"InvokeAI's loader rejects the edited {path}: {answer.get('error')}",
            "nothing was changed; this InvokeAI may not support the setting")
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvokeAIConfigRejected(f"the edited {path} does not parse: {exc}", "") from exc
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in settings.items()):
        raise InvokeAIConfigRejected(f"the edited {path} does not hold the settings", "")
    return (f"a strict YAML parse (InvokeAI's loader could not be imported: "
            f"{str(answer.get('error', ''))[:200]})")


def _atomic_write(path: Path, data: bytes, meta: FileMeta | None) -> None:
    try:
        write_keeping_meta(path, data, meta)
    except OSError as exc:
        raise InvokeAIConfigError(f"cannot write {path}: {exc.strerror or exc}",
                                  "check the permissions of the file and its folder") from exc


def backup_path(path: Path, now: datetime) -> Path:
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return path.with_name(f"{path.name}.sagedoctor-{stamp}.bak")


def refuse_if_running(path: Path, venv: Path,
                      processes: Callable[[], Iterable[ProcessInfo]] = running_processes) -> None:
    """Raise while the InvokeAI of this venv or of path's root runs. The transaction can call
    it before the venv is touched, so a running InvokeAI stops the install up front."""
    busy = invokeai_processes(processes(), venv, path.parent)
    if busy:
        pids = ", ".join(str(p.pid) for p in busy)
        raise InvokeAIRunning(f"InvokeAI is running from {venv} (pid {pids}); it rewrites "
                              f"{path.name} itself", "stop InvokeAI, then run again; nothing "
                              "was changed")


def apply_settings(path: Path, settings: Mapping[str, str], python: Path, venv: Path,
                   processes: Callable[[], Iterable[ProcessInfo]] = running_processes,
                   now: datetime | None = None,
                   before_write: Callable[[ConfigEdit], None] | None = None,
                   remove: tuple[str, ...] = ()) -> ConfigEdit:
    """Set the keys in invokeai.yaml (created if missing), take out those of `remove`, and
    return how to undo it.

    `before_write` gets the edit once the backup exists and before the file changes: the
    install journals it there, so a run killed right after the write is still undone."""
    refuse_if_running(path, venv, processes)
    # Anything in its place (a folder, a FIFO, a dangling link) is _read's to refuse.
    exists = path.exists() or path.is_symlink()
    bom, text, newline = _read(path) if exists else (False, "", "\n")
    new_text = edited_text(text, settings, path, remove)
    validated_by = prove_loads(python, new_text, settings, path)
    backup = None
    meta = meta_of(path) if exists else None
    if exists:
        backup = backup_path(path, now or datetime.now(timezone.utc))
        shutil.copy2(path, backup)  # the mode too; the owner and group where we may
        if meta is not None:
            restore_meta(backup, meta)
    edit = ConfigEdit(str(path), str(backup) if backup else None, tuple(settings.items()),
                      validated_by, meta)
    if before_write is not None:
        before_write(edit)
    data = (BOM if bom else b"") + new_text.replace("\n", newline).encode("utf-8")
    _atomic_write(path, data, meta)
    return edit


def undo_edit(edit: ConfigEdit) -> str:
    """Put invokeai.yaml back as it was before the edit; says what it restored."""
    path = Path(edit.path)
    if edit.backup is None:
        path.unlink(missing_ok=True)
        return f"removed {path} (sagedoctor had created it)"
    backup = Path(edit.backup)
    if not backup.is_file():
        raise InvokeAIConfigError(f"the backup {backup} is gone", f"check {path} by hand")
    _atomic_write(path, backup.read_bytes(), edit.meta or meta_of(path) or meta_of(backup))
    backup.unlink(missing_ok=True)  # the file is as it was: its copy has done its job
    return f"restored {path} from {backup} (its mode, owner and group too; the backup removed)"


def edit_record_path(prefix: str | Path) -> Path:
    from ..state import VenvFiles

    return VenvFiles(Path(prefix)).invokeai_edit


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def save_edit_record(prefix: str | Path, edit: ConfigEdit) -> None:
    """What sagedoctor last set in invokeai.yaml and the file's digest after it, so that
    disable and uninstall can put the file back where nothing changed it since."""
    data = {**edit.to_dict(), "written_sha256": file_sha256(Path(edit.path))}
    write_atomic(edit_record_path(prefix), json.dumps(data, indent=1).encode("utf-8"))


def load_edit_record(prefix: str | Path) -> tuple[ConfigEdit, str | None] | None:
    """(the edit, the digest it left) or None: no record, or a damaged one (hostile input)."""
    try:
        data = json.loads(read_record_bytes(str(edit_record_path(prefix))))
        if not isinstance(data, dict):
            return None
        written = data.get("written_sha256")
        return ConfigEdit.from_dict(data), written if isinstance(written, str) else None
    except (OSError, ValueError, TypeError, RecursionError, SagedoctorError):
        return None


def untouched_since(edit: ConfigEdit, written: str | None, path: Path) -> bool:
    """The file is exactly as the edit left it and its backup is still there: undo_edit
    then loses nothing of the user's."""
    return (edit.path == str(path) and written is not None and file_sha256(path) == written
            and (edit.backup is None or Path(edit.backup).is_file()))


def enable_invokeai(settings: Iterable[tuple[str, str]], config_path: str | None,
                    python: Path, emit: OnEvent,
                    before_write: Callable[[ConfigEdit], None] | None = None) -> ConfigEdit:
    """The install's enable-invokeai step (the plan holds it only where the installed InvokeAI
    declares the key)."""
    if config_path is None:
        raise InvokeAIConfigError("the plan names no invokeai.yaml", "pass --root DIR")
    venv = python.parent.parent  # bin/python and Scripts\python.exe alike
    edit = apply_settings(Path(config_path), dict(settings), python, venv,
                          before_write=before_write)
    emit(ConfigEdited(edit.path, edit.settings, edit.validated_by, edit.backup))
    return edit


# --- the switch: SageAttention on or off for the target's InvokeAI ---------------------------
# Where that InvokeAI declares `attention_backend`, enable sets it in invokeai.yaml (the
# install's step above: feature-detected, proven by InvokeAI's loader, backed up, refused while
# InvokeAI runs); elsewhere enable is `sagedoctor enable`, the venv's start-up hook. Disable
# undoes whichever applies.

KEY = "attention_backend"


class InvokeAISwitchError(SagedoctorError):
    code = "SD971"


@dataclass(frozen=True)
class Route:
    """How SageAttention reaches this InvokeAI: its own setting, or the start-up hook."""

    kind: str  # "setting" | "hook"
    choice: str | None  # the attention_backend value that means SageAttention
    why: str


@dataclass(frozen=True)
class SwitchState:
    """Is SageAttention on for this InvokeAI now, and by which route."""

    route: Route
    version: str
    on: bool
    value: str | None  # attention_backend as invokeai.yaml has it (the setting route)


def choose_route(target: TargetFacts, facts: Facts | None = None,
                 use: str | None = None) -> Route:
    """Pure: the setting where the release declares it with a SageAttention choice, unless
    the machine's facts make sagedoctor's hook the better switch (InvokeAI's own scope has no
    kernel for a GPU here, its rule's shapes measured slower) or `use` (--use) picks it."""
    package = target.invokeai
    if package is None:
        raise InvokeAISwitchError(f"InvokeAI is not installed in {target.prefix}",
                                  "pass --venv <InvokeAI root>/.venv (and --root DIR)")
    choice = next((c for c in package.attention_backend_choices if "sage" in c.lower()), None)
    if package.attention_backend_supported and choice:
        if facts is not None:
            from ..decide.app_switch import choose_invokeai_switch

            switch = choose_invokeai_switch(facts, use)
            if switch.use == "sagedoctor":
                return Route("hook", None, switch.why)
        return Route("setting", choice, f"InvokeAI {package.version} has an {KEY} setting")
    if package.attention_backend_unread is not None:
        return Route("hook", None, f"InvokeAI {package.version} declares {KEY}, but "
                     f"{package.attention_backend_unread}")
    return Route("hook", None, f"InvokeAI {package.version} has no {KEY} setting")


def switch_state(target: TargetFacts, inv: InvokeAIFacts | None,
                 facts: Facts | None = None, use: str | None = None) -> SwitchState | None:
    """None where InvokeAI is not installed in the target venv."""
    from ..hook import hook_on

    try:
        route = choose_route(target, facts, use)
    except InvokeAISwitchError:
        return None
    version = target.invokeai.version if target.invokeai else "?"
    if route.kind == "hook":
        return SwitchState(route, version, hook_on(target), None)
    value = inv.attention_backend if inv is not None else None
    return SwitchState(route, version, value == route.choice, value)


def reread(inv: InvokeAIFacts) -> InvokeAIFacts:
    """invokeai.yaml as it is now (the facts were read before any switch)."""
    from ..probe.invokeai import read_config

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
    from ..probe.invokeai import parse_config

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
                       now: datetime | None = None, facts: Facts | None = None,
                       use: str | None = None) -> str:
    """Turn SageAttention on for this InvokeAI; says which route was taken."""
    route = choose_route(target, facts, use)
    if route.kind == "hook":
        from ..hook import enable

        return (f"{route.why}, so SageAttention is on through the venv's start-up hook. "
                + enable(target).message)
    if target.sageattention is None:
        raise InvokeAISwitchError(f"SageAttention is not installed in {target.prefix}",
                                  f"run `sagedoctor install --venv {target.prefix}` first")
    fresh, path = _config(inv)
    assert route.choice is not None
    if fresh.attention_backend == route.choice:
        return f"Nothing to do: {path} already sets {KEY}: {route.choice}."
    edit = apply_settings(path, {KEY: route.choice}, Path(target.executable),
                          Path(target.prefix), processes, now)
    save_edit_record(target.prefix, edit)
    return (f"{route.why}: set {KEY}: {route.choice} in {path} (checked by "
            f"{edit.validated_by}; backup: {edit.backup or 'none, the file is new'}). "
            "Restart InvokeAI to use it.")


def disable_in_invokeai(target: TargetFacts, inv: InvokeAIFacts | None,
                        processes: Callable[[], Iterable[ProcessInfo]] = running_processes,
                        now: datetime | None = None, facts: Facts | None = None,
                        use: str | None = None) -> str:
    """Turn it off again: the file as it was where nothing else changed it since, else only
    the one key put back to its earlier value."""
    route = choose_route(target, facts, use)
    if route.kind == "hook":
        from ..hook import disable

        return f"{route.why}: the start-up hook is the switch. " + disable(target).message
    fresh, path = _config(inv)
    if fresh.attention_backend != route.choice:
        return (f"Nothing to do: {path} sets {KEY}: {fresh.attention_backend or 'nothing'}, "
                "not SageAttention.")
    loaded = load_edit_record(target.prefix)
    record, written = loaded if loaded else (None, None)
    if record is not None and untouched_since(record, written, path):
        refuse_if_running(path, Path(target.prefix), processes)
        done = undo_edit(record)
        edit_record_path(target.prefix).unlink(missing_ok=True)
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
    edit_record_path(target.prefix).unlink(missing_ok=True)
    return (f"Disabled in InvokeAI: set {KEY}: {value} in {path} (checked by "
            f"{edit.validated_by}; backup: {edit.backup}).")
