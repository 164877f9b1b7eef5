"""`sagedoctor install` (and `--dry-run`): the install flow's plan and progress, shown, and
the verify that follows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from .. import exit_codes
from ..events import as_lines
from ..flows.install import InstallOptions, carry_out, only_verify, prepare, source_url
from ..plan import Blocked
from ..render.plan import plan_exit_code, render_plan_json, render_plan_text, text_style
from .verify import run_verify

__all__ = ["InstallOptions", "run_install", "verify_after_commit"]


def run_install(options: InstallOptions, out: TextIO | None = None) -> int:
    stream = out or sys.stdout

    def say(message: str) -> None:
        stream.write(f"  {message}\n")
        stream.flush()

    if options.plan.facts_file is not None and not options.dry_run:
        stream.write("sagedoctor: --facts describes another machine; use it with --dry-run\n")
        return exit_codes.USAGE
    url = source_url(options)
    _facts, index, result = prepare(options, as_lines(say))
    if options.dry_run or isinstance(result, Blocked):
        if options.plan.as_json:
            stream.write(render_plan_json(result, index.source))
        else:
            stream.write(render_plan_text(result, header=f"index: {index.source}",
                                          **text_style(stream)))
        return plan_exit_code(result)
    stream.write(render_plan_text(result, header=f"index: {index.source}",
                                  **text_style(stream)))
    stream.flush()
    if only_verify(result):
        # Nothing to install, only a verify to redo (the hooked venv after a torch rewrite):
        # no lock, no snapshot, no transaction for a venv that is not changed.
        return run_verify(Path(result.python), Path(result.prefix), options.quick_verify,
                          options.plan.as_json, stream)
    carry_out(options, result, as_lines(say), url)
    if any(step.action == "verify" for step in result.steps):
        return verify_after_commit(Path(result.python), Path(result.prefix),
                                   options.quick_verify, options.plan.as_json, stream)
    stream.write("Nothing to do.\n")
    return 0


def verify_after_commit(python: Path, prefix: Path, quick: bool, as_json: bool,
                        stream: TextIO) -> int:
    """The verify that follows a committed install: Ctrl+C there stops the verify only, and
    says that the install stays (the hook stays off until a verify passes)."""
    try:
        return run_verify(python, prefix, quick, as_json, stream)
    except KeyboardInterrupt:
        sys.stderr.write(f"sagedoctor: the verify was interrupted (Ctrl+C); the install was "
                         f"committed and stays, and SageAttention stays off until a verify "
                         f"passes: run `sagedoctor verify --venv {prefix}`\n")
        return exit_codes.INTERRUPTED
