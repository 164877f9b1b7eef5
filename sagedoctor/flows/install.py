"""The install flow: a killed install's journal rolled back first, the plan made for the venv
as it is then, and carried out by the executor (which re-plans under the venv's lock).
commands/install shows the plan, the executor's lines and the verify that follows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..events import OnEvent
from ..facts import Facts
from ..index import WheelIndex
from ..plan import Blocked, Plan
from .plan import PlanOptions, gather


@dataclass(frozen=True)
class InstallOptions:
    plan: PlanOptions
    dry_run: bool = False
    quick_verify: bool = False
    offline: bool = False
    source_url: str | None = None  # else SAGEDOCTOR_SOURCE_URL


def source_url(options: InstallOptions) -> str | None:
    """Where a source build's archive comes from (none for a dry run); a bad setting is said
    before anything is probed."""
    from ..install.source_url import chosen_source_url

    return None if options.dry_run else chosen_source_url(options.source_url)


def prepare(options: InstallOptions, on_event: OnEvent
            ) -> tuple[Facts, WheelIndex, Plan | Blocked]:
    """The plan for this venv; where a killed install left a journal, it is rolled back first
    and the venv planned as it is now."""
    from ..install.recover import recover_pending

    facts, index, result = gather(options.plan)
    if (not options.dry_run and options.plan.facts_file is None
            and facts.target is not None
            and recover_pending(Path(facts.target.prefix), on_event)):
        facts, index, result = gather(options.plan)  # plan the venv as it is now
    return facts, index, result


def only_verify(plan: Plan) -> bool:
    """Nothing to install, only a verify to redo (the hooked venv after a torch rewrite)."""
    return bool(plan.steps) and all(step.action == "verify" for step in plan.steps)


def carry_out(options: InstallOptions, plan: Plan, on_event: OnEvent, url: str | None) -> None:
    """The plan through the executor (the venv's lock, the journal, the rollback), its
    progress as events."""
    from ..install.execute import execute_plan
    from ..install.runlog import default_log_dir

    execute_plan(plan, None, default_log_dir(), __version__, offline=options.offline,
                 source_url=url, on_event=on_event, replan=lambda: gather(options.plan)[2])
