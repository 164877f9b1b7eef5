"""One verdict for `check` and `plan`: the findings and the plan of the same facts, made to
agree. A plan that is blocked puts its blockers into check's findings (SD204, SD205, SD201...),
and a fix that says `sagedoctor install` points at the blocker instead, since that install
would refuse. Pure."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import __version__
from ..facts import Facts
from ..index import WheelIndex
from ..plan import Blocked, Plan
from .checks import diagnose
from .findings import AREAS, Finding
from .resolve import resolve_plan
from .resolve.steps import ResolveOptions


@dataclass(frozen=True)
class Assessment:
    findings: tuple[Finding, ...]  # what `check` shows
    plan: Plan | Blocked  # what `plan` shows and `install` carries out


def _blocked_fix(fix: str, blockers: tuple[Finding, ...]) -> str:
    codes = ", ".join(dict.fromkeys(b.code for b in blockers))
    if any(b.fatal for b in blockers):
        return f"none here: SageAttention cannot work on this machine ({codes})"
    return f"first fix {codes} (the install is blocked until then); then {fix}"


def assess(facts: Facts, index: WheelIndex, options: ResolveOptions | None = None,
           runtime_version: str = __version__) -> Assessment:
    options = options or ResolveOptions(runtime_version=runtime_version)
    findings = diagnose(facts, index, options.runtime_version, use=options.use)
    plan = resolve_plan(facts, index, options)
    if isinstance(plan, Blocked):
        errors = {f.code for f in findings if f.severity == "error"}
        findings += [b for b in plan.findings if b.code not in errors]
        findings = [replace(f, fix=_blocked_fix(f.fix, plan.findings))
                    if "sagedoctor install" in f.fix and f not in plan.findings else f
                    for f in findings]
    order = {a: i for i, a in enumerate(AREAS)}
    findings.sort(key=lambda f: order.get(f.area, len(order)))  # stable within an area
    return Assessment(tuple(findings), plan)
