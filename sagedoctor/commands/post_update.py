"""`sagedoctor post-update`: after an app update replaced torch (or anything the verify
proved), verify again, plan the repair, carry it out through the install transaction and
verify once more. Nothing changed since a passing verify: it says so and exits at once,
from a few stat() calls, without starting the target interpreter.

What cannot be repaired leaves routing off (the venv's arming record is gone) and says why.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from ..events import OnEvent, as_lines
from ..flows.post_update import (
    EXIT_NOT_VERIFIED,
    EXIT_OK,
    ConfirmationNeeded,
    PostUpdateError,
    PostUpdateOptions,
    RepairFailed,
    carry_out,
    changes,
    inspect,
    refuse_if_interrupted,
    remove_marker,
    repair_plan,
    venv_prefix_of,
)
from ..hook import needs_rebuild, unchanged_since_verify

__all__ = ["ConfirmationNeeded", "PostUpdateError", "PostUpdateOptions", "RepairFailed",
           "run_post_update", "venv_prefix_of"]

# --- the slow path ---------------------------------------------------------------------------

def _confirm(stream: TextIO, yes: bool, fix: str) -> bool:
    if yes:
        return True
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ConfirmationNeeded("the repair above needs a yes, and there is no terminal to "
                                 "ask on; nothing was changed", fix)
    stream.write("Carry out this repair? [y/N] ")
    stream.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _verify(python: Path, prefix: Path, quick: bool, stream: TextIO) -> tuple[str | None, bool]:
    """(verdict, crashed): the verify writes both records; a self-test that could not run
    (the runtime missing, the interpreter crashing on import) counts as crashed."""
    from ..install.lock import venv_lock, venv_state_dir
    from ..state import forget_routing
    from ..verify import VerifyError
    from .verify import verify_and_render

    def say(message: str) -> None:
        stream.write(f"  {message}\n")

    try:
        with venv_lock(venv_state_dir(prefix), prefix, as_lines(say)):  # no install meanwhile
            outcome = verify_and_render(python, prefix, quick, False, stream)
    except VerifyError as exc:
        forget_routing(prefix)
        stream.write(f"verify could not run: {exc.message}\n")
        return None, True
    return outcome.verdict, False


def _indented(stream: TextIO) -> OnEvent:
    """Progress events, rendered as install shows them (events.step_lines)."""

    def say(message: str) -> None:
        stream.write(f"  {message}\n")
        stream.flush()

    return as_lines(say)


def _hook_state(prefix: Path, on: str) -> str:
    """What a passing verify means for the app: routing is on only where the hook is."""
    from ..decide.fixes import quote
    from ..probe.target import current_os
    from ..state import hook_on

    if hook_on(prefix):
        return f"SageAttention {on}"
    return ("the start-up hook is not enabled, so nothing routes attention to SageAttention "
            "but apps that call it themselves; `sagedoctor enable --venv "
            f"{quote(str(prefix), current_os())}` switches it on for the whole venv")


def run_post_update(options: PostUpdateOptions, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    prefix = venv_prefix_of(options)
    if prefix is not None:  # a killed install's half-done venv is not verified, nor repaired
        refuse_if_interrupted(prefix)
    # Not a venv (a conda env, no pyvenv.cfg): no fast path; the probe says what it is.
    if prefix is not None and (prefix / "pyvenv.cfg").is_file():
        same, detail = unchanged_since_verify(prefix)
        if same:
            remove_marker(prefix)
            stream.write(f"sagedoctor: {prefix} is unchanged since the last passing verify "
                         f"({detail}); nothing to do\n")
            return EXIT_OK
    try:
        return _slow_path(options, stream)
    finally:
        if prefix is not None:
            remove_marker(prefix)


def _slow_path(options: PostUpdateOptions, stream: TextIO) -> int:
    facts, probe, python, prefix = inspect(options)
    refuse_if_interrupted(prefix)  # keyed by the prefix the install uses
    try:
        return _reverify_and_repair(options, stream, facts, probe, python, prefix)
    finally:
        remove_marker(prefix)


def _reverify_and_repair(options: PostUpdateOptions, stream: TextIO, facts: Any, probe: Any,
                         python: Path, prefix: Path) -> int:
    from .. import __version__
    from ..decide.checks.sage import recorded_wrong_sageattn
    from ..plan import Blocked
    from ..probe import collect_facts
    from ..render.plan import render_plan_text, text_style
    from ..state import forget_routing, load_record

    target = facts.target
    old = changes(prefix, target)
    if load_record(prefix) is None:  # nothing verified yet: nothing can have changed since
        stream.write("sagedoctor: this venv has no verify on record; verifying it now\n")
    else:
        stream.write(f"sagedoctor: {_why_verify(prefix, old)}; verifying again\n")
    stream.flush()
    if target.runtime is None:  # said plainly, not as the self-test's import error
        forget_routing(prefix)
        stream.write("verify cannot run: the sagedoctor runtime is not installed in this "
                     "venv\n")
        verdict, crashed = None, True  # as a self-test that could not run
    else:
        verdict, crashed = _verify(python, prefix, options.quick_verify, stream)
    facts = collect_facts(probe)  # with the record the verify just wrote
    # A wrong `sageattn()` is repaired even where the router found a good kernel: ComfyUI,
    # KJNodes and diffusers call it directly (SD167).
    wrong = recorded_wrong_sageattn(facts)
    if verdict == "routing" and not wrong:
        stream.write(f"post-update: verified again; {_hook_state(prefix, 'stays on')}\n")
        return EXIT_OK
    rebuild = needs_rebuild(verdict, crashed, target.sageattention is not None)
    index, result, changing = repair_plan(options, facts, probe, prefix, rebuild,
                                          _indented(stream))
    # The router's own kernels stay in use where this verify proved them ("routing"); the
    # venv's arming record is gone already where it did not.
    routing = verdict == "routing"
    if not changing:
        return _not_repairable(result, verdict, prefix, stream)
    assert not isinstance(result, Blocked)
    if rebuild:
        reason = "the installed SageAttention was built for the old torch and no longer works"
    elif wrong:
        reason = "the verify found `sageattn()` wrong on " + ", ".join(
            f"{w.name} ({w.gpu})" for w in wrong)
    elif target.sageattention is None:
        reason = "SageAttention is not installed in this venv"
    else:
        reason = "the verify found the installed build mismatched"
    stream.write(f"post-update: {reason}; the repair:\n")
    stream.write(render_plan_text(result, header=f"index: {index.source}", **text_style(stream)))
    stream.flush()
    fix = _repair_command(prefix, options)
    try:
        confirmed = _confirm(stream, options.yes, fix)
    except ConfirmationNeeded as exc:
        stream.flush()
        print(f"sagedoctor: error {exc.code}: {exc.message}\n  fix: {exc.fix}", file=sys.stderr)
        return EXIT_NOT_VERIFIED
    if not confirmed:
        state = "the verified kernels stay in use" if routing else "routing stays off"
        stream.write(f"post-update: not repaired; {state}. Later: `{fix}`\n")
        return EXIT_NOT_VERIFIED
    return _repair(result, options, python, prefix, stream, __version__)


def _why_verify(prefix: Path, changes: list[str]) -> str:
    """The first line's reason: what changed, else why the last verify no longer counts (an
    unreadable calibration or arming record, a verdict that did not route), not a blanket
    "the venv changed" where nothing in it did."""
    if changes:
        return ", ".join(changes) + " since the last verify"
    same, why = unchanged_since_verify(prefix)
    return why if not same and why else "the venv changed since the last verify"


def _not_repairable(result: Any, verdict: str | None, prefix: Path, stream: TextIO) -> int:
    """No plan changes anything: the verified kernels stay ('routing'), else routing is
    switched off."""
    from ..plan import Blocked
    from ..render.plan import render_plan_text, text_style
    from ..state import forget_routing

    if isinstance(result, Blocked):
        stream.write(render_plan_text(result, header="post-update: cannot repair:",
                                      **text_style(stream)))
    if verdict == "routing":
        stream.write("post-update: `sageattn()` is wrong here and nothing sagedoctor can "
                     "install replaces the build; the router keeps using the kernels "
                     "verify proved, but apps that call sageattn() directly (ComfyUI "
                     "--use-sage-attention, KJNodes, diffusers) get wrong output.\n")
        return EXIT_NOT_VERIFIED
    forget_routing(prefix)
    why = {"sdpa-only": "no kernel is both correct and faster here, and no other build "
                        "is known to be",
           "broken": "SageAttention does not work, and nothing sagedoctor can install "
                     "changes that"}.get(verdict or "", "the self-test could not run")
    stream.write(f"post-update: routing is off for {prefix}: {why}. PyTorch SDPA stays "
                 "in use; `sagedoctor check` says more.\n")
    return EXIT_NOT_VERIFIED


def _repair_command(prefix: Path, options: PostUpdateOptions) -> str:
    from ..decide.fixes import quote
    from ..probe.target import current_os

    return (f"sagedoctor post-update --venv {quote(str(prefix), current_os())} --yes"
            + (f" --source-url {options.source_url}" if options.source_url else "")
            + (f" --source {options.source_dir}" if options.source_dir else "")
            + (" --offline" if options.offline else ""))


def _repair(plan: Any, options: PostUpdateOptions, python: Path, prefix: Path,
            stream: TextIO, version: str) -> int:
    from ..state import forget_routing

    carry_out(plan, options, _indented(stream), version)  # the plan's verify step runs below
    verdict, _crashed = _verify(python, prefix, options.quick_verify, stream)
    if verdict == "routing":
        stream.write(f"post-update: repaired and verified; {_hook_state(prefix, 'is on again')}\n")
        return EXIT_OK
    forget_routing(prefix)
    said = verdict or "that it cannot run"
    stream.write(f"post-update: repaired, but the verify still says {said}; routing stays "
                 "off (PyTorch SDPA in use)\n")
    return EXIT_NOT_VERIFIED
