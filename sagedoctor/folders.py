"""Where sagedoctor keeps its own files for this user: the one place its folders are named."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

AppFolder = Literal["cache", "log", "state", "config"]


def app_folder(kind: AppFolder) -> Path:
    """sagedoctor's own folder of this kind, as platformdirs names it on this OS (XDG_* on
    Linux, %LOCALAPPDATA% on Windows)."""
    import platformdirs  # here: only commands that touch a folder pay for it

    where = {"cache": platformdirs.user_cache_dir, "log": platformdirs.user_log_dir,
             "state": platformdirs.user_state_dir, "config": platformdirs.user_config_dir}[kind]
    return Path(where("sagedoctor", appauthor=False))


def bytecode_folder() -> Path:
    """Where a target interpreter that sagedoctor starts keeps the bytecode it compiles, where
    it writes none beside the sources (runtime/bytecode.py)."""
    return app_folder("cache") / "bytecode"
