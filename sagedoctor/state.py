"""The one per-venv store. `VenvFiles` names every file sagedoctor keeps for a venv (inside
it: `<venv>/sagedoctor/`, names from runtime/files.py; outside: the user's state folder, keyed
by `venv_key`); `write_record` is the one atomic writer; `still_as_verified` the one answer to
"is this venv still what verify proved?" that check, post-update, enable and the TUI give.

What `sagedoctor verify` proved is a `VerifyRecord`, written twice: under the user's state
folder, and as `<venv>/sagedoctor/verified.json`, which the start-up hook reads with the
standard library. A non-routing verdict is stored too (the doctor remembers a wrong kernel);
the hook arms only on 'routing'. What install put in and replaced is an `InstallRecord`
(`<venv>/sagedoctor/installed.json`). A corrupt file reads as unverified, never as a crash."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from packaging.utils import canonicalize_name

from .errors import OutOfSpace, SettingError, disk_full
from .facts import PYVENV_CFG_SAYS, InterruptedInstall
from .file_meta import write_atomic
from .proc import pid_alive
from .runtime import files as names
from .runtime.records import (
    Fingerprint,
    RecordUnreadable,
    parse_arming_record,
    parse_fingerprint,
    read_record_bytes,
    record_problem,
)

if TYPE_CHECKING:
    from .runtime.records import FileStat

SCHEMA_VERSION = 1
VERDICTS = ("routing", "sdpa-only", "broken")
Status = Literal["verified", "unverified", "corrupt"]
HOOK_FILE = names.HOOK_FILE  # the start-up hook `sagedoctor enable` writes


def state_dir() -> Path:
    from .folders import app_folder

    root = app_folder("state")
    _refuse_unusable_state_root(root)
    return root


def _refuse_unusable_state_root(root: Path) -> None:
    """XDG_STATE_HOME=/dev/null (or a file): the state folder can never be made under it.
    Said as the setting it is (SD905), not met as an internal error at the first mkdir."""
    import os
    import stat
    import sys

    for folder in (root, *root.parents):
        try:
            info = folder.stat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return  # cannot tell: the write that follows says what is wrong
        if stat.S_ISDIR(info.st_mode):
            return
        variable = ("LOCALAPPDATA" if sys.platform == "win32" else
                    "XDG_STATE_HOME" if os.environ.get("XDG_STATE_HOME") else "HOME")
        raise SettingError(variable, os.environ.get(variable, ""),
                           f"usable: {folder} is not a folder, so sagedoctor's state folder "
                           f"{root} cannot be made there")


def venv_key(prefix: Path | str) -> str:
    """The venv's name in the state folder: its resolved prefix, hashed (one venv reached by
    two spellings, a link or a relative path, is one venv)."""
    # os.fsencode: a path that is not UTF-8 (its bytes kept as surrogates) has a key too
    return hashlib.sha256(os.fsencode(Path(prefix).resolve())).hexdigest()[:16]


@dataclass(frozen=True)
class VenvFiles:
    """Every file sagedoctor keeps for one venv."""

    prefix: Path

    @property
    def records(self) -> Path:  # <venv>/sagedoctor/
        return Path(names.records_dir(str(self.prefix)))

    def _in_venv(self, name: str) -> Path:
        return Path(names.record_file(str(self.prefix), name))

    @property
    def verified(self) -> Path:  # the hook's arming record
        return self._in_venv(names.VERIFIED)

    @property
    def calibration(self) -> Path:
        from .runtime.records import venv_calibration_path

        return Path(venv_calibration_path(str(self.prefix)))

    @property
    def installed(self) -> Path:
        return self._in_venv(names.INSTALLED)

    @property
    def invokeai_edit(self) -> Path:
        return self._in_venv(names.INVOKEAI_EDIT)

    @property
    def auto_repair_marker(self) -> Path:
        return self._in_venv(names.AUTO_REPAIR_MARKER)

    @property
    def auto_repair_log(self) -> Path:
        return self._in_venv(names.AUTO_REPAIR_LOG)

    def user_state(self, root: Path | None = None) -> Path:
        """The user-state copy of verify's record (why, whatever the verdict)."""
        return (root or state_dir()) / "venvs" / f"{venv_key(self.prefix)}.json"

    def install_folder(self, root: Path | None = None) -> Path:
        """<state>/venvs/<key>.install/: the install lock, journal and backups."""
        return (root or state_dir()) / "venvs" / f"{venv_key(self.prefix)}.install"


