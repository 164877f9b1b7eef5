"""The start-up hook: `sagedoctor enable` puts one line in a .pth file of the venv that
imports .start and calls `install()`. At interpreter start that only registers an import
watcher; when `torch.nn.functional` is first imported this module checks that the venv still
matches what `sagedoctor verify` proved (Python, torch, triton, SageAttention) and, if so, puts a
trampoline in place of `scaled_dot_product_attention` that switches the router on in global
mode at the first call. Standard library only until then; never raises into the app.

No `from __future__ import annotations` here or in the package's __init__ (importing
__future__ is 0.1 ms of every start): annotations that name typing-only types are strings.
"""

import os
import sys

from .files import (
    AUTO_REPAIR_LOG,
    AUTO_REPAIR_MARKER,
    VERIFIED,
    record_file,
    records_dir,
)

# What interpreter start runs lives in .start; its names stay importable from here (a .pth
# line written by an older `enable` calls hook.install()).
from .start import OFF_ENV as OFF_ENV
from .start import TARGET as TARGET
from .start import FunctionalWatcher as FunctionalWatcher
from .start import _warn
from .start import install as install
from .start import runtime_switched_off as runtime_switched_off

MYPY = False  # typing.TYPE_CHECKING without importing typing: this runs at every start
if MYPY:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .records import ArmingRecord, FileStat, Fingerprint

FINGERPRINT_DISTS = ("torch", "triton", "triton-windows", "sageattention")
AUTO_REPAIR_ENV = "SAGEDOCTOR_AUTO_REPAIR"


def verified_path(prefix: "str | None" = None) -> str:
    return record_file(prefix or sys.prefix, VERIFIED)


def site_dirs() -> "list[str]":
    """The site-packages folders this interpreter imports from, in sys.path order."""
    return [entry for entry in sys.path
            if entry.replace("\\", "/").rstrip("/").lower().endswith("site-packages")
            and os.path.isdir(entry)]


def dist_stats(dirs: "Sequence[str]") -> "dict[str, FileStat | None]":
    """Per fingerprinted dist: (dist-info name, RECORD size, RECORD mtime_ns), first found.
    A listdir and a few stat() calls: an upgrade by pip or uv rewrites the dist-info."""
    out: dict[str, FileStat | None] = dict.fromkeys(FINGERPRINT_DISTS)
    for folder in dirs:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".dist-info"):
                continue
            project = entry[:-10].rsplit("-", 1)[0].lower().replace("_", "-")
            if project not in out or out[project] is not None:
                continue
            try:
                found = os.stat(os.path.join(folder, entry, "RECORD"))
            except OSError:
                continue
            out[project] = (entry, found.st_size, found.st_mtime_ns)
    return out


def interpreter_stat(path: "str | None" = None) -> "FileStat | None":
    """(path, size, mtime_ns) of the interpreter binary (the base one a venv runs on, links
    resolved), or None where it cannot be read. A base-Python upgrade rewrites it, while the
    venv's pyvenv.cfg keeps the version it was made with, so this, not pyvenv.cfg, is what the
    tool compares without starting the interpreter; the hook compares the same."""
    if path is None:
        base = getattr(sys, "_base_executable", None) or sys.executable
        if not base:
            return None
        path = os.path.realpath(base)
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (path, found.st_size, found.st_mtime_ns)


def interpreter_changed(recorded: "FileStat | None") -> bool:
    """Whether a fingerprint's interpreter stat no longer matches the file it names (a
    record without one, from an older sagedoctor: not by this test)."""
    return recorded is not None and interpreter_stat(recorded[0]) != recorded


def live_python() -> str:
    return ".".join(str(p) for p in sys.version_info[:3])


def live_versions() -> "dict[str, str | None]":
    """The installed version of each fingerprinted dist (None: not installed)."""
    from importlib import metadata

    dists: dict[str, str | None] = {}
    for name in FINGERPRINT_DISTS:
        try:
            dists[name] = metadata.version(name)
        except Exception:
            dists[name] = None
    return dists


