"""`sagedoctor check [AREA]`: the check flow's findings, rendered as text or JSON."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from ..flows.check import CheckOptions, check
from ..render.findings import can_encode_marks, render_json, render_text, use_color


def run_check(options: CheckOptions, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    result = check(options)
    facts, findings = result.facts, list(result.findings)
    if options.as_json:
        stream.write(render_json(facts, findings, getattr(stream, "encoding", None)))
    else:
        isatty = getattr(stream, "isatty", lambda: False)()
        stream.write(
            render_text(
                findings,
                options.areas,
                verbose=options.verbose,
                color=use_color(isatty, os.environ),
                unicode=can_encode_marks(getattr(stream, "encoding", None)),
                header=f"sagedoctor {facts.sagedoctor_version or ''} check: "
                       f"{result.source}".replace("  ", " "),
            )
        )
    return result.exit_code
