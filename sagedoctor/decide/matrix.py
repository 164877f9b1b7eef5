"""Compatibility rules as data, each requirement computed once so `check` and `plan` say the
same thing: PyTorch's CUDA matrix, the Triton a torch needs, the C++ standard of its headers.

Pure: plain values and facts in, plain values out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..facts import Gpu, TorchFacts
from ..index import TritonRules, spec_text
from . import versions as compat

TORCH_INDEX = "https://download.pytorch.org/whl"

# --- PyTorch's CUDA matrix ------------------------------------------------------------------
# Sources (docs/wheel-selection.md says more): pytorch/pytorch RELEASE.md "PyTorch CUDA Support
# Matrix" and the release RFCs #178665 (2.12), #190355 (2.14), #190385 (2.15: no cu126);
# astral-sh-build/build-sageattention plan-matrix.py (@d3165d1), whose CI installs every listed
# torch from download.pytorch.org/whl/cuXYZ; the default (PyPI) CUDA from each release's wheel
# METADATA on PyPI (cuda-toolkit==13.0.3 in 2.14.0/2.14.1, ==13.2.2 in 2.15.0; read 2026-12-04):
# 2.14 shipped cu130 on PyPI although its RFC #190355 proposed 13.2.
# Arch lists are Linux x86-64 and Windows builds; a cubin for X.y also runs on X.z, z >= y.
# Volta on cu128: 2.7's cu128 build starts at Turing (cuobjdump of pytorch-2.7.0 cuda12.8 in
# moi90/pytorch_compute_capabilities table.md: sm_75..sm_120; "torch 2.7.1+cu128 not support
# sm_70", EutropicAI/vs-playground#59); 2.8 added sm_70 back to cu128/cu129 (pytorch/pytorch
# #157517 and #160269, .ci/manywheel/build_cuda.sh "we would like to keep sm_70"); 2.9 and 2.10
# keep it (RELEASE.md "For Release 2.9 and 2.10"); 2.11 dropped it (#172352, #175253).
_MAXWELL_TO_HOPPER = ("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0")
_VOLTA_TO_BLACKWELL = ("7.0", "7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
_TURING_TO_BLACKWELL = ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")


@dataclass(frozen=True)
class TorchVariant:
    label: str  # "cu130"
    cuda: str  # "13.0"
    archs: tuple[str, ...]

    @property
    def index_url(self) -> str:
        return f"{TORCH_INDEX}/{self.label}"

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])

    def serves(self, cc: str | None) -> bool:
        """Carries kernels for this compute capability (same major, minor at most the GPU's)."""
        have = compat.cc_tuple(cc)
        return have is not None and any(
            (a := compat.cc_tuple(arch)) is not None and a[0] == have[0] and a[1] <= have[1]
            for arch in self.archs)


@dataclass(frozen=True)
class TorchRelease:
    minor: tuple[int, int]
    variants: tuple[TorchVariant, ...]
    default: str  # the variant PyPI's plain `torch` is (Linux)

    def variant(self, label: str) -> TorchVariant | None:
        return next((v for v in self.variants if v.label == label), None)


def _v(label: str, archs: tuple[str, ...]) -> TorchVariant:
    digits = label[2:]
    return TorchVariant(label, f"{digits[:-1]}.{digits[-1]}", archs)


def _release(minor: str, default: str, *variants: TorchVariant) -> TorchRelease:
    major, minor_n = (int(p) for p in minor.split("."))
    assert any(v.label == default for v in variants), minor
    return TorchRelease((major, minor_n), variants, default)


_CU118 = _v("cu118", _MAXWELL_TO_HOPPER)
_CU121 = _v("cu121", _MAXWELL_TO_HOPPER)
_CU124 = _v("cu124", _MAXWELL_TO_HOPPER)
_CU126 = _v("cu126", _MAXWELL_TO_HOPPER)
_CU128_VOLTA = _v("cu128", _VOLTA_TO_BLACKWELL)
_CU129_VOLTA = _v("cu129", _VOLTA_TO_BLACKWELL)
_CU128 = _v("cu128", _TURING_TO_BLACKWELL)  # 2.7, and 2.11 (which dropped Volta again)
_CU130 = _v("cu130", _TURING_TO_BLACKWELL)
_CU132 = _v("cu132", _TURING_TO_BLACKWELL)

TORCH_CUDA_MATRIX: dict[tuple[int, int], TorchRelease] = {r.minor: r for r in (
    _release("2.4", "cu121", _CU118, _CU121, _CU124),
    _release("2.5", "cu124", _CU118, _CU121, _CU124),
    _release("2.6", "cu124", _CU118, _CU124, _CU126),
    _release("2.7", "cu126", _CU118, _CU126, _CU128),
    _release("2.8", "cu128", _CU126, _CU128_VOLTA, _CU129_VOLTA),
    # cu129 builds of 2.9-2.11 are uncertain (pytorch/pytorch#187834: "unsupported since
    # 2.10"): left out, so no fix ever names them.
    _release("2.9", "cu128", _CU126, _CU128_VOLTA, _CU130),
    _release("2.10", "cu128", _CU126, _CU128_VOLTA, _CU130),
    _release("2.11", "cu130", _CU126, _CU128, _CU130),
    _release("2.12", "cu130", _CU126, _CU130, _CU132),
    _release("2.13", "cu130", _CU126, _CU130, _CU132),
    _release("2.14", "cu130", _CU126, _CU130, _CU132),
    _release("2.15", "cu132", _CU130, _CU132),
)}


def torch_release(torch_version: str | None) -> TorchRelease | None:
    minor = compat.minor_of(torch_version)
    return TORCH_CUDA_MATRIX.get(minor) if minor else None


def index_urls_for(torch_version: str | None) -> frozenset[str]:
    """Every PyTorch index that serves this torch version (the CPU one included)."""
    release = torch_release(torch_version)
    if release is None:
        return frozenset()
    return frozenset({v.index_url for v in release.variants} | {f"{TORCH_INDEX}/cpu"})


def torch_index_url(build: compat.TorchBuild, torch_version: str) -> str | None:
    """The PyTorch index serving this installed build, where the matrix says it exists."""
    parsed = compat.parse_version(build.label)
    local = (parsed.local or "") if parsed else ""
    release = torch_release(torch_version)
    if local.startswith(("rocm", "xpu")):
        return f"{TORCH_INDEX}/{local}"
    if local == "cpu" or (not local and build.kind == "cpu"):
        return f"{TORCH_INDEX}/cpu"
    label = local or (build.cuda_label if build.kind == "cuda" else None)
    if release is not None and label and release.variant(label) is not None:
        return f"{TORCH_INDEX}/{label}"
    return None  # a vendor's build (+nv24.08), or a variant the matrix does not know


def variant_of(build: compat.TorchBuild, torch_version: str) -> TorchVariant | None:
    """The matrix's entry for an installed CUDA build (by its CUDA version)."""
    release = torch_release(torch_version)
    label = build.cuda_label if build.kind == "cuda" else None
    return release.variant(label) if release is not None and label else None


def build_serves(build: compat.TorchBuild, torch_version: str, cc: str | None,
                 machine: str = "x86_64") -> bool:
    """Whether this torch CUDA build carries kernels for the GPU: the matrix where it knows
    the build (x86-64 and Windows builds; aarch64 ones differ), else the CUDA version's lower
    bound (cu128 and newer start at Turing)."""
    variant = variant_of(build, torch_version) if machine == "x86_64" else None
    if variant is not None:
        return variant.serves(cc)
    have = compat.cc_tuple(cc)
    floor = compat.torch_min_cc(build.cuda)
    return have is None or floor is None or have >= floor


def pick_variant(torch_version: str, ccs: list[str], driver_ok: set[int] | None = None
                 ) -> TorchVariant | None:
    """The variant of this torch minor that serves every GPU: the registry's default where it
    does, else the newest CUDA that does; `driver_ok` limits the CUDA majors."""
    release = torch_release(torch_version)
    if release is None:
        return None
    fits = [v for v in release.variants if all(v.serves(cc) for cc in ccs)
            and (driver_ok is None or v.cuda_major in driver_ok)]
    if not fits:
        return None
    default = next((v for v in fits if v.label == release.default), None)
    return default or max(fits, key=lambda v: Version(v.cuda))


def newest_torch_serving(ccs: list[str]) -> tuple[str, TorchVariant] | None:
    """The newest torch minor one of whose variants serves every GPU, e.g. 2.14 cu126 for a
    GTX 1080 once 2.15 dropped cu126."""
    for minor in sorted(TORCH_CUDA_MATRIX, reverse=True):
        variant = pick_variant(f"{minor[0]}.{minor[1]}", ccs)
        if variant is not None:
            return f"{minor[0]}.{minor[1]}", variant
    return None


# --- Triton ----------------------------------------------------------------------------------

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
        return self.minor is None or compat.minor_of(version) == self.minor


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
    minor_known = compat.minor_of(torch.version) not in rules.windows_unknown
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
    window_minor = _lower_minor(spec)
    turing = [g for g in gpus if g.compute_capability == "7.5"]
    if not turing:
        return TritonRequirement(package, spec, window_minor, source, reason)
    lower = _lower_bound(spec)
    if lower is not None and rules.turing_spec.contains(lower, prereleases=True):
        return TritonRequirement(
            package, spec, window_minor, source,
            reason + f"; {_gpu_name(turing[0])} also needs Triton "
            f"{spec_text(rules.turing_spec)} (Triton dropped Turing in 3.3), which it is")
    if len(turing) < len(gpus):  # other GPUs still use it; the Turing ones stay on PyTorch
        return TritonRequirement(package, spec, window_minor, source, reason,
                                 turing_left_out=tuple(turing))
    old = newest_turing_torch(rules)
    return TritonRequirement(
        package, None, window_minor, source, reason,
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
    return compat.minor_of(_lower_bound(spec))


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


# --- the C++ standard of a source build ---------------------------------------------------

def cxx_standard_for(torch: TorchFacts) -> tuple[int, str]:
    """The C++ standard an extension for this torch must be built with, and why: the guard in
    its ATen.h where the probe read it, else the torch version (2.14 made C++20 mandatory)."""
    version = compat.parse_version(torch.version)
    label = ".".join(map(str, version.release[:2])) if version else torch.version
    if torch.cxx_standard is not None:
        return torch.cxx_standard, f"torch {label} requires it; read from its ATen.h"
    if version is not None and version.release[:2] >= (2, 14):
        return 20, f"torch {label} requires it"
    return 17, f"torch {label} builds with it"


# gcc accepts -std=c++20 since 10; nvcc since CUDA 12.0 (C++20 dialect support).
MIN_GCC_FOR = {20: "10", 17: "7"}
MIN_NVCC_FOR = {20: "12.0", 17: "11.0"}


def cxx_toolchain_problems(standard: int, gcc: str | None, nvcc: str | None) -> list[str]:
    """What stops a C++`standard` build with these compilers (nothing known: no complaint)."""
    out = []
    for name, have, need in (("gcc", gcc, MIN_GCC_FOR.get(standard)),
                             ("nvcc", nvcc, MIN_NVCC_FOR.get(standard))):
        version = compat.parse_version(have)
        if need and version is not None and version < Version(need):
            out.append(f"{name} {have} cannot compile C++{standard} (needs {name} >= {need})")
    return out
