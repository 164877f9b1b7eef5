"""sagedoctor's own folders (cache, log, state, config) are named in one place, folders.app_folder,
and every user of them asks it: on Linux each follows its XDG_* variable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sagedoctor.folders import app_folder
from sagedoctor.index import user_index_path
from sagedoctor.install.cache import default_cache_dir
from sagedoctor.install.runlog import default_log_dir
from sagedoctor.state import state_dir


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG folders are Linux's")
def test_each_folder_follows_its_xdg_variable_and_its_users_ask_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roots = {kind: tmp_path / f"xdg {kind}" for kind in ("cache", "state", "config")}
    monkeypatch.setenv("XDG_CACHE_HOME", str(roots["cache"]))
    monkeypatch.setenv("XDG_STATE_HOME", str(roots["state"]))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(roots["config"]))
    assert app_folder("cache") == roots["cache"] / "sagedoctor"
    assert app_folder("state") == roots["state"] / "sagedoctor"
    assert app_folder("config") == roots["config"] / "sagedoctor"
    # platformdirs keeps logs under the state folder on Linux
    assert app_folder("log") == roots["state"] / "sagedoctor" / "log"
    assert default_cache_dir() == app_folder("cache")
    assert default_log_dir() == app_folder("log")
    assert state_dir() == app_folder("state")
    assert user_index_path() == app_folder("config") / "wheels_index.toml"
