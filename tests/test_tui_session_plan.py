"""The TUI's plan is the plan flow's (flows.plan), over the facts its check screen took: the
same plan `sagedoctor plan` prints, for every profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagedoctor.flows.plan import PlanOptions, gather
from sagedoctor.tui.session import Session, TuiOptions
from tests.test_import_graph import all_edges, inside

PROFILES = Path(__file__).parent / "profiles"


@pytest.mark.parametrize("profile", sorted(PROFILES.glob("*.json")), ids=lambda p: p.stem)
@pytest.mark.parametrize("source", [None, Path("src")])
def test_the_tui_plans_what_the_plan_flow_plans(profile: Path, source: Path | None) -> None:
    session = Session(TuiOptions(facts_file=profile, source_dir=source))
    session.check()
    _facts, _index, flows_plan = gather(PlanOptions(facts_file=profile, source_dir=source))
    assert session.resolve() == flows_plan


def test_the_tui_resolves_no_plan_itself() -> None:
    bad = [str(e) for e in all_edges() if inside(e.source, "sagedoctor.tui")
           and inside(e.target, "sagedoctor.decide.resolve")]
    assert bad == []
