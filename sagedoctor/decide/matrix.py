"""Which GPU, driver and torch build go together: PyTorch's CUDA matrix, the driver minimum of
each CUDA major, the arch gates of torch and SageAttention, and the GPUs an install route
serves. Each rule is computed once, here, so `check` and `plan` say the same thing.

Pure: plain values and facts in, plain values out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import Version

from ..facts import Gpu
from ..index import WheelIndex
from .versions import TorchBuild, cc_tuple, minor_of, parse_version

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
        have = cc_tuple(cc)
        return have is not None and any(
            (a := cc_tuple(arch)) is not None and a[0] == have[0] and a[1] <= have[1]
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
    minor = minor_of(torch_version)
    return TORCH_CUDA_MATRIX.get(minor) if minor else None


def index_urls_for(torch_version: str | None) -> frozenset[str]:
    """Every PyTorch index that serves this torch version (the CPU one included)."""
    release = torch_release(torch_version)
    if release is None:
        return frozenset()
    return frozenset({v.index_url for v in release.variants} | {f"{TORCH_INDEX}/cpu"})


def torch_index_url(build: TorchBuild, torch_version: str) -> str | None:
    """The PyTorch index serving this installed build, where the matrix says it exists."""
    parsed = parse_version(build.label)
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


def variant_of(build: TorchBuild, torch_version: str) -> TorchVariant | None:
    """The matrix's entry for an installed CUDA build (by its CUDA version)."""
    release = torch_release(torch_version)
    label = build.cuda_label if build.kind == "cuda" else None
    return release.variant(label) if release is not None and label else None


def build_serves(build: TorchBuild, torch_version: str, cc: str | None,
                 machine: str = "x86_64") -> bool:
    """Whether this torch CUDA build carries kernels for the GPU: the matrix where it knows
    the build (x86-64 and Windows builds; aarch64 ones differ), else the CUDA version's lower
    bound (cu128 and newer start at Turing)."""
    variant = variant_of(build, torch_version) if machine == "x86_64" else None
    if variant is not None:
        return variant.serves(cc)
    have = cc_tuple(cc)
    floor = torch_min_cc(build.cuda)
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


# --- the NVIDIA driver and the GPUs each build serves ----------------------------------------


def min_driver_for_cuda(cuda_major: int, os_name: str) -> str | None:
    """Minimum driver for a CUDA major (NVIDIA's minor-version compatibility table)."""
    windows = os_name == "windows"
    if cuda_major >= 13:
        return "580"
    if cuda_major == 12:
        return "528.33" if windows else "525.60.13"
    if cuda_major == 11:
        return "452.39" if windows else "450.80.02"
    return None


def driver_satisfies(driver: str, minimum: str) -> bool | None:
    have, need = parse_version(driver), parse_version(minimum)
    if have is None or need is None:
        return None
    return have >= need


def torch_min_cc(cuda: str | None) -> tuple[int, int] | None:
    """Oldest GPU a torch CUDA wheel carries kernels for: cu128 and cu130 start at Turing."""
    version = parse_version(cuda)
    if version is None:
        return None
    if version >= Version("12.8"):
        return (7, 5)
    return (5, 0)


def required_sage_modules(cc: str) -> tuple[str, ...]:
    """Compiled modules the default kernel for this GPU needs (besides `_fused`)."""
    value = cc_tuple(cc)
    if value is None:
        return ()
    if value in ((8, 0), (8, 6), (8, 7)):
        return ("_qattn_sm80",)
    if value == (9, 0):
        return ("_qattn_sm90",)
    if value in ((8, 9), (10, 0), (12, 0), (12, 1)):
        return ("_qattn_sm89",)
    return ()


@dataclass(frozen=True)
class GpuService:
    """Of the GPUs SageAttention runs on, which the OS's install route carries kernels for."""

    served: tuple[Gpu, ...]
    unserved: tuple[Gpu, ...]
    code: str  # the finding that says "none served": SD203 (Windows wheels), SD205 (build)


def windows_wheel_archs(index: WheelIndex, cuda: str | None) -> frozenset[str]:
    """Compute capabilities the fork's Windows wheels for this CUDA carry kernels for."""
    archs = set(index.windows_archs)
    version = parse_version(cuda)
    if version is not None and version >= Version("12.8"):
        archs |= set(index.windows_archs_cuda_12_8)
    return frozenset(archs)


def gpu_service(usable: list[Gpu], os_name: str, index: WheelIndex,
                wheel_cuda: str | None) -> GpuService:
    """`usable`: the GPUs SageAttention itself supports here (diagnose.usable_gpus)."""
    if os_name == "windows":
        covered = windows_wheel_archs(index, wheel_cuda)
        code = "SD203"
    else:
        covered = frozenset(index.build.archs)
        code = "SD205"
    served = tuple(g for g in usable if g.compute_capability in covered)
    return GpuService(served, tuple(g for g in usable if g not in served), code)


def gpu_label(gpu: Gpu) -> str:
    cc = f"sm{gpu.compute_capability.replace('.', '')}" if gpu.compute_capability else "sm?"
    return f"GPU {gpu.index} {gpu.name} ({cc})"


def usable_gpus(gpus: Iterable[Gpu], os_name: str) -> list[Gpu]:
    """NVIDIA GPUs SageAttention 2 can run on: sm80+ except Orin; sm75 only on Windows."""
    out = []
    for gpu in gpus:
        cc = cc_tuple(gpu.compute_capability)
        if gpu.vendor != "nvidia" or cc is None or cc == (8, 7):
            continue
        if cc >= (8, 0) or (cc == (7, 5) and os_name == "windows"):
            out.append(gpu)
    return out
