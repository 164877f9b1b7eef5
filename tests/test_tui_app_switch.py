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


# --- `sagedoctor tui --use app|sagedoctor`: the TUI's check and plan get it, and show it ------

SERVED = Path(__file__).parent / "profiles" / "windows-invokeai-backend-not-set.json"


def test_tui_command_line_carries_use_into_the_tuis_options() -> None:
    from sagedoctor.cli import build_parser, tui_options

    parser = build_parser()
    forced = tui_options(parser.parse_args(["tui", "--use", "sagedoctor", "--facts",
                                            str(SERVED)]))
    assert (forced.use, forced.facts_file) == ("sagedoctor", SERVED)
    assert tui_options(parser.parse_args(["tui", "--use", "app"])).use == "app"
    assert tui_options(parser.parse_args(["tui"])).use is None  # the better one
    with pytest.raises(SystemExit):
        parser.parse_args(["tui", "--use", "comfyui"])


async def test_use_sagedoctor_reaches_the_tuis_check_and_plan() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SERVED, use="sagedoctor"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, CheckScreen)
        await pilot.press(*["down"] * AREAS.index("invokeai"))
        details = str(app.screen.query_one("#detail-text", Static).render())
        assert "Better here: sagedoctor's hook: --use sagedoctor: sagedoctor's start-up hook " \
               "routes instead of InvokeAI's own kernel table" in " ".join(details.split())
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        steps = " ".join(str(app.screen.query_one("#plan-steps", Static).render()).split())
        assert "attention_backend: sage is not written: --use sagedoctor:" in steps
        assert "Set attention_backend" not in steps


async def test_without_use_the_same_profile_gets_invokeais_own_switch() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SERVED))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        steps = " ".join(str(app.screen.query_one("#plan-steps", Static).render()).split())
        assert "Set attention_backend: sage in invokeai.yaml" in steps
        assert "--use" not in steps


async def test_use_app_overrides_the_measured_choice_in_the_tuis_plan() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE, use="app"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        steps = " ".join(str(app.screen.query_one("#plan-steps", Static).render()).split())
        assert "Set attention_backend: sage in invokeai.yaml" in steps
        assert "is not written" not in steps


def test_the_actions_line_follows_use() -> None:
    from sagedoctor.facts import load_facts_file
    from sagedoctor.tui.invokeai_switch import state_line

    facts = load_facts_file(SERVED)
    assert facts.target is not None
    assert "attention_backend: not set" in state_line(facts.target, facts.invokeai, facts)
    forced = state_line(facts.target, facts.invokeai, facts, "sagedoctor")
    assert forced.startswith("InvokeAI 6.15.0: start-up hook off (--use sagedoctor: ")
