"""The actions screen's line on the InvokeAI switch; the switch itself is
sagedoctor.invokeai's (enable_in_invokeai, disable_in_invokeai)."""

from __future__ import annotations

from ..apps.invokeai import KEY, switch_state
from ..facts import Facts, InvokeAIFacts, TargetFacts


def state_line(target: TargetFacts, inv: InvokeAIFacts | None,
               facts: Facts | None = None) -> str:
    """One line: is SageAttention on for this InvokeAI, and by which route (and why)."""
    state = switch_state(target, inv, facts)
    if state is None:
        return "InvokeAI: not installed in this venv"
    on = "on" if state.on else "off"
    if state.route.kind == "hook":
        if state.route.why.startswith("InvokeAI's own scope"):  # it has one, with no kernel
            return f"InvokeAI {state.version}: start-up hook {on} ({state.route.why})"
        return f"InvokeAI {state.version}: no {KEY} setting; start-up hook {on}"
    return f"InvokeAI {state.version}: {KEY}: {state.value or 'not set'} (SageAttention {on})"