@dataclass(frozen=True)
class VerifyRecord:
    verdict: str
    verified_at: str
    fingerprint: dict[str, Any]
    results: dict[str, Any] = field(default_factory=dict)  # the verify's own, opaque here
    post_update: tuple[str, ...] = ()  # the command the hook may start (auto-repair)

    @property
    def typed_fingerprint(self) -> Fingerprint:
        """`fingerprint` (the wire form, written as it came) parsed; a record read back
        always has one that parses (parse_record refuses it otherwise)."""
        return parse_fingerprint(self.fingerprint) or Fingerprint(None, {})

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "verdict": self.verdict,
                "verified_at": self.verified_at, "fingerprint": self.fingerprint,
                "results": self.results, "post_update": list(self.post_update)}


def state_path(prefix: Path) -> Path:
    return VenvFiles(Path(prefix)).user_state()


def venv_record_path(prefix: Path) -> Path:
    return VenvFiles(Path(prefix)).verified


def parse_record(data: object) -> VerifyRecord | None:
    """A record from hostile JSON, or None where any field is off: the arming record's
    fields (runtime/records.parse_arming_record, as the hook reads verified.json), this
    schema, a known verdict and the verify's results."""
    arming = parse_arming_record(data)
    if arming is None or not isinstance(data, dict) \
            or data.get("schema_version") != SCHEMA_VERSION:
        return None
    results = data.get("results", {})
    if arming.verdict not in VERDICTS or not isinstance(results, dict):
        return None
    return VerifyRecord(arming.verdict, arming.verified_at, data["fingerprint"], results,
                        arming.post_update)


def load_status(prefix: Path) -> tuple[Status, VerifyRecord | None]:
    """'unverified' (no record), 'corrupt' (a record that does not parse) or 'verified'."""
    path = state_path(prefix)
    try:  # only a regular file, bounded, never blocking (a FIFO there must not hang check)
        text = read_record_bytes(str(path)).decode("utf-8")
    except FileNotFoundError:
        return "unverified", None
    except (OSError, UnicodeDecodeError):
        return "corrupt", None
    try:
        record = parse_record(json.loads(text))
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        record = None
    return ("verified", record) if record is not None else ("corrupt", None)


def load_record(prefix: Path) -> VerifyRecord | None:
    return load_status(prefix)[1]


def _json_bytes(data: dict[str, Any]) -> bytes:
    """UTF-8 JSON; where a path is not UTF-8 (its bytes kept as surrogates), escaped ASCII,
    which reads back as the same path."""
    try:
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(data, indent=2) + "\n").encode("ascii")


def write_record(path: Path, data: dict[str, Any], what: str) -> None:
    """A record whole or not at all (file_meta.write_atomic): on a full disk the old one
    stays and no partial temporary file is left behind (SD922 names the folder)."""
    try:
        write_atomic(path, _json_bytes(data))
    except OSError as exc:
        if disk_full(exc):
            raise OutOfSpace(path, f"{what}; the previous one is kept") from exc
        raise


_VERIFY_RECORD = "sagedoctor's record of what verify proved"


def save_record(prefix: Path, record: VerifyRecord,
                venv_extra: dict[str, Any] | None = None) -> Path:
    """The user-state copy always (its path is returned); the venv's (the hook's arming
    record, with `venv_extra` beside it: the kernels verify chose) only for 'routing', so an
    old passing verdict cannot switch a broken build on. One writer for both files."""
    data = record.to_json()
    path = state_path(prefix)
    write_record(path, {**data, "prefix": str(Path(prefix).resolve())}, _VERIFY_RECORD)
    if record.verdict != "routing":
        forget_routing(prefix)
        return path
    write_record(venv_record_path(prefix), {**(venv_extra or {}), **data}, _VERIFY_RECORD)
    return path


def forget_routing(prefix: Path) -> None:
    """Routing off: the hook's arming record goes; the user-state record (why) stays."""
    venv_record_path(prefix).unlink(missing_ok=True)



