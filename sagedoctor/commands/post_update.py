"""`sagedoctor post-update`: after an app update replaced torch (or anything the verify
proved), verify again, plan the repair, carry it out through the install transaction and
verify once more. Nothing changed since a passing verify: it says so and exits at once,
from a few stat() calls, without starting the target interpreter.

What cannot be repaired leaves routing off (the venv's arming record is gone) and says why.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .. import exit_codes
from ..errors import SagedoctorError
from ..hook import needs_rebuild, unchanged_since_verify
from ..state import VenvFiles

EXIT_OK = 0
EXIT_NOT_VERIFIED = 1  # routing stays off: not repairable here, or the plan was not confirmed


class PostUpdateError(SagedoctorError):
    """The venv to repair cannot be found or read: fixable, as `check`'s SD190 for it."""

    code = "SD950"
    exit_status = exit_codes.FIXABLE


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


# --- the fast path: pure decisions over files, no target process ----------------------------

def venv_prefix_of(options: PostUpdateOptions) -> Path | None:
    """The venv folder from --venv, or from --python where it sits in a venv's bin/ or
    Scripts/; None where only the interpreter itself can say (a base or conda Python)."""
    if options.venv is not None:
        return options.venv
    if options.python is not None:
        folder = options.python.parent.parent
        return folder if (folder / "pyvenv.cfg").is_file() else None
    return None


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
        with venv_lock(venv_state_dir(prefix), prefix, say):  # no install runs meanwhile
            outcome = verify_and_render(python, prefix, quick, False, stream)
    except VerifyError as exc:
        forget_routing(prefix)
        stream.write(f"verify could not run: {exc.message}\n")
        return None, True
    return outcome.verdict, False


def _indented(stream: TextIO) -> Callable[[str], None]:
    """Progress lines, as install shows them."""

    def say(message: str) -> None:
        stream.write(f"  {message}\n")
        stream.flush()

    return say


def _remove_marker(prefix: Path) -> None:
    # The hook's auto-repair starts post-update once per marker; done, the next change may
    # start it again.
    VenvFiles(prefix).auto_repair_marker.unlink(missing_ok=True)


def _hook_state(prefix: Path, on: str) -> str:
    """What a passing verify means for the app: routing is on only where the hook is."""
    from ..decide.fixes import quote
    from ..probe.target import current_os
    from ..state import hook_enabled

    if hook_enabled(prefix):
        return f"SageAttention {on}"
    return ("the start-up hook is not enabled, so nothing routes attention to SageAttention "
            "but apps that call it themselves; `sagedoctor enable --venv "
            f"{quote(str(prefix), current_os())}` switches it on for the whole venv")


def _what_changed(prefix: Path, live: dict[str, Any]) -> list[str]:
    from ..runtime.hook import fingerprint_differences
    from ..state import load_record

    record = load_record(prefix)
    if record is None:
        return []
    return fingerprint_differences(record.fingerprint, live)


def _refuse_if_interrupted(prefix: Path) -> None:
    from ..decide.fixes import quote
    from ..install.pending import refuse_if_pending
    from ..probe.target import current_os

    refuse_if_pending(prefix, "post-update", f"--venv {quote(str(prefix), current_os())}")


def run_post_update(options: PostUpdateOptions, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    prefix = venv_prefix_of(options)
    if prefix is not None:  # a killed install's half-done venv is not verified, nor repaired
        _refuse_if_interrupted(prefix)
    # Not a venv (a conda env, no pyvenv.cfg): no fast path; the probe says what it is.
    if prefix is not None and (prefix / "pyvenv.cfg").is_file():
        same, detail = unchanged_since_verify(prefix)
        if same:
            _remove_marker(prefix)
            stream.write(f"sagedoctor: {prefix} is unchanged since the last passing verify "
                         f"({detail}); nothing to do\n")
            return EXIT_OK
    try:
        return _slow_path(options, stream)
    finally:
        if prefix is not None:
            _remove_marker(prefix)


def _slow_path(options: PostUpdateOptions, stream: TextIO) -> int:
    from ..decide.findings import AREAS
    from ..probe import ProbeOptions, collect_facts

    probe = ProbeOptions(venv=options.venv, python=options.python, root=options.root,
                         areas=AREAS)
    facts = collect_facts(probe)
    target = facts.target
    if target is None:
        failure = facts.failure_for("target")
        raise PostUpdateError("the target interpreter could not be inspected"
                              + (f": {failure.message}" if failure else ""),
                              "pass --venv DIR or --python EXE")
    python, prefix = Path(target.executable), Path(target.prefix)
    _refuse_if_interrupted(prefix)  # keyed by the prefix the install uses
    try:
        return _reverify_and_repair(options, stream, facts, probe, python, prefix)
    finally:
        _remove_marker(prefix)


def _reverify_and_repair(options: PostUpdateOptions, stream: TextIO, facts: Any, probe: Any,
                         python: Path, prefix: Path) -> int:
    from .. import __version__
    from ..decide.checks.sage import recorded_wrong_sageattn
    from ..decide.resolve import resolve_plan
    from ..decide.resolve.steps import ResolveOptions
    from ..index import load_index
    from ..install.recover import recover_pending
    from ..plan import Blocked
    from ..probe import collect_facts
    from ..render.plan import render_plan_text, text_style
    from ..state import forget_routing, load_record

    target = facts.target
    old = _changes(prefix, target)
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
    if recover_pending(prefix, _indented(stream)):  # a killed install's journal: rolled back first
        facts = collect_facts(probe)
    index = load_index(options.index_file)
    result = resolve_plan(facts, index, ResolveOptions(
        source_dir=str(options.source_dir.resolve()) if options.source_dir else None,
        use_linux_indexes=options.use_linux_indexes, rebuild=rebuild))
    changing = not isinstance(result, Blocked) and any(
        s.action != "verify" for s in result.steps)
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


def _changes(prefix: Path, target: Any) -> list[str]:
    """What changed since the last verify: versions, else files rewritten in place."""
    old = _what_changed(prefix, {"python": target.python_version, "dists": {
        "torch": target.torch.version if target.torch else None,
        "triton": target.triton, "triton-windows": target.triton_windows,
        "sageattention": target.sageattention.version if target.sageattention else None}})
    if not old:  # same versions, rewritten files (a reinstall, a build put in by hand)
        same, why = unchanged_since_verify(prefix)
        old = [why.removesuffix(" changed") + " rewritten"] if not same and why.endswith(
            " changed") else []
    return old


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
    from ..install.execute import execute_plan
    from ..install.runlog import default_log_dir
    from ..install.source_url import chosen_source_url
    from ..state import forget_routing

    url = chosen_source_url(options.source_url)
    try:  # the plan's verify step is run below, after the transaction, as `install` does
        execute_plan(plan, _indented(stream), default_log_dir(), version,
                     offline=options.offline, source_url=url)
    except SagedoctorError as exc:
        # Rolled back: the venv is as the last verify found it, and so is its record.
        raise RepairFailed(f"the repair failed, and the venv was put back as it was: "
                           f"{exc.message}", exc.fix or "read the log named above") from exc
    verdict, _crashed = _verify(python, prefix, options.quick_verify, stream)
    if verdict == "routing":
        stream.write(f"post-update: repaired and verified; {_hook_state(prefix, 'is on again')}\n")
        return EXIT_OK
    forget_routing(prefix)
    said = verdict or "that it cannot run"
    stream.write(f"post-update: repaired, but the verify still says {said}; routing stays "
                 "off (PyTorch SDPA in use)\n")
    return EXIT_NOT_VERIFIED
