"""The TUI shows which switch routes InvokeAI and why (issue 36): the check screen's InvokeAI
row carries SD194, the plan screen the note, from a saved profile (Pilot at 80x24)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from sagedoctor.decide.findings import AREAS
from sagedoctor.tui.app import SagedoctorApp
from sagedoctor.tui.screens.check import CheckScreen
from sagedoctor.tui.screens.plan import PlanScreen
from sagedoctor.tui.session import TuiOptions
from tests.tui_support import settle

PROFILE = Path(__file__).parent / "profiles" / "linux-h100-invokeai-rule-slower.json"
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("NO_COLOR", "VIRTUAL_ENV", "INVOKEAI_ROOT", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)


async def test_plan_screen_says_which_switch_and_why() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        steps = str(app.screen.query_one("#plan-steps", Static).render())
        assert "note: InvokeAI 6.15.0: attention_backend: sage is not written: InvokeAI's " \
               "rule would send SDXL 1024x1024 (4096 tokens) to SageAttention" in steps
        assert "0.68x SDPA on NVIDIA H100 80GB HBM3" in steps


async def test_check_screens_invokeai_row_says_which_switch_serves() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, CheckScreen)
        await pilot.press(*["down"] * AREAS.index("invokeai"))
        details = str(app.screen.query_one("#detail-text", Static).render())
        assert details.startswith("InvokeAI")
        assert "SD194" in details and "Better here: sagedoctor's hook" in details
