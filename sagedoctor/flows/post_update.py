"""The post-update flow: after an app update replaced torch (or anything the verify proved),
what changed since the last verify, the repair plan and the repair carried out through the
install transaction. commands/post-update says each step, asks, and runs the verifies.
Nothing changed since a passing verify is known from a few stat() calls, without starting the
target interpreter."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SagedoctorError
from ..events import OnEvent
from ..facts import Facts
from ..hook import unchanged_since_verify
from ..index import WheelIndex
from ..plan import Blocked, Plan
from ..probe import ProbeOptions
from ..runtime.records import Fingerprint
from ..state import VenvFiles

EXIT_OK = 0
EXIT_NOT_VERIFIED = 1  # routing stays off: not repairable here, or the plan was not confirmed


class PostUpdateError(SagedoctorError):
    """The venv to repair cannot be found or read: fixable, as `check`'s SD190 for it."""

    code = "SD950"


class ConfirmationNeeded(SagedoctorError):
    """A repair plan, but nobody to say yes: no terminal and no --yes."""

    code = "SD951"


class RepairFailed(SagedoctorError):
    """The repair ran and failed (the transaction rolled the venv back)."""

    code = "SD952"


@dataclass(frozen=True)
class PostUpdateOptions:
    venv: Path | None = None
    python: Path | None = None
    root: Path | None = None
    index_file: Path | None = None
    source_dir: Path | None = None
    source_url: str | None = None
    use_linux_indexes: bool = True
    offline: bool = False
    yes: bool = False
    quick_verify: bool = False


def venv_prefix_of(options: PostUpdateOptions) -> Path | None:
    """The venv folder from --venv, or from --python where it sits in a venv's bin/ or
    Scripts/; None where only the interpreter itself can say (a base or conda Python)."""
    if options.venv is not None:
        return options.venv
    if options.python is not None:
        folder = options.python.parent.parent
        return folder if (folder / "pyvenv.cfg").is_file() else None
    return None


def remove_marker(prefix: Path) -> None:
    # The hook's auto-repair starts post-update once per marker; done, the next change may
    # start it again.
    VenvFiles(prefix).auto_repair_marker.unlink(missing_ok=True)


def _what_changed(prefix: Path, live: Fingerprint) -> list[str]:
    from ..runtime.hook import version_differences
    from ..state import load_record

    record = load_record(prefix)
    if record is None:
        return []
    return version_differences(record.typed_fingerprint, live)


def refuse_if_interrupted(prefix: Path) -> None:
    from ..decide.fixes import quote
    from ..hook import refuse_if_pending
    from ..probe.target import current_os

    refuse_if_pending(prefix, "post-update", f"--venv {quote(str(prefix), current_os())}")


def changes(prefix: Path, target: Any) -> list[str]:
    """What changed since the last verify: versions, else files rewritten in place."""
    old = _what_changed(prefix, Fingerprint(target.python_version, {
        "torch": target.torch.version if target.torch else None,
        "triton": target.triton, "triton-windows": target.triton_windows,
        "sageattention": target.sageattention.version if target.sageattention else None}))
    if not old:  # same versions, rewritten files (a reinstall, a build put in by hand)
        same, why = unchanged_since_verify(prefix)
        old = [why.removesuffix(" changed") + " rewritten"] if not same and why.endswith(
            " changed") else []
    return old


def inspect(options: PostUpdateOptions) -> tuple[Facts, ProbeOptions, Path, Path]:
    """The target's facts (all areas), the probe to run again, its interpreter and prefix."""
    from ..decide.findings import AREAS
    from ..probe import collect_facts

    probe = ProbeOptions(venv=options.venv, python=options.python, root=options.root,
                         areas=AREAS)
    facts = collect_facts(probe)
    target = facts.target
    if target is None:
        failure = facts.failure_for("target")
        raise PostUpdateError("the target interpreter could not be inspected"
                              + (f": {failure.message}" if failure else ""),
                              "pass --venv DIR or --python EXE")
    return facts, probe, Path(target.executable), Path(target.prefix)


def repair_plan(options: PostUpdateOptions, facts: Facts, probe: ProbeOptions, prefix: Path,
                rebuild: bool, on_event: OnEvent
                ) -> tuple[WheelIndex, Plan | Blocked, bool]:
    """The repair's plan, and whether it changes anything; a killed install's journal is
    rolled back first."""
    from ..index import load_index
    from ..install.recover import recover_pending
    from ..probe import collect_facts
    from .plan import PlanOptions, plan_for

    if recover_pending(prefix, on_event):  # a killed install's journal: rolled back first
        facts = collect_facts(probe)
    planning = PlanOptions(index_file=options.index_file, source_dir=options.source_dir,
                           use_linux_indexes=options.use_linux_indexes, rebuild=rebuild)
    index = load_index(planning.index_file)
    result = plan_for(facts, index, planning)  # the plan flow's, over the facts taken here
    changing = not isinstance(result, Blocked) and any(
        s.action != "verify" for s in result.steps)
    return index, result, changing


def carry_out(plan: Any, options: PostUpdateOptions, on_event: OnEvent, version: str) -> None:
    """The repair through the install transaction; a failure is rolled back and said as
    RepairFailed."""
    from ..install.execute import execute_plan
    from ..install.runlog import default_log_dir
    from ..install.source_url import chosen_source_url

    url = chosen_source_url(options.source_url)
    try:  # the plan's verify step is run after the transaction, as `install` does
        execute_plan(plan, None, default_log_dir(), version, offline=options.offline,
                     source_url=url, on_event=on_event)
    except SagedoctorError as exc:
        # Rolled back: the venv is as the last verify found it, and so is its record.
        raise RepairFailed(f"the repair failed, and the venv was put back as it was: "
                           f"{exc.message}", exc.fix or "read the log named above") from exc
