"""Plan (or the findings that block it) -> text and JSON. One renderer for `plan`,
`install --dry-run` and the install report, so what is shown is what is done. Text from
outside is stripped of control characters, and escaped (\\uXXXX) in the JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..decide.findings import exit_code
from ..plan import Blocked, Plan, Step
from .terminal_text import one_line, safe_json

PLAN_SCHEMA_VERSION = 1


def step_dict(step: Step) -> dict[str, Any]:
    data = asdict(step)
    if step.build is not None:
        data["build"]["env"] = dict(step.build.env)
    data["config"] = dict(step.config)
    return data


def plan_dict(result: Plan | Blocked, index_source: str) -> dict[str, Any]:
    if isinstance(result, Blocked):
        return {"schema_version": PLAN_SCHEMA_VERSION, "status": "blocked",
                "index": index_source, "exit_code": plan_exit_code(result),
                "findings": [asdict(f) for f in result.findings], "plan": None}
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "status": "plan" if result.steps else "nothing-to-do",
        "index": index_source, "exit_code": 0, "findings": [],
        "plan": {"python": result.python, "prefix": result.prefix, "os": result.os,
                 "steps": [step_dict(s) for s in result.steps], "notes": list(result.notes),
                 "switches": [asdict(s) for s in result.switches]},
    }


def plan_exit_code(result: Plan | Blocked) -> int:
    """0: a plan (or nothing to do); 1: blocked by something fixable; 2: cannot work here."""
    if isinstance(result, Plan):
        return 0
    return exit_code(result.findings) or 1


def text_style(stream: Any) -> dict[str, bool]:
    """check's marks and colours for this stream: ✗ where its encoding has it, colour on a
    terminal unless NO_COLOR (render.use_color)."""
    import os

    from .findings import can_encode_marks, use_color

    isatty = getattr(stream, "isatty", lambda: False)()
    return {"color": use_color(isatty, os.environ),
            "unicode": can_encode_marks(getattr(stream, "encoding", None))}


def blocked_headline(result: Blocked) -> str:
    """What a blocked plan says first: where nothing can make SageAttention work here (a fatal
    finding, exit 2, as check says it), that, not "fix these first"."""
    if any(f.fatal for f in result.findings):
        return "No plan: SageAttention cannot work on this machine."
    return "No plan: fix these first."


def render_plan_json(result: Plan | Blocked, index_source: str) -> str:
    return safe_json(plan_dict(result, index_source)) + "\n"


def render_plan_text(result: Plan | Blocked, *, header: str = "", color: bool = False,
                     unicode: bool = False) -> str:
    """color and unicode: as check's text (the same marks, painted the same way)."""
    from .findings import _Style

    lines = [header] if header else []
    if isinstance(result, Blocked):
        style = _Style(color, unicode)
        lines.append(blocked_headline(result))
        text = _joined(lines)
        for f in result.findings:  # the mark's colour is ours; the text is made safe alone
            text += f"  {style.mark(f.severity)} " + _joined(
                [f"{f.code} {f.title}" + (f": {f.detail}" if f.detail else "")]
                + ([f"      fix: {f.fix}"] if f.fix else []))
        return text
    if result.purpose == "uninstall":
        if not result.steps:  # else the caller's header says what it would change
            lines.append(f"Nothing to do: sagedoctor left nothing in {result.prefix}")
    elif not result.steps:
        lines.append(f"Nothing to do: SageAttention in {result.prefix} already matches this "
                     "machine. `sagedoctor verify` proves it on the GPU.")
    else:
        lines.append(f"Plan for {result.prefix} ({result.os}), {len(result.steps)} steps; "
                     "torch is never changed:")
    for number, step in enumerate(result.steps, 1):
        lines.append(f"  {number}. {step.title}")
        lines.append(f"     why: {step.reason}")
        if step.wheel is not None:
            digest = (f"sha256 {step.wheel.sha256} ({step.wheel.sha256_source})"
                      if step.wheel.sha256 else "sha256 unknown")
            lines.append(f"     from: {step.wheel.url}")
            lines.append(f"     {digest}")
        if step.index_url:
            lines.append(f"     index: {step.index_url}")
        if step.build is not None:
            label = "fallback build" if step.action == "install-from-index" else "source"
            lines.append(f"     {label}: {step.build.source}")
            lines.append("     env: " + " ".join(f"{k}={v!r}" if " " in v else f"{k}={v}"
                                                 for k, v in step.build.env))
        for path in step.paths:
            lines.append(f"     path: {path}")
    for note in result.notes:
        lines.append(f"  note: {note}")
    return _joined(lines)


def _joined(lines: list[str]) -> str:
    # Each line on its own: a path or title from outside cannot add a line or an escape.
    return "\n".join(one_line(line) for line in lines) + "\n"