def live_fingerprint() -> "dict[str, Any]":
    """This interpreter's fingerprint in its wire form (records.Fingerprint's JSON): what
    the self-test reports and verify records."""
    dists = live_versions()
    # "sites": where the stats came from, so that the tool compares the same folders
    # without starting this interpreter (a venv may import from a folder outside it).
    sites = site_dirs()
    return {"python": live_python(), "dists": dists,
            "stat": dist_stats(sites), "sites": sites, "interpreter": interpreter_stat()}


def stat_differences(saved: "Mapping[str, FileStat | None]",
                     live: "Mapping[str, FileStat | None]") -> "list[str]":
    """Which fingerprinted dists were installed, removed or rewritten since the verify."""
    return [name for name in sorted(set(saved) | set(live)) if saved.get(name) != live.get(name)]


def version_differences(saved: "Fingerprint", live: "Fingerprint") -> "list[str]":
    """What changed since the verified state, as 'torch 2.11.0 -> 2.12.0'."""
    out = []
    if saved.python != live.python:
        out.append(f"python {saved.python} -> {live.python}")
    old, new = saved.dists, live.dists
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            out.append(f"{name} {old.get(name) or '(none)'} -> {new.get(name) or '(none)'}")
    return out


def fingerprint_differences(saved: "Mapping[str, Any]", live: "Mapping[str, Any]") -> "list[str]":
    """version_differences over two fingerprints in their wire form (one that does not
    parse counts as no Python and no dists)."""
    from .records import Fingerprint, parse_fingerprint

    empty = Fingerprint(None, {})
    return version_differences(parse_fingerprint(saved) or empty,
                               parse_fingerprint(live) or empty)


def post_update_hint(prefix: "str | None" = None) -> str:
    folder = prefix or sys.prefix
    if not os.path.isfile(os.path.join(folder, "pyvenv.cfg")):
        # an embedded Python (ComfyUI's python_embeded) has no venv for --venv to name
        return f"sagedoctor post-update --python {sys.executable}"
    return f"sagedoctor post-update --venv {folder}"