def hook_on(prefix: Path, site_packages: Path | None = None) -> bool:
    """Whether the start-up hook is on: the one answer check, enable, post-update and the TUI
    give. On: a file at the hook's path in the target's site-packages (where the caller knows
    it: a base or conda Python's lies outside the venv patterns) or in one of the venv's.
    Something there that is no file (a folder, a FIFO) is off: every Python skips it (SD136)."""
    sites = [str(site_packages)] if site_packages is not None else []
    return any((Path(site) / HOOK_FILE).is_file() for site in sites + venv_site_dirs(prefix))


def hook_problem(prefix: Path) -> str | None:
    """What is at the hook's path and is no file (a folder, a FIFO, a loop), or None."""
    for site in venv_site_dirs(prefix):
        problem = record_problem(str(Path(site) / HOOK_FILE))
        if problem is not None:
            return problem
    return None


def venv_site_dirs(prefix: Path) -> list[str]:
    """The venv's own site-packages (POSIX lib/pythonX.Y/, Windows Lib/); under the prefix of
    a Debian or Ubuntu system Python (an embedded-style copy of one) its dist-packages."""
    found = sorted(str(p) for pattern in ("lib/python3*/site-packages",
                                          "lib/python3*/dist-packages",
                                          "local/lib/python3*/dist-packages")
                   for p in prefix.glob(pattern) if p.is_dir())
    windows = prefix / "Lib" / "site-packages"
    if windows.is_dir() and str(windows) not in found:
        found.append(str(windows))
    return found


def default_post_update(prefix: Path, python: Path) -> tuple[str, ...]:
    import sys

    # What the hook's opt-in auto-repair starts (it adds --yes): verify again and repair; an
    # embedded Python (no pyvenv.cfg, ComfyUI's python_embeded) is named by its interpreter.
    target = (("--venv", str(prefix)) if (prefix / "pyvenv.cfg").is_file()
              else ("--python", str(python)))
    return (sys.executable, "-m", "sagedoctor", "post-update", *target)


def record_verification(prefix: Path, python: Path, verdict: str, fingerprint: dict[str, Any],
                        results: dict[str, Any], when: str,
                        kernels: dict[str, str | None] | None = None) -> Path:
    """What `verify` calls after each self-test, whatever the verdict; `kernels` (per
    arch|dtype|head size, the kernel verify chose) go into the venv's arming record."""
    record = VerifyRecord(verdict, when, dict(fingerprint), dict(results),
                          default_post_update(prefix, python))
    return save_record(prefix, record, {"kernels": dict(kernels)} if kernels else None)


# --- what install put in the venv and what it replaced (uninstall puts that back) -----------

RECORD_SCHEMA = 1


@dataclass(frozen=True)
class InstallRecord:
    installed: dict[str, str] = field(default_factory=dict)  # name -> version sagedoctor put
    replaced: dict[str, str] = field(default_factory=dict)  # name -> the user's version before
    # name -> how sagedoctor built what it installed (a source build's C++ standard patch)
    built: dict[str, str] = field(default_factory=dict)


def _str_map(value: object) -> TypeGuard[dict[str, str]]:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in value.items())


def read_install_record(prefix: str | Path) -> InstallRecord | None:
    """The record, or None where there is none or it is not one of ours (hostile input: a
    regular file only, bounded, never blocking)."""
    try:
        data = json.loads(read_record_bytes(str(VenvFiles(Path(prefix)).installed)))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
        return None
    installed, replaced, built = data.get("installed"), data.get("replaced"), data.get("built")
    if not _str_map(installed) or not _str_map(replaced):
        return None
    return InstallRecord(dict(installed), dict(replaced), dict(built) if _str_map(built) else {})


def merged_record(old: InstallRecord | None, before: dict[str, str], after: dict[str, str],
                  changed: frozenset[str]) -> InstallRecord:
    """Pure. The user's original version is kept across installs: a version sagedoctor put
    there itself is never recorded as 'replaced'."""
    installed = dict(old.installed) if old else {}
    replaced = dict(old.replaced) if old else {}
    for name in sorted(str(canonicalize_name(n)) for n in changed):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if was is not None and name not in installed and name not in replaced:
            replaced[name] = was
        if now is None:
            installed.pop(name, None)
        else:
            installed[name] = now
    return InstallRecord(installed, replaced)


