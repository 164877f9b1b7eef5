"""Which Triton a torch needs here: triton on Linux (the one torch pins), triton-windows on
Windows (the index's row, else derived from the minor torch's METADATA pins), Turing's cap.
Pure: facts and the index's Triton rules in, a TritonRequirement out."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from packaging.specifiers import SpecifierSet

from ..facts import Gpu, TorchFacts
from ..index import TritonRules, spec_text
from .versions import minor_of

_PIN = re.compile(r"(==|~=|>=)\s*(\d+)\.(\d+)")


def pinned_triton_minor(torch: TorchFacts | None) -> tuple[int, int] | None:
    """The Triton minor torch's own METADATA pins (`Requires-Dist: triton==3.6.0` or
    `triton~=3.8.0`; the probe keeps the specifier)."""
    match = _PIN.search(torch.triton_pin or "") if torch else None
    return (int(match.group(2)), int(match.group(3))) if match else None


def _minor_spec(minor: tuple[int, int]) -> SpecifierSet:
    return SpecifierSet(f">={minor[0]}.{minor[1]},<{minor[0]}.{minor[1] + 1}")


@dataclass(frozen=True)
class TritonRequirement:
    """What Triton this torch needs here: the one value `check`'s fix and the plan's install
    step both print. `spec` is None where nothing is known or nothing can serve (`blocked`)."""

    package: str  # "triton-windows" or "triton"
    spec: SpecifierSet | None
    minor: tuple[int, int] | None  # the Triton minor torch was built against
    # "index" (tabulated); derived from "torch-metadata" or "index-linux"; or "unknown"
    source: str
    reason: str  # why this requirement, for the plan's step
    blocked: str | None = None  # why no Triton can serve this torch here; with `blocked_code`
    blocked_code: str | None = None
    blocked_fix: str | None = None
    turing_left_out: tuple[Gpu, ...] = ()  # Turing GPUs the requirement cannot serve

    @property
    def requirement(self) -> str | None:
        return f"{self.package}{spec_text(self.spec)}" if self.spec is not None else None

    def satisfied_by(self, version: str | None) -> bool:
        if version is None:
            return False
        if self.spec is not None:
            return self.spec.contains(version, prereleases=True)
        return self.minor is None or minor_of(version) == self.minor


def _gpu_name(gpu: Gpu) -> str:
    cc = f"sm{(gpu.compute_capability or '?').replace('.', '')}"
    return f"GPU {gpu.index} {gpu.name} ({cc})"


def triton_requirement(torch: TorchFacts, gpus: list[Gpu], os_name: str,
                       rules: TritonRules) -> TritonRequirement:
    """The Triton for this torch on this OS and these (usable) GPUs.

    Linux: the triton torch pins itself. Windows: the index's row where it has one (it holds
    the known exceptions), else triton-windows of the minor torch pins (derived); Turing
    (sm75) intersects that with the Turing cap, and a minor triton-windows has not released
    yet blocks with the newest torch that works."""
    label = torch.full_version or torch.version
    pinned = pinned_triton_minor(torch)
    pair = rules.pair_for(torch.version)
    if os_name != "windows":
        minor = pinned or (pair.linux if pair else None)
        source = "torch-metadata" if pinned else ("index" if minor else "unknown")
        return TritonRequirement("triton", None, minor, source,
                                 f"torch {label} pins Triton "
                                 f"{minor[0]}.{minor[1]}" if minor else "")
    package = rules.windows_package
    minor_known = minor_of(torch.version) not in rules.windows_unknown
    if pair is not None and pair.windows is not None and minor_known:
        spec, source = pair.windows, "index"
        reason = f"torch {label} works with Triton {spec_text(spec)}"
    elif pinned is not None or (pair is not None and pair.linux is not None):
        source = "torch-metadata" if pinned else "index-linux"
        pinned = pinned or (pair.linux if pair else None)
        assert pinned is not None
        spec = _minor_spec(pinned)
        whose = "its METADATA" if source == "torch-metadata" else "the index's Linux row"
        reason = (f"derived: torch {label} pins Triton {pinned[0]}.{pinned[1]} ({whose}) and "
                  "the index has no triton-windows row for it yet: triton-windows of the same "
                  "minor; the smoke check after the install decides")
        if rules.windows_releases and pinned not in rules.windows_releases:
            newest = max(rules.windows_releases)
            works = newest_windows_torch(rules)
            return TritonRequirement(
                package, None, pinned, source, reason,
                blocked=(f"torch {label} needs Triton {pinned[0]}.{pinned[1]}; {package} has "
                         f"no {pinned[0]}.{pinned[1]} release yet (newest: {newest[0]}."
                         f"{newest[1]})" + (f"; the newest torch that works on Windows is "
                                            f"{works}" if works else "")),
                blocked_code="SD147",
                blocked_fix=(f"Keep torch {works} until {package} {pinned[0]}.{pinned[1]} is "
                             "released, then run `sagedoctor index refresh`" if works else
                             "Run `sagedoctor index refresh` once it is released"))
    else:
        return TritonRequirement(package, None, None, "unknown", "",
                                 blocked=f"torch {label}: no triton-windows pairing known",
                                 blocked_code="SD202")
    return _with_turing(TritonRequirement(package, spec, _lower_minor(spec), source, reason),
                        spec, gpus, rules, label)


def _with_turing(req: TritonRequirement, spec: SpecifierSet, gpus: list[Gpu],
                 rules: TritonRules, label: str) -> TritonRequirement:
    """Turing (sm75) needs Triton before 3.3: within the spec, said; beside newer GPUs, left
    out; alone, blocked with the torch line that still works."""
    turing = [g for g in gpus if g.compute_capability == "7.5"]
    if not turing:
        return req
    lower = _lower_bound(spec)
    if lower is not None and rules.turing_spec.contains(lower, prereleases=True):
        return replace(req, reason=req.reason + f"; {_gpu_name(turing[0])} also needs Triton "
                       f"{spec_text(rules.turing_spec)} (Triton dropped Turing in 3.3), which "
                       "it is")
    if len(turing) < len(gpus):  # other GPUs still use it; the Turing ones stay on PyTorch
        return replace(req, turing_left_out=tuple(turing))
    old = newest_turing_torch(rules)
    return replace(
        req, spec=None,
        blocked=(f"{_gpu_name(turing[0])} needs Triton {spec_text(rules.turing_spec)} (Triton "
                 f"dropped Turing in 3.3); torch {label} needs Triton {spec_text(spec)}: no "
                 "Triton serves both"),
        blocked_code="SD146",
        blocked_fix=(f"Use a torch {old} line (triton-windows "
                     f"{spec_text(_pair_spec(rules, old))}) for this GPU, or an RTX 30xx or "
                     "newer GPU" if old else "Use an RTX 30xx or newer GPU"))


def _lower_bound(spec: SpecifierSet) -> str | None:
    return next((s.version for s in spec if s.operator == ">="), None)


def _lower_minor(spec: SpecifierSet) -> tuple[int, int] | None:
    return minor_of(_lower_bound(spec))


def _pair_spec(rules: TritonRules, torch_minor: str) -> SpecifierSet:
    pair = rules.pair_for(torch_minor)
    assert pair is not None and pair.windows is not None
    return pair.windows


def newest_windows_torch(rules: TritonRules) -> str | None:
    """The newest torch minor with a triton-windows pairing that has a release."""
    for pair in sorted(rules.pairs, key=lambda p: p.torch, reverse=True):
        minor = _lower_minor(pair.windows) if pair.windows else None
        if minor and pair.torch not in rules.windows_unknown and (
                not rules.windows_releases or minor in rules.windows_releases):
            return f"{pair.torch[0]}.{pair.torch[1]}"
    return None


def newest_turing_torch(rules: TritonRules) -> str | None:
    """The newest torch minor whose triton-windows pairing still supports Turing."""
    for pair in sorted(rules.pairs, key=lambda p: p.torch, reverse=True):
        lower = _lower_bound(pair.windows) if pair.windows else None
        if lower and rules.turing_spec.contains(lower, prereleases=True):
            return f"{pair.torch[0]}.{pair.torch[1]}"
    return None
