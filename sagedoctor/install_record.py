"""`<venv>/sagedoctor/installed.json`: what sagedoctor installed and what it replaced, so that
`sagedoctor uninstall` can put back what the user had (a triton-windows it swapped, say)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

RECORD_SCHEMA = 1


@dataclass(frozen=True)
class InstallRecord:
    installed: dict[str, str] = field(default_factory=dict)  # name -> version sagedoctor put
    replaced: dict[str, str] = field(default_factory=dict)  # name -> the user's version before
    # name -> how sagedoctor built what it installed (a source build's C++ standard patch)
    built: dict[str, str] = field(default_factory=dict)


def record_path(prefix: str | Path) -> Path:
    return Path(prefix) / "sagedoctor" / "installed.json"


def read_record(prefix: str | Path) -> InstallRecord | None:
    """The record, or None where there is none or it is not one of ours (hostile input)."""
    try:
        data = json.loads(record_path(prefix).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
        return None
    parts = [data.get("installed"), data.get("replaced")]
    if not all(isinstance(p, dict) and all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in p.items()) for p in parts):
        return None
    built = data.get("built", {})
    if not isinstance(built, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in built.items()):
        built = {}
    return InstallRecord(dict(parts[0]), dict(parts[1]), dict(built))  # type: ignore[arg-type]


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
    old = read_record(prefix)
    record = merged_record(old, before, after, changed)
    notes = {n: v for n, v in (old.built if old else {}).items()
             if n in record.installed and n not in changed}
    notes.update({str(canonicalize_name(n)): v for n, v in (built or {}).items()})
    path = record_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"schema": RECORD_SCHEMA, "installed": record.installed,
                               "replaced": record.replaced, "built": notes}, indent=1),
                   encoding="utf-8")
    os.replace(tmp, path)
