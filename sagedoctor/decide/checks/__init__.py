"""Facts -> findings: one module per area, each check registered in CHECKS (as flutter
doctor's validators are) and run in order. Pure: no I/O, no clock, no environment; every rule
is testable on Linux with a Windows profile. A check that crashes becomes its area's finding
(SD190) instead of taking `check` down."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ... import __version__
from ...facts import Facts, TargetFacts
from ...index import WheelIndex, shipped_index
from ..findings import AREAS, Finding, finding
from .apps import (
    check_comfyui,
    check_diffusers,
    check_invokeai,
    for_comfyui_target,
    runs_comfyui,
)
from .gpu import check_gpu
from .python import check_interrupted, check_python
from .pytorch import check_torch
from .sage import NEEDS_BUILD_CODES, check_sageattention, check_verification
from .system import check_system
from .toolchain import check_toolchain
from .triton import check_triton

_PROBE_AREA = {"system": "system", "gpu": "gpu", "target": "python", "toolchain": "toolchain",
               "invokeai": "invokeai", "comfyui": "comfyui"}


def _os_name(facts: Facts) -> str:
    return facts.system.os if facts.system else "linux"


@dataclass(frozen=True)
class CheckInput:
    """What every check is given: the facts, the index, and what the checks before it found."""

    facts: Facts
    index: WheelIndex
    os_name: str
    runtime_version: str
    so_far: tuple[Finding, ...]
    use: str | None = None  # --use app|sagedoctor: the switch chosen by hand


@dataclass(frozen=True)
class Check:
    area: str  # where a crash of this check is reported
    run: Callable[[CheckInput], list[Finding]]


def _toolchain(c: CheckInput) -> list[Finding]:
    if c.facts.toolchain is None:
        return []
    needs_build = any(f.code in NEEDS_BUILD_CODES for f in c.so_far)
    return check_toolchain(c.facts.toolchain, c.facts.target, c.facts.gpu, c.os_name,
                           needs_build, c.index)


def _for_target(check: Callable[[TargetFacts, CheckInput], list[Finding]]
                ) -> Callable[[CheckInput], list[Finding]]:
    """A check of the target interpreter: nothing to say where it could not be inspected."""
    def run(c: CheckInput) -> list[Finding]:
        return check(c.facts.target, c) if c.facts.target is not None else []
    return run


# Every check, in the order it runs; findings are then sorted by area, stable within one.
CHECKS: tuple[Check, ...] = (
    Check("system", lambda c: check_system(c.facts.system) if c.facts.system else []),
    Check("gpu", lambda c: check_gpu(c.facts.gpu, c.os_name, c.facts.target)
          if c.facts.gpu else []),
    Check("python", _for_target(lambda t, c: check_python(t, c.os_name))),
    Check("python", _for_target(lambda t, c: check_interrupted(c.facts, c.os_name))),
    Check("torch", _for_target(lambda t, c: check_torch(
        t, c.facts.gpu, c.os_name, c.facts.system.machine if c.facts.system else "x86_64",
        c.facts.toolchain.nvcc_version if c.facts.toolchain else None))),
    Check("triton", _for_target(lambda t, c: check_triton(t, c.facts.gpu, c.os_name,
                                                          c.index.triton))),
    Check("sageattention", _for_target(lambda t, c: check_sageattention(
        t, c.facts.gpu, c.os_name, c.index, c.runtime_version))),
    Check("sageattention", _for_target(lambda t, c: check_verification(c.facts, c.os_name))),
    Check("sageattention", lambda c: check_diffusers(c.facts)),
    Check("toolchain", _toolchain),  # after sageattention: whether a build is needed
    Check("invokeai", lambda c: check_invokeai(c.facts, c.use)),
    Check("comfyui", lambda c: check_comfyui(c.facts, c.os_name)),
)


def _crashed(check: Check, exc: Exception) -> Finding:
    return finding("SD190", "error", f"the {check.area} check failed ({type(exc).__name__}: "
                   f"{exc}); the other areas were checked", area=check.area,
                   title=f"Could not check {check.area}")


def diagnose(facts: Facts, index: WheelIndex | None = None,
             runtime_version: str = __version__,
             checks: tuple[Check, ...] = CHECKS, use: str | None = None) -> list[Finding]:
    """Every finding for the facts at hand, in area order; areas without facts are skipped.

    The index supplies the Triton pairing and nvcc minimums (default: the shipped one). A
    check that raises is reported as its area's SD190, and the rest still run."""
    index = index or shipped_index()
    os_name = _os_name(facts)
    out: list[Finding] = []
    for check in checks:
        try:
            out += check.run(CheckInput(facts, index, os_name, runtime_version, tuple(out),
                                        use))
        except Exception as exc:  # a bug in one rule must not hide every other finding
            out.append(_crashed(check, exc))
    for failure in facts.probe_failures:
        area = _PROBE_AREA.get(failure.area, failure.area)
        # A failure that knows its fix says it as the fix, not inside the detail.
        detail, fix = failure.detail_and_fix()
        out.append(finding("SD190", "error", detail, area=area, title=f"Could not check {area}",
                           fix=fix))
    if facts.comfyui is not None and runs_comfyui(facts.comfyui, facts.target, os_name):
        out = for_comfyui_target(out, facts.comfyui, facts.target, os_name)
    order = {a: i for i, a in enumerate(AREAS)}
    return sorted(out, key=lambda f: order.get(f.area, len(order)))  # stable within an area


def findings_for_areas(findings: Iterable[Finding], areas: Iterable[str]) -> list[Finding]:
    wanted = set(areas)
    return [f for f in findings if f.area in wanted]
