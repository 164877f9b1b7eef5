"""Requirements computed once, as data, for `check` and `plan` to render each its own way.

`check` turns each into a finding with its fix, `resolve` into a step or a block: the runtime
present, the verification current (where the start-up hook depends on it), the installed
wheel free of known problems, InvokeAI switched over, an interrupted install described. Pure:
facts and the index in, plain values out.
"""

from __future__ import annotations

from .. import __version__
from ..facts import Facts, InterruptedInstall, TargetFacts, VerificationFacts
from ..index import WheelIndex
from .versions import public_version

# --- the runtime ---------------------------------------------------------------------------

def runtime_shortfall(target: TargetFacts, runtime_version: str = __version__) -> str | None:
    """Why the venv's runtime is not the one this sagedoctor bundles, or None."""
    if target.runtime == runtime_version:
        return None
    have = f"has {target.runtime}" if target.runtime else "has none"
    return f"the venv {have}; this sagedoctor bundles sagedoctor-runtime {runtime_version}"


# --- the verification the start-up hook relies on --------------------------------------------


def verification_is_current(record: VerificationFacts, target: TargetFacts) -> bool:
    """Whether the record was made with the sageattention and torch installed now: the same
    versions, and no distribution's files rewritten since (another build, same version)."""
    sage = target.sageattention.version if target.sageattention else None
    torch = target.torch.version if target.torch else None
    return (record.status == "verified" and record.sageattention == sage and not record.changed
            and public_version(record.torch) == public_version(torch))


def hooked_but_unverified(facts: Facts) -> bool:
    """The start-up hook is on and no verify covers what is installed now: the runtime keeps
    SageAttention off until one passes, so a verify is something to do, not a note."""
    record, target = facts.verification, facts.target
    if record is None or target is None or target.sageattention is None or not record.hooked:
        return False
    return not verification_is_current(record, target) or record.arming_problem is not None


# --- the installed wheel --------------------------------------------------------------------

def known_wheel_problems(target: TargetFacts, index: WheelIndex, os_name: str) -> str | None:
    """The index's note on the installed Windows wheel, where it lists one."""
    sage = target.sageattention
    if os_name != "windows" or sage is None:
        return None
    for wheel in index.windows_wheels:
        if wheel.version == sage.version and wheel.problems:
            return "; ".join(wheel.problems)
    return None


# --- InvokeAI ---------------------------------------------------------------------------------

def invokeai_sage_choice(facts: Facts) -> str | None:
    """The attention_backend value that selects SageAttention, where this InvokeAI has one."""
    package = facts.target.invokeai if facts.target else None
    if package is None or not package.attention_backend_supported:
        return None
    return next((c for c in package.attention_backend_choices if "sage" in c.lower()), None)


def invokeai_switch_pending(facts: Facts, use: str | None = None) -> str | None:
    """The choice to write into invokeai.yaml, where the plan would write it: never where
    sagedoctor's hook is the better switch (InvokeAI has no kernel for a GPU here, or --use)."""
    from .app_switch import choose_invokeai_switch

    choice = invokeai_sage_choice(facts)
    inv = facts.invokeai
    if choice is None or inv is None or inv.attention_backend == choice:
        return None
    return choice if choose_invokeai_switch(facts, use).use == "app" else None


def invokeai_switch_reset(facts: Facts, use: str | None = None) -> str | None:
    """The value to set attention_backend back to, where invokeai.yaml selects InvokeAI's own
    switch but sagedoctor's hook is the better one (or --use sagedoctor): InvokeAI's default
    `auto` where it offers it, else its first choice that is not SageAttention. With both on,
    the hook stands aside and InvokeAI's switch serves, so the plan turns it off: one router."""
    from .app_switch import choose_invokeai_switch

    sage = invokeai_sage_choice(facts)
    inv = facts.invokeai
    package = facts.target.invokeai if facts.target else None
    if sage is None or inv is None or package is None or inv.attention_backend != sage \
            or choose_invokeai_switch(facts, use).use != "sagedoctor":
        return None
    others = [c for c in package.attention_backend_choices if "sage" not in c.lower()]
    return "auto" if "auto" in others else next(iter(others), None)


# --- an install killed half-way --------------------------------------------------------------


def describe_pending(pending: InterruptedInstall) -> str:
    if pending.running:
        return (f"an install (pid {pending.pid}) is changing this venv now (its journal: "
                f"{pending.journal})")
    changed = ("it had started changing the venv" if pending.phase == "changing"
               else "it had not changed the venv yet" if pending.phase else
               "its journal does not say how far it got")
    who = f"pid {pending.pid}" if pending.pid is not None else "an unknown pid"
    return (f"an install was interrupted ({who}; {changed}); its journal {pending.journal} "
            "is still there, and the next install rolls the venv back to before it")
