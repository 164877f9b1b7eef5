"""`sagedoctor install` (and `--dry-run`) and `sagedoctor verify`."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .. import __version__, exit_codes
from ..plan import Blocked
from ..render_plan import plan_exit_code, render_plan_json, render_plan_text
from .plan import PlanOptions, gather


@dataclass(frozen=True)
class InstallOptions:
    plan: PlanOptions
    dry_run: bool = False
    quick_verify: bool = False
    offline: bool = False
    source_url: str | None = None  # else SAGEDOCTOR_SOURCE_URL


def _log_dir() -> Path:
    from platformdirs import user_log_dir

    return Path(user_log_dir("sagedoctor", appauthor=False))


def _recover_first(facts: object, stream: TextIO) -> bool:
    """A run killed outright left a journal: roll back before planning anything."""
    from ..install.lock import venv_lock, venv_state_dir
    from ..install.transaction import recover_interrupted

    target = getattr(facts, "target", None)
    if target is None:
        return False
    prefix = Path(target.prefix)
    folder = venv_state_dir(prefix)
    if not (folder / "journal.json").is_file():
        return False

    def say(message: str) -> None:
        stream.write(f"  {message}\n")
        stream.flush()

    with venv_lock(folder, prefix, say):
        return recover_interrupted(folder, say)


def source_url_problem(url: str) -> str | None:
    """Why this source-archive URL is refused, or None: https only (http for this machine)."""
    from urllib.parse import urlsplit

    from ..install.fetch import LOCAL_HOSTS

    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:  # an unclosed [ in the host part
        return f"not a URL ({exc})"
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and host in LOCAL_HOSTS:
        return None
    return "not https (http only for 127.0.0.1 or localhost)"


def _source_url(options: InstallOptions) -> str | None:
    url = options.source_url or os.environ.get("SAGEDOCTOR_SOURCE_URL") or None
    if url is None:
        return None
    problem = source_url_problem(url)
    if problem:  # the CLI refuses it up front; this is for callers that skip the CLI
        from ..install.runner import InstallError

        where = "--source-url" if options.source_url else "SAGEDOCTOR_SOURCE_URL"
        raise InstallError(f"{where} {url!r}: {problem}", f"fix {where}")
    return url


def run_install(options: InstallOptions, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    if options.plan.facts_file is not None and not options.dry_run:
        stream.write("sagedoctor: --facts describes another machine; use it with --dry-run\n")
        return exit_codes.USAGE
    source_url = None if options.dry_run else _source_url(options)  # refused before planning
    facts, index, result = gather(options.plan)
    if (not options.dry_run and options.plan.facts_file is None
            and _recover_first(facts, stream)):
        facts, index, result = gather(options.plan)  # plan the venv as it is now
    if options.dry_run or isinstance(result, Blocked):
        if options.plan.as_json:
            stream.write(render_plan_json(result, index.source))
        else:
            stream.write(render_plan_text(result, header=f"index: {index.source}"))
        return plan_exit_code(result)
    stream.write(render_plan_text(result, header=f"index: {index.source}"))
    stream.flush()
    if result.steps and all(step.action == "verify" for step in result.steps):
        # Nothing to install, only a verify to redo (the hooked venv after a torch rewrite):
        # no lock, no snapshot, no transaction for a venv that is not changed.
        return run_verify(Path(result.python), Path(result.prefix), options.quick_verify,
                          options.plan.as_json, stream)
    from ..install.execute import execute_plan


    def progress(message: str) -> None:
        stream.write(f"  {message}\n")
        stream.flush()

    execute_plan(result, progress, _log_dir(), __version__, offline=options.offline,
                 source_url=source_url)
    if any(step.action == "verify" for step in result.steps):
        return run_verify(Path(result.python), Path(result.prefix), options.quick_verify,
                          options.plan.as_json, stream)
    stream.write("Nothing to do.\n")
    return 0


def _progress_printer(stream: TextIO) -> Callable[[dict[str, Any]], None]:
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


def run_verify(python: Path, prefix: Path, quick: bool, as_json: bool,
               out: TextIO | None = None, repeat: int = 1, fresh: bool = False,
               progress: Callable[[dict[str, Any]], None] | None = None) -> int:
    """`progress`: called per measured shape (verify.parse_progress's fields); by default a
    line on the output (stderr with --json)."""
    import datetime

    from ..diagnose import quote
    from ..install.pending import refuse_if_pending
    from ..probe.target import current_os
    from ..state import record_verification, venv_record_path
    from ..verify import (
        agreement,
        calibration,
        chosen_kernels,
        key_results,
        render_app_shapes,
        render_reuse,
        render_table,
        run_selftest,
        run_signature,
        verdict,
        verify_record,
        write_calibration,
    )

    # What verify proves of a half-installed venv the next install rolls back would arm it.
    refuse_if_pending(prefix, "verify", f"--venv {quote(str(prefix), current_os())}")
    stream = out or sys.stdout
    if progress is None:
        progress = _progress_printer(sys.stderr if as_json or out is not None else stream)
    runs = []
    signatures = []
    for number in range(1, max(1, repeat) + 1):
        started = time.monotonic()
        report = run_selftest(python, quick, fresh=fresh and number == 1, progress=progress)
        took = time.monotonic() - started
        if getattr(stream, "isatty", lambda: False)():
            stream.write("\r\x1b[K")
        results = key_results(report)
        when = datetime.datetime.now(datetime.timezone.utc).isoformat()
        data = calibration(report, when)
        runs.append(data)
        signatures.append(run_signature(results))
        path = write_calibration(prefix, data)
        outcome = verdict(report, results)
        # The state store's record: what check and plan say of this venv from now on, and
        # (routing only) the venv's arming record the start-up hook reads.
        record_verification(prefix, python, outcome, report.get("fingerprint", {}),
                            verify_record(report, results), when, chosen_kernels(results))
        verified = venv_record_path(prefix) if outcome == "routing" else None
        if as_json:
            continue
        if repeat > 1:
            stream.write(f"run {number} of {repeat}:\n")
        stream.write(render_table(results))
        if report.get("error"):
            stream.write(f"self-test: {report['error']}\n")
        stream.write(render_app_shapes(data))
        stream.write(render_reuse(report))
        stream.write(f"decisions written to {path} (self-test {took:.0f} s)\n")
        stream.write({
            "routing": "verdict: SageAttention is used where the table says; "
                       "`sagedoctor enable` switches it on for the whole venv",
            "sdpa-only": "verdict: no kernel is both correct and faster here; PyTorch SDPA "
                         "stays in use (nothing is lost)",
            "broken": "verdict: SageAttention does not work in this venv; run "
                      "`sagedoctor check` for the cause",
        }[outcome] + "\n")
    agreed = agreement(runs, signatures)
    if as_json:
        stream.write(json.dumps({"verdict": outcome, "report": report,
                                 "calibration": data.to_json(),
                                 "calibration_path": str(path),
                                 "verified_path": str(verified) if verified else None,
                                 "agreement": agreed}, indent=2) + "\n")
    elif repeat > 1:
        stream.write(f"agreement over {agreed['runs']} runs: verdicts {agreed['keys_agreeing']}"
                     f" of {agreed['keys']} keys, decisions {agreed['shapes_agreeing']} of "
                     f"{agreed['shapes']} shapes, app shapes {agreed['app_shapes_agreeing']} of "
                     f"{len(agreed['app_shapes'])}\n")
        for line in agreed["flipped"]:
            stream.write(f"  flipped: {line}\n")
    stable = agreed["keys_agreeing"] == agreed["keys"]
    return 0 if outcome == "routing" and stable else 1
