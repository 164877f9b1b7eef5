"""`sagedoctor plan` (and `install --dry-run`): the plan flow's Plan, rendered as text or
JSON."""

from __future__ import annotations

import sys
from typing import TextIO

from ..flows.plan import PlanOptions, gather
from ..render.plan import plan_exit_code, render_plan_json, render_plan_text, text_style


def run_plan(options: PlanOptions, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    _facts, index, result = gather(options)
    if options.as_json:
        stream.write(render_plan_json(result, index.source))
    else:
        stream.write(render_plan_text(result, header=f"index: {index.source}",
                                      **text_style(stream)))
    return plan_exit_code(result)
