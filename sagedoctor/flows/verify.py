"""The verify flow: whether a verify can start on this venv (said before the self-test runs),
and the self-test runs themselves (verify.verify_venv), with what the output names beside the
measurements. commands/verify and post-update render it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import exit_codes
from ..facts import Facts
from ..verify import VerifyError, VerifyOutcome, VerifyRun, VerifyTargetError, verify_venv


class VerifyCannotWork(VerifyError):
    """No verify can run on this machine (no NVIDIA GPU...): as check and plan say, exit 2."""

    exit_status = exit_codes.CANNOT_WORK


def cannot_verify(facts: Facts, named: str) -> VerifyError | None:
    """Why a verify cannot start, said before the self-test runs (it said "Error while
    finding module specification" and sent the user to an install that could not work):
    no torch or no runtime in the venv: fixable (exit 1), or where this machine cannot run
    SageAttention at all (check's fatal findings), exit 2 as check and plan say. A venv with
    both runs the self-test, which reports a machine without a GPU itself. `named`: the
    target as the user named it (`--venv DIR`)."""
    from ..decide.checks import diagnose

    target = facts.target
    assert target is not None
    if (target.torch is not None and target.runtime is not None) or facts.interrupted_install:
        return None  # the self-test runs, or verify's own refusal (SD199) says what to do
    fatal = [f for f in diagnose(facts) if f.fatal]
    if fatal:
        return VerifyCannotWork(
            "SageAttention cannot work on this machine: "
            + "; ".join(f"{f.title} ({f.code})" for f in fatal), fatal[0].fix)
    if target.torch is None:
        return VerifyTargetError(
            f"no torch in {target.prefix}: the self-test runs on the app's own torch",
            "install the app (which brings its torch) first, or name the app's venv with "
            "--venv DIR")
    if target.runtime is None:
        return VerifyTargetError(
            f"the sagedoctor runtime is not installed in {target.prefix}",
            f"run `sagedoctor install {named}` first: it installs SageAttention and the "
            "runtime the self-test runs in")
    return None


@dataclass(frozen=True)
class VerifyOptions:
    python: Path
    prefix: Path
    quick: bool = False
    repeat: int = 1
    fresh: bool = False


def has_invokeai(prefix: Path) -> bool:
    """InvokeAI in the venv: its fixed rule is said beside the measurements."""
    from ..probe.invokeai import venv_has_invokeai

    return venv_has_invokeai(prefix)


def verify(options: VerifyOptions,
           progress: Callable[[dict[str, Any]], None] | None = None,
           each_run: Callable[[VerifyRun], None] | None = None) -> VerifyOutcome:
    """The self-test `repeat` times, the records written after each run; `progress` per
    measured shape, `each_run` each run as it ends."""
    return verify_venv(options.python, options.prefix, options.quick, options.fresh,
                       options.repeat, progress=progress, each_run=each_run)
