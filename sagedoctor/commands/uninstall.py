"""`sagedoctor uninstall`: the uninstall flow's plan, shown; asked; carried out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..events import as_lines
from ..facts import InvokeAIFacts, TargetFacts
from ..flows.uninstall import UninstallOptions, carry_out, plan_uninstall, refuse_if_not_writable
from ..plan import Blocked
from ..render.plan import render_plan_text


def run_uninstall(target: TargetFacts, *, yes: bool, dry_run: bool, everything: bool,
                  out: TextIO | None = None, answers: TextIO | None = None,
                  invokeai: InvokeAIFacts | None = None, state_root: Path | None = None,
                  log_dir: Path | None = None) -> int:
    stream = out or sys.stdout
    prefix = Path(target.prefix)
    options = UninstallOptions(target, everything, invokeai, state_root, log_dir)
    plan = plan_uninstall(options)
    if isinstance(plan, Blocked):
        stream.write(render_plan_text(plan))
        return 1
    header = f"{'Would' if dry_run else 'Will'} change {prefix}:" if plan.steps else ""
    stream.write(render_plan_text(plan, header=header))
    if dry_run or not plan.steps:
        return 0
    refuse_if_not_writable(target)
    if not yes:
        stream.write("Proceed? [y/N] ")
        stream.flush()
        reply = (answers or sys.stdin).readline().strip().lower()
        if reply not in ("y", "yes"):
            stream.write("Nothing was changed.\n")
            return 1

    def say(line: str) -> None:
        stream.write(f"{line}\n")
        stream.flush()

    carry_out(options, plan, as_lines(say))
    return 0
