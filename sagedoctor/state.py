"""The one store of what `sagedoctor verify` proved for a venv: a `VerifyRecord`, written
atomically twice, under the user's state folder (keyed by the venv's resolved prefix) and as
`<venv>/sagedoctor/verified.json`, which the start-up hook reads with the standard library.
A non-routing verdict is stored too (the doctor remembers a wrong kernel); the hook arms only
on 'routing'. A corrupt file reads as unverified, never as a crash."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import OutOfSpace, disk_full
from .runtime.records import read_record_bytes

SCHEMA_VERSION = 1
VERDICTS = ("routing", "sdpa-only", "broken")
Status = Literal["verified", "unverified", "corrupt"]


@dataclass(frozen=True)
class VerifyRecord:
    verdict: str
    verified_at: str
    fingerprint: dict[str, Any]
    results: dict[str, Any] = field(default_factory=dict)  # the verify's own, opaque here
    post_update: tuple[str, ...] = ()  # the command the hook may start (auto-repair)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "verdict": self.verdict,
                "verified_at": self.verified_at, "fingerprint": self.fingerprint,
                "results": self.results, "post_update": list(self.post_update)}


def state_dir() -> Path:
    from platformdirs import user_state_dir

    return Path(user_state_dir("sagedoctor", appauthor=False))


def state_path(prefix: Path) -> Path:
    key = hashlib.sha256(str(Path(prefix).resolve()).encode("utf-8")).hexdigest()[:16]
    return state_dir() / "venvs" / f"{key}.json"


def venv_record_path(prefix: Path) -> Path:
    return Path(prefix) / "sagedoctor" / "verified.json"


def parse_record(data: object) -> VerifyRecord | None:
    """A record from hostile JSON, or None where any field is off."""
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return None
    verdict, when = data.get("verdict"), data.get("verified_at")
    fingerprint, results = data.get("fingerprint"), data.get("results", {})
    command = data.get("post_update", [])
    if verdict not in VERDICTS or not isinstance(when, str) or not isinstance(
            fingerprint, dict) or not isinstance(results, dict) or not isinstance(
            command, list) or not all(isinstance(a, str) for a in command):
        return None
    return VerifyRecord(verdict, when, fingerprint, results, tuple(command))


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


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    """The record whole or not at all: on a full disk the old one stays and no partial
    temporary file is left behind (SD922 names the folder)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if disk_full(exc):
            raise OutOfSpace(path.parent, "sagedoctor's record of what verify proved; the "
                             "previous one is kept") from exc
        raise


def save_record(prefix: Path, record: VerifyRecord,
                venv_extra: dict[str, Any] | None = None) -> Path:
    """The user-state copy always (its path is returned); the venv's (the hook's arming
    record, with `venv_extra` beside it: the kernels verify chose) only for 'routing', so an
    old passing verdict cannot switch a broken build on. One writer for both files."""
    data = record.to_json()
    path = state_path(prefix)
    _write_atomic(path, {**data, "prefix": str(Path(prefix).resolve())})
    if record.verdict != "routing":
        forget_routing(prefix)
        return path
    _write_atomic(venv_record_path(prefix), {**(venv_extra or {}), **data})
    return path


def forget_routing(prefix: Path) -> None:
    """Routing off: the hook's arming record goes; the user-state record (why) stays."""
    venv_record_path(prefix).unlink(missing_ok=True)


HOOK_FILE = "sagedoctor-runtime.pth"  # the start-up hook `sagedoctor enable` writes


def hook_enabled(prefix: Path) -> bool:
    """Whether the start-up hook is in one of the venv's site-packages."""
    return any((Path(site) / HOOK_FILE).is_file() for site in venv_site_dirs(prefix))


def venv_site_dirs(prefix: Path) -> list[str]:
    """The venv's own site-packages (POSIX lib/pythonX.Y/, Windows Lib/)."""
    found = sorted(str(p) for p in prefix.glob("lib/python3*/site-packages") if p.is_dir())
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
