"""Findings -> text (a line per area, flutter-doctor style) and JSON. What came from outside
(GPU names, versions, paths, a tool's output) is stripped of control characters in the text
and escaped (\\uXXXX) in the JSON (terminal_text.py)."""

from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ..decide.findings import AREAS, SUMMARY_CODES, Finding, exit_code
from ..facts import FACTS_SCHEMA_VERSION, Facts, facts_to_dict
from .terminal_text import one_line, safe_json

REPORT_SCHEMA_VERSION = 1
AREA_TITLES = {
    "system": "System", "gpu": "GPU", "python": "Python", "torch": "PyTorch",
    "triton": "Triton", "sageattention": "SageAttention", "toolchain": "Build toolchain",
    "invokeai": "InvokeAI", "comfyui": "ComfyUI",
}
_RANK = {"ok": 0, "info": 1, "warn": 2, "error": 3}
_UNICODE_MARKS = {"ok": "✓", "info": "•", "warn": "!", "error": "✗", "unknown": "?"}
_ASCII_MARKS = {"ok": "+", "info": "-", "warn": "!", "error": "x", "unknown": "?"}
_COLORS = {"ok": "32", "info": "36", "warn": "33", "error": "31", "unknown": "35"}
STATUS = {0: "ready", 1: "fixable", 2: "unsupported"}


def use_color(isatty: bool, env: Mapping[str, str]) -> bool:
    """NO_COLOR (any value) wins, then FORCE_COLOR, then a real terminal that is not dumb."""
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return isatty and env.get("TERM", "") != "dumb"


def can_encode_marks(encoding: str | None) -> bool:
    try:
        "".join(_UNICODE_MARKS.values()).encode(codecs.lookup(encoding or "ascii").name)
    except (LookupError, UnicodeEncodeError):
        return False
    return True


class _Style:
    def __init__(self, color: bool, unicode: bool) -> None:
        self.color = color
        self.marks = _UNICODE_MARKS if unicode else _ASCII_MARKS

    def mark(self, severity: str) -> str:
        return self.paint(self.marks[severity], severity)

    def paint(self, text: str, severity: str) -> str:
        return f"\x1b[{_COLORS[severity]}m{text}\x1b[0m" if self.color else text

    def bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.color else text


def _worst(findings: Sequence[Finding]) -> str:
    return max((f.severity for f in findings), key=_RANK.__getitem__, default="unknown")


def render_text(
    findings: Sequence[Finding],
    areas: Sequence[str],
    *,
    verbose: bool = False,
    color: bool = False,
    unicode: bool = True,
    header: str = "",
) -> str:
    style = _Style(color, unicode)
    lines = [one_line(header)] if header else []
    for area in [a for a in AREAS if a in areas]:
        items = [f for f in findings if f.area == area]
        title = AREA_TITLES[area]
        if not items:
            lines.append(f"[{style.mark('unknown')}] {title}: not checked")
            continue
        summary = next((f for f in items if f.code in SUMMARY_CODES), None)
        worst = _worst(items)
        head = one_line(summary.detail if summary else items[0].title)
        lines.append(f"[{style.mark(worst)}] {style.bold(title)}: {head}")
        for f in items:
            if f is summary or (f.severity == "ok" and not verbose):
                continue
            detail = f": {one_line(f.detail)}" if f.detail else ""
            lines.append(f"    {style.mark(f.severity)} {f.code} {one_line(f.title)}{detail}")
            if f.fix and (f.severity in ("warn", "error") or verbose):
                lines.append(f"      fix: {one_line(f.fix)}")
    lines.append("")
    lines.append(summary_line(findings, style))
    return "\n".join(lines) + "\n"


def summary_line(findings: Sequence[Finding], style: _Style | None = None) -> str:
    style = style or _Style(False, True)
    code = exit_code(findings)
    if code == 2:
        fatal = next(f for f in findings if f.fatal)
        return style.paint(f"{style.marks['error']} SageAttention cannot work on this machine: "
                           f"{one_line(fatal.title)} ({fatal.code}).", "error")
    if code == 1:
        errors = [f for f in findings if f.severity == "error"]
        areas = {f.area for f in errors}
        return style.paint(
            f"{style.marks['warn']} {len(errors)} problem{'s' * (len(errors) != 1)} in "
            f"{len(areas)} area{'s' * (len(areas) != 1)}; each has a fix above.", "warn")
    warns = sum(f.severity == "warn" for f in findings)
    extra = f" ({warns} warning{'s' * (warns != 1)})" if warns else ""
    return style.paint(f"{style.marks['ok']} No problems found{extra}.", "ok")


def report_dict(facts: Facts, findings: Sequence[Finding]) -> dict[str, Any]:
    code = exit_code(findings)
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "facts_schema_version": FACTS_SCHEMA_VERSION,
        "sagedoctor_version": facts.sagedoctor_version,
        "exit_code": code,
        "status": STATUS[code],
        "findings": [asdict(f) for f in findings],
        "facts": facts_to_dict(facts),
    }


def render_json(facts: Facts, findings: Sequence[Finding], encoding: str | None = "utf-8") -> str:
    """The JSON report; \\u escapes where ``encoding`` (the stream's) cannot carry a character,
    so a Cyrillic path on a cp1252 console is still valid, identical JSON."""
    text = safe_json(report_dict(facts, findings)) + "\n"
    if not can_encode(text, encoding):
        text = safe_json(report_dict(facts, findings), ensure_ascii=True) + "\n"
    return text


def can_encode(text: str, encoding: str | None) -> bool:
    try:
        text.encode(codecs.lookup(encoding or "utf-8").name)
    except (LookupError, UnicodeEncodeError):
        return False
    return True