def record_install(prefix: str | Path, before: dict[str, str], after: dict[str, str],
                   changed: frozenset[str], built: dict[str, str] | None = None) -> None:
    """Called by the executor once a plan has run (names canonical, as installed_* lists);
    `built` says how a distribution it built was made (the patches of its source build)."""
    old = read_install_record(prefix)
    record = merged_record(old, before, after, changed)
    notes = {n: v for n, v in (old.built if old else {}).items()
             if n in record.installed and n not in changed}
    notes.update({str(canonicalize_name(n)): v for n, v in (built or {}).items()})
    write_record(VenvFiles(Path(prefix)).installed,
                 {"schema": RECORD_SCHEMA, "installed": record.installed,
                  "replaced": record.replaced, "built": notes},
                 "sagedoctor's record of what install put in this venv")


# --- is this venv still what verify proved? ------------------------------------------------

def venv_python_version(prefix: Path) -> str | None:
    """pyvenv.cfg's `version` (venv, virtualenv) or `version_info` (uv): X.Y.Z."""
    try:
        text = read_record_bytes(str(prefix / "pyvenv.cfg"), 64 * 1024).decode(
            "utf-8", errors="replace")
    except OSError:
        return None
    values = {}
    for line in text.splitlines()[:64]:
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    found = values.get("version_info") or values.get("version")
    if not found:
        return None
    parts = found.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and all(p.isdigit() for p in parts[:3]) \
        else None


def arming_problem(prefix: Path, record: VerifyRecord) -> str | None:
    """Why the venv's arming record (`verified.json`, what the hook reads) does not carry the
    passing `record` of the user-state copy (what check reads), or None where it does."""
    path = venv_record_path(prefix)
    try:
        data = json.loads(read_record_bytes(str(path)).decode("utf-8"))
    except RecordUnreadable as exc:
        return f"the venv's arming record is unreadable: {exc}"
    except FileNotFoundError:
        return f"the venv's arming record {path} is missing"
    except (OSError, ValueError, RecursionError):
        return f"the venv's arming record {path} does not parse"
    armed = parse_arming_record(data)
    if armed is None or armed.verdict != "routing":
        return f"the venv's arming record {path} is not a passing one"
    if armed.verified_at != record.verified_at or armed.fingerprint != record.typed_fingerprint:
        return (f"the venv's arming record {path} is from another verify "
                f"({armed.verified_at}, not {record.verified_at})")
    # The hook also refuses a calibration record that is no file (a folder, a FIFO, a loop):
    # the same answer here, so that check reports it and post-update's verify replaces it.
    calibration = record_problem(str(VenvFiles(prefix).calibration))
    if calibration is not None:
        return f"the venv's calibration record is unreadable: {calibration}"
    return None


def runs_recorded_interpreter(prefix: Path, recorded: FileStat | None) -> bool:
    """Whether the venv's python resolves to the interpreter binary a verify recorded, and
    that binary is unchanged since."""
    import os

    from .runtime.hook import interpreter_changed

    if recorded is None:
        return False
    for name in ("bin/python", "bin/python3", "Scripts/python.exe"):
        python = prefix / name
        if python.exists():
            return (os.path.realpath(python) == recorded[0]
                    and not interpreter_changed(recorded))
    return False


