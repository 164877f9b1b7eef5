"""Per target venv: the fingerprint that was verified and the verdict, under the user's state
folder. The post-update check compares the live venv with it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    from platformdirs import user_state_dir

    return Path(user_state_dir("sagedoctor", appauthor=False))


def state_path(prefix: Path) -> Path:
    key = hashlib.sha256(str(prefix).encode("utf-8")).hexdigest()[:16]
    return state_dir() / "venvs" / f"{key}.json"


def record_verification(prefix: Path, python: Path, verdict: str, fingerprint: dict[str, Any],
                        calibration: dict[str, Any], when: str) -> Path:
    path = state_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"schema_version": 1, "prefix": str(prefix), "python": str(python),
            "verdict": verdict, "verified_at": when, "fingerprint": fingerprint,
            "calibration": calibration}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
