"""The actions screen switching SageAttention on and off for the InvokeAI of a real venv under
a real InvokeAI root: through invokeai.yaml where the release declares `attention_backend`
(proven by its loader, in the venv's own interpreter), else through the start-up hook.

The stand-in InvokeAI is a real package in the venv: its config_default.py declares the
settings class the probe reads and a loader that forbids unknown keys, as InvokeAI's does."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from sagedoctor.hook import HOOK_LINE
from sagedoctor.tui.app import SagedoctorApp
from sagedoctor.tui.screens.actions import ActionsScreen
from sagedoctor.tui.session import TuiOptions
from tests.standins import (
    INVOKEAI_CONFIG_OLD,
    add_dist,
    add_invokeai,
    add_sageattention,
    make_venv,
    record_passing_verify,
)
from tests.tui_support import settle

pytestmark = pytest.mark.anyio
SIZE = (80, 24)

CONFIG_DEFAULT = textwrap.dedent('''\
    from typing import Literal
    CONFIG_SCHEMA_VERSION = "4.0.3"
    class InvokeAIAppConfig:
        schema_version: str = "4.0.3"
        precision: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
        device: str = "auto"
        attention_type: Literal["auto", "normal", "xformers", "sliced", "torch-sdp"] = "auto"
        attention_backend: Literal["auto", "torch-sdp", "sage"] = "auto"
    def load_and_migrate_config(path):
        fields = InvokeAIAppConfig.__annotations__
        for line in path.read_text(encoding="utf-8-sig").splitlines():
            line = line.split("#", 1)[0].rstrip()
            if line and not line.startswith(" ") and line.split(":", 1)[0] not in fields:
                raise ValueError(line + ": Extra inputs are not permitted")
        return InvokeAIAppConfig()
    ''')
CONFIG = ("# Internal metadata - do not edit:\r\n"
          "schema_version: 4.0.3\r\n"
          "\r\n"
          "# Put user settings here:\r\n"
          "precision: bfloat16   # kept\r\n")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("NO_COLOR", "VIRTUAL_ENV", "INVOKEAI_ROOT", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)


def invokeai_root(tmp_path: Path, config_default: str | None, version: str,
                  config: str = CONFIG) -> Path:
    """<root>/.venv holding InvokeAI and SageAttention stand-ins, and <root>/invokeai.yaml."""
    root = tmp_path / "Invoke é root"
    site = make_venv(root / ".venv")
    if config_default is None:
        add_invokeai(site, version, INVOKEAI_CONFIG_OLD)  # 6.14.2: no attention_backend
    else:
        add_dist(site, "invokeai", version, {
            "invokeai/__init__.py": "", "invokeai/app/__init__.py": "",
            "invokeai/app/services/__init__.py": "",
            "invokeai/app/services/config/__init__.py": "",
            "invokeai/app/services/config/config_default.py": config_default})
    add_sageattention(site, "2.2.0", ())
    (root / "invokeai.yaml").write_bytes(config.encode("utf-8"))
    return root


def static(app: SagedoctorApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def _open_actions(pilot: Pilot[Any], app: SagedoctorApp) -> None:
    await settle(pilot)
    await pilot.press("a")
    assert isinstance(app.screen, ActionsScreen)


async def test_invokeai_with_attention_backend_is_switched_in_its_yaml_and_put_back(
        tmp_path: Path) -> None:
    root = invokeai_root(tmp_path, CONFIG_DEFAULT, "6.15.0")
    config = root / "invokeai.yaml"
    before = config.read_bytes()
    app = SagedoctorApp(TuiOptions(venv=root / ".venv", root=root))
    async with app.run_test(size=SIZE) as pilot:
        await _open_actions(pilot, app)
        assert "InvokeAI 6.15.0: attention_backend: not set (SageAttention off)" in static(
            app, "#actions-target")
        await pilot.press("enter")  # Enable SageAttention in InvokeAI
        await settle(pilot)
        said = static(app, "#action-result")
        assert "has an attention_backend setting: set attention_backend: sage" in said
        assert "checked by InvokeAI's own loader" in said
        after = config.read_bytes()
        assert after.endswith(b"attention_backend: sage\r\n")
        assert b"precision: bfloat16   # kept\r\n" in after
        assert "(SageAttention on)" in static(app, "#actions-target")
        hook = next((root / ".venv").glob("lib/python3*/site-packages")) / \
            "sagedoctor-runtime.pth"
        assert not hook.exists()  # the setting, not the hook
        backups = list(root.glob("invokeai.yaml.sagedoctor-*.bak"))
        assert [b.read_bytes() for b in backups] == [before]

        await pilot.press("down", "enter")  # Disable SageAttention in InvokeAI
        await settle(pilot)
        assert config.read_bytes() == before
        said = static(app, "#action-result")
        assert said.startswith("Disabled in InvokeAI: restored ") and "unchanged since" in said
        assert "(SageAttention off)" in static(app, "#actions-target")
        await pilot.press("enter")  # already off: nothing changes
        await settle(pilot)
        assert static(app, "#action-result").startswith("Nothing to do: ")
        assert config.read_bytes() == before


async def test_disable_after_other_edits_puts_back_only_the_earlier_value(
        tmp_path: Path) -> None:
    root = invokeai_root(tmp_path, CONFIG_DEFAULT, "6.15.0",
                         CONFIG + "attention_backend: torch-sdp\r\n")
    config = root / "invokeai.yaml"
    app = SagedoctorApp(TuiOptions(venv=root / ".venv", root=root))
    async with app.run_test(size=SIZE) as pilot:
        await _open_actions(pilot, app)
        await pilot.press("enter")
        await settle(pilot)
        assert b"attention_backend: sage\r\n" in config.read_bytes()
        # InvokeAI's settings page rewrites the file in the meantime
        config.write_bytes(config.read_bytes() + b"device: cuda:0\r\n")
        await pilot.press("down", "enter")
        await settle(pilot)
        text = config.read_bytes()
        assert b"attention_backend: torch-sdp\r\n" in text and b"device: cuda:0\r\n" in text
        assert "set attention_backend: torch-sdp" in static(app, "#action-result")


async def test_invokeai_without_the_setting_is_switched_by_the_start_up_hook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagedoctor.runtime.hook import dist_stats
    from sagedoctor.state import venv_python_version, venv_site_dirs

    root = invokeai_root(tmp_path, None, "6.14.2")
    venv = root / ".venv"
    site = next(venv.glob("lib/python3*/site-packages"))
    add_dist(site, "sagedoctor-runtime", "0.1.0")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "home" / ".local" / "state"))
    record_passing_verify(venv, {"python": venv_python_version(venv), "dists": {},
                                 "stat": dist_stats(venv_site_dirs(venv))}, tmp_path / "home")
    config = root / "invokeai.yaml"
    hook = site / "sagedoctor-runtime.pth"
    app = SagedoctorApp(TuiOptions(venv=venv, root=root))
    async with app.run_test(size=SIZE) as pilot:
        await _open_actions(pilot, app)
        assert "no attention_backend setting; start-up hook off" in static(app,
                                                                           "#actions-target")
        await pilot.press("enter")
        await settle(pilot)
        said = static(app, "#action-result")
        assert said.startswith("InvokeAI 6.14.2 has no attention_backend setting, so "
                               "SageAttention is on through the venv's start-up hook.")
        assert hook.read_text(encoding="utf-8") == HOOK_LINE
        assert config.read_bytes() == CONFIG.encode()  # a key 6.14.2 would refuse: never set
        assert "start-up hook on" in static(app, "#actions-target")
        await pilot.press("down", "enter")
        await settle(pilot)
        assert not hook.exists() and f"Disabled: removed {hook}" in static(app,
                                                                           "#action-result")
        assert config.read_bytes() == CONFIG.encode()