def changes_since(prefix: Path, fingerprint: Fingerprint) -> tuple[str, ...]:
    """What changed in the venv since a verify's fingerprint: 'python 3.12 -> 3.13', the
    interpreter binary rewritten (a base-Python upgrade), and the names of the distributions
    whose files were rewritten (their dist-info's RECORD, by stat, as the hook compares
    them)."""
    from .runtime.hook import dist_stats, interpreter_changed, stat_differences

    out: list[str] = []
    verified = fingerprint.python
    # pyvenv.cfg keeps the version the venv was made with: a patch upgrade of the base Python
    # leaves it as it was, so only its X.Y says something (the binary's stat says the rest).
    python = venv_python_version(prefix)
    if python is not None and verified is not None \
            and python.split(".")[:2] != verified.split(".")[:2]:  # None: cannot tell
        if runs_recorded_interpreter(prefix, fingerprint.interpreter):
            # the venv still runs the very interpreter verify ran: pyvenv.cfg is what is off
            # (verify again would pass again, and this would refuse again)
            out.append(f"{PYVENV_CFG_SAYS} Python {python}, but the venv's interpreter is "
                       f"Python {verified}, the one verify ran, unchanged")
        else:
            out.append(f"python {verified} -> {python}")
    elif fingerprint.interpreter is not None and interpreter_changed(fingerprint.interpreter):
        out.append(f"python {verified}: {fingerprint.interpreter[0]} was replaced since "
                   "(an upgrade of the base Python)")
    # a record from before "sites" (or with none): the venv's own
    sites = list(fingerprint.sites) if fingerprint.sites else venv_site_dirs(prefix)
    live = dist_stats(sites)
    if fingerprint.stat is not None:
        out += stat_differences(fingerprint.stat, live)
        return tuple(out)
    # A record from before the stat data: the versions, read from the dist-info names.
    dists = fingerprint.dists
    for name in sorted(live):
        entry = live[name]
        now = entry[0][:-len(".dist-info")].rsplit("-", 1)[-1] if entry else None
        if dists.get(name) != now:
            out.append(f"{name} {dists.get(name) or '(none)'} -> {now or '(none)'}")
    return tuple(out)


def still_as_verified(prefix: Path) -> tuple[bool, tuple[str, ...]]:
    """(True, ()) where the last verify passed ('routing') and the venv is still what it
    proved; else (False, what differs or why not). The one answer of check, post-update,
    enable and the TUI: the user-state copy says what verify found, the venv's copy (what
    the hook arms from) must be the same verify, and the venv's Python and installed files
    must match its fingerprint. Files only, no target process."""
    status, record = load_status(prefix)
    if record is None:
        return False, ("no verify record" if status == "unverified"
                       else "the record is corrupt",)
    if record.verdict != "routing":
        return False, (f"the last verify's verdict was {record.verdict}",)
    problem = arming_problem(prefix, record)
    if problem is not None:
        return False, (problem,)
    changes = changes_since(prefix, record.typed_fingerprint)
    return not changes, changes


# --- the install journal's read side (install/transaction.py writes it) ----------------------

MAX_JOURNAL_BYTES = 64 * 1024 * 1024  # a journal names files and backups; never gigabytes
JOURNAL_FILE = "journal.json"


def _journal_fields(path: Path) -> tuple[int | None, str | None]:
    """(pid, phase) from the journal, or (None, None) where it cannot be read: the file's
    being there is the fact; what is in it only adds detail."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_JOURNAL_BYTES:
            return None, None
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    pid, phase = data.get("pid"), data.get("phase")
    return (pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            phase if isinstance(phase, str) else None)


def pending_install(prefix: Path, state_root: Path | None = None) -> InterruptedInstall | None:
    """The journal an install left for this venv (keyed as the install keys it), or None."""
    path = VenvFiles(Path(prefix)).install_folder(state_root) / JOURNAL_FILE
    try:
        if not (path.exists() or path.is_symlink()):
            return None
    except OSError:
        return None
    pid, phase = _journal_fields(path)
    held = lock_held(path.parent)  # the journal's PID may be another process's by now
    running = held if held is not None else pid is not None and pid_alive(pid)
    return InterruptedInstall(journal=str(path), pid=pid, phase=phase, running=running)


def lock_held(folder: Path) -> bool | None:
    """Whether an install holds the venv's lock in `folder` now (None: cannot tell). The
    lock, not a journal's PID, says whether an install runs: a PID is reused (after a reboot,
    by any process), the OS frees the lock of a dead holder."""
    path = folder / "install.lock"
    try:
        if not path.is_file():
            return False  # an install creates it before its journal
    except OSError:
        return None
    if sys.platform == "win32":
        from filelock import FileLock, Timeout

        probe = FileLock(str(path))
        try:
            probe.acquire(timeout=0)
        except Timeout:
            return True
        except OSError:
            return None
        probe.release()
        return False
    import fcntl

    try:  # read-only and not created: `check` probes it too
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