def should_arm(prefix: "str | None" = None) -> bool:
    """Only a verify with verdict 'routing' whose fingerprint still matches arms the hook.
    Every failure is one line on stderr at most, and SDPA stays in use."""
    import json

    from .records import (
        RecordUnreadable,
        parse_arming_record,
        parse_fingerprint,
        read_record_bytes,
    )

    path = verified_path(prefix)
    try:
        saved = json.loads(read_record_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        _warn(f"this venv has no verification; SageAttention stays off "
              f"(run `{post_update_hint(prefix)}`)")
        return False
    except RecordUnreadable as exc:
        _warn(f"{exc}; SageAttention stays off (run `{post_update_hint(prefix)}`)")
        return False
    except (OSError, ValueError, RecursionError):
        _warn(f"{path} is unreadable; SageAttention stays off (run `{post_update_hint(prefix)}`)")
        return False
    if not isinstance(saved, dict) or saved.get("verdict") != "routing":
        return False  # the last verify found no kernel to route: SDPA, quietly
    record = parse_arming_record(saved)
    if record is None:
        _warn(f"{path} is unreadable; SageAttention stays off (run `{post_update_hint(prefix)}`)")
        return False
    fingerprint = record.fingerprint
    if fingerprint.stat is not None:
        changed = [] if fingerprint.python == live_python() and not \
            interpreter_changed(fingerprint.interpreter) else ["python"]
        changed += stat_differences(fingerprint.stat, dist_stats(site_dirs()))
    else:  # a record from before the stat data: compare versions
        live = parse_fingerprint(live_fingerprint())
        changed = version_differences(fingerprint, live) if live is not None else ["python"]
    if changed:
        _warn(", ".join(changed) + " changed since the last verify; SageAttention stays off "
              f"until `{post_update_hint(prefix)}` runs")
        maybe_auto_repair(record, prefix)
        return False
    return calibration_readable(prefix)


def calibration_readable(prefix: "str | None" = None) -> bool:
    """The router reads calibration.json at the first attention call: something there that
    is no file, or is too big to be one, keeps the hook off (one line) rather than stall or
    slow the app then. No file is fine: the router measures the shapes itself."""
    from .records import calibration_path, record_problem

    problem = record_problem(calibration_path(prefix))
    if problem is not None:
        _warn(f"{problem}; SageAttention stays off (run `{post_update_hint(prefix)}`)")
        return False
    return True


# Runs the repair (argv[2:]), then removes the marker (argv[1]).
_REPAIR_PARENT = ("import os, subprocess, sys\n"
                  "try:\n"
                  "    subprocess.call(sys.argv[2:])\n"
                  "finally:\n"
                  "    try:\n"
                  "        os.unlink(sys.argv[1])\n"
                  "    except OSError:\n"
                  "        pass\n")


def maybe_auto_repair(record: "ArmingRecord", prefix: "str | None" = None) -> None:
    """SAGEDOCTOR_AUTO_REPAIR=1: start the recorded post-update command once, detached.
    A marker created with O_EXCL makes later interpreter starts leave it alone; post-update
    removes it when done and holds the venv's install lock while it verifies, and the
    install transaction its own while it changes the venv. Its output goes to
    <venv>/sagedoctor/auto-repair.log."""
    if os.environ.get(AUTO_REPAIR_ENV, "").strip() != "1":
        return
    argv = record.post_update
    if not argv:
        return
    marker = record_file(prefix or sys.prefix, AUTO_REPAIR_MARKER)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except OSError:
        return  # started before (post-update removes the marker when done) or read-only
    import subprocess

    flags: dict[str, Any] = {"start_new_session": True} if os.name != "nt" else {
        "creationflags": 0x00000008 | 0x00000200}  # DETACHED_PROCESS | NEW_PROCESS_GROUP
    try:
        # From the records folder, not the app's: `python -m sagedoctor` imports from the
        # current folder first, and an app folder holding a `sagedoctor/` folder (a custom
        # node, a checkout) was imported instead. The small parent (-I: no such folder, no
        # PYTHON* variables) removes the marker when the repair ends, however it ends: one
        # that died before post-update ran (an ImportError) is tried again at a later start.
        with open(record_file(prefix or sys.prefix, AUTO_REPAIR_LOG), "ab") as log:
            subprocess.Popen([sys.executable, "-I", "-c", _REPAIR_PARENT, marker, *argv,
                              "--yes"], stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, cwd=records_dir(prefix or sys.prefix),
                             **flags)
    except OSError:
        try:  # noqa: SIM105 (no contextlib: the hook loads as little as it can)
            os.unlink(marker)  # not started: a later start may try again
        except OSError:
            pass


def arm(functional: "Any", enable: "Callable[[], Any] | None" = None) -> None:
    """Replace SDPA with a trampoline: modules that bind the name at import get it too."""
    real = functional.scaled_dot_product_attention
    state: dict[str, Any] = {}

    def scaled_dot_product_attention(*args: "Any", **kwargs: "Any") -> "Any":
        router = state.get("router")
        if router is None:
            try:
                functional.scaled_dot_product_attention = real  # the router keeps the real one
                router = (enable or _enable_global)()
            except Exception as exc:  # never break the app: plain SDPA from here on
                _warn(f"the SageAttention router did not start ({exc}); using SDPA")
                state["router"] = False
                return real(*args, **kwargs)
            state["router"] = router
        if router is False:
            return real(*args, **kwargs)
        return router.patched(*args, **kwargs)

    scaled_dot_product_attention.__doc__ = real.__doc__
    scaled_dot_product_attention.__wrapped__ = real  # type: ignore[attr-defined]
    functional.scaled_dot_product_attention = scaled_dot_product_attention


def _enable_global() -> "Any":
    from .router import enable_global

    return enable_global()
