"""The actions screen's line on the InvokeAI switch; the switch itself is
sagedoctor.invokeai's (enable_in_invokeai, disable_in_invokeai)."""

from __future__ import annotations

from ..apps.invokeai import KEY, switch_state
from ..facts import Facts, InvokeAIFacts, TargetFacts


def state_line(target: TargetFacts, inv: InvokeAIFacts | None,
               facts: Facts | None = None, use: str | None = None) -> str:
    """One line: is SageAttention on for this InvokeAI, and by which route (and why);
    `use` is the TUI's --use."""
    state = switch_state(target, inv, facts, use)
    if state is None:
        return "InvokeAI: not installed in this venv"
    on = "on" if state.on else "off"
    if state.route.kind == "hook":
        package = target.invokeai
        if package is not None and package.attention_backend_supported and any(
                "sage" in c.lower() for c in package.attention_backend_choices):
            # it has the setting, and the hook was chosen over it: say why
            return f"InvokeAI {state.version}: start-up hook {on} ({state.route.why})"
        return f"InvokeAI {state.version}: no {KEY} setting; start-up hook {on}"
    return f"InvokeAI {state.version}: {KEY}: {state.value or 'not set'} (SageAttention {on})"
