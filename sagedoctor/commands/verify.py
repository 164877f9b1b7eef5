"""`sagedoctor verify`: shows what the verify flow found, as text or --json."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ..flows.verify import VerifyOptions, has_invokeai, verify
from ..verify import VerifyOutcome, VerifyRun, render_app_rules, render_app_shapes, render_table

VERDICT_LINES = {
    "routing": "verdict: SageAttention is used where the table says; "
               "`sagedoctor enable` switches it on for the whole venv",
    "sdpa-only": "verdict: no kernel is both correct and faster here; PyTorch SDPA "
                 "stays in use (nothing is lost)",
    "broken": "verdict: SageAttention does not work in this venv; run "
              "`sagedoctor check` for the cause",
}


def progress_printer(stream: TextIO) -> Callable[[dict[str, Any]], None]:
    """Verify's progress: on a terminal one line rewritten in place per shape; elsewhere (a
    log, a pipe) a line at most every 10 s."""
    from ..verify import progress_line

    tty = bool(getattr(stream, "isatty", lambda: False)())
    last = [0.0]

    def show(data: dict[str, Any]) -> None:
        line = progress_line(data)
        if tty:
            stream.write("\r\x1b[K" + line[:150])
            stream.flush()
        elif time.monotonic() - last[0] >= 10:
            last[0] = time.monotonic()
            stream.write(line + "\n")
            stream.flush()

    return show


def render_run(run: VerifyRun, repeat: int, invokeai: bool = False) -> str:
    """One run's table, app shapes, reuse note, where the decisions went, and the verdict."""
    text = f"run {run.number} of {repeat}:\n" if repeat > 1 else ""
    text += render_table(list(run.results))
    if run.report.get("error"):
        text += f"self-test: {run.report['error']}\n"
    text += render_app_shapes(run.calibration)
    if invokeai:
        cuda = run.report.get("torch_cuda")  # the target's answer: a string or nothing
        text += render_app_rules(run.calibration, cuda if isinstance(cuda, str) else None)
    text += run.reuse
    text += f"decisions written to {run.calibration_path} (self-test {run.seconds:.0f} s)\n"
    return text + VERDICT_LINES[run.verdict] + "\n"


def render_agreement(agreed: dict[str, Any]) -> str:
    text = (f"agreement over {agreed['runs']} runs: verdicts {agreed['keys_agreeing']}"
            f" of {agreed['keys']} keys, decisions {agreed['shapes_agreeing']} of "
            f"{agreed['shapes']} shapes, app shapes {agreed['app_shapes_agreeing']} of "
            f"{len(agreed['app_shapes'])}\n")
    return text + "".join(f"  flipped: {line}\n" for line in agreed["flipped"])


def verify_and_render(python: Path, prefix: Path, quick: bool, as_json: bool,
                      out: TextIO | None = None, repeat: int = 1, fresh: bool = False,
                      progress: Callable[[dict[str, Any]], None] | None = None,
                      ) -> VerifyOutcome:
    """verify_venv with its output: each run as it ends, then --json or the agreement.
    `progress`: by default a line on the output (stderr with --json or another output)."""
    stream = out or sys.stdout
    if progress is None:
        progress = progress_printer(sys.stderr if as_json or out is not None else stream)

    invokeai = has_invokeai(prefix)  # its fixed rule is said beside the measurements

    def show(run: VerifyRun) -> None:
        if getattr(stream, "isatty", lambda: False)():
            stream.write("\r\x1b[K")  # the progress line, rewritten in place, is done
        if not as_json:
            stream.write(render_run(run, repeat, invokeai))

    outcome = verify(VerifyOptions(python, prefix, quick, repeat, fresh), progress=progress,
                     each_run=show)
    if as_json:
        stream.write(json.dumps(outcome.to_json(), indent=2) + "\n")
    elif repeat > 1:
        stream.write(render_agreement(outcome.agreement))
    warning = pyvenv_cfg_warning(prefix) if outcome.verdict == "routing" else None
    if warning:  # beside the JSON, not in it
        (sys.stderr if as_json else stream).write(warning + "\n")
    return outcome


def pyvenv_cfg_warning(prefix: Path) -> str | None:
    """check's SD168, on one line, where pyvenv.cfg names another Python X.Y than the one
    this verify ran: enable refuses until it is fixed, and verify again would not help."""
    from ..decide.checks.sage import pyvenv_cfg_finding
    from ..facts import PYVENV_CFG_SAYS
    from ..state import still_as_verified

    lies = [c for c in still_as_verified(prefix)[1] if c.startswith(PYVENV_CFG_SAYS)]
    if not lies:
        return None
    found = pyvenv_cfg_finding(lies[0], str(prefix))
    return f"! {found.code} {found.title}: {found.detail}; fix: {found.fix}"


def run_verify(python: Path, prefix: Path, quick: bool, as_json: bool,
               out: TextIO | None = None, repeat: int = 1, fresh: bool = False,
               progress: Callable[[dict[str, Any]], None] | None = None) -> int:
    return verify_and_render(python, prefix, quick, as_json, out, repeat, fresh,
                             progress).exit_code
