"""Attention kernels as data: what each serves, and the order to try them per GPU family.

Standard library only at import; SageAttention is imported the first time a kernel of it runs.
A kernel takes HND tensors (batch, heads, seq, head_dim), as SDPA does, and keyword arguments
``is_causal`` and ``scale`` (and ``smooth_k`` where its spec states a setting); it returns the
attention output of the same shape.

smooth_k (SageAttention's K smoothing) is data-dependent: on a synthetic joint sequence with one
channel offset on the image tokens smoothing on was the better of two bad settings, on the first
block of Qwen-Image InvokeAI measured it the culprit. So every SageAttention spec states the
setting it tries first, and the router's per-site check tries the other before giving the call
to SDPA. SageAttention's kernels end in ``**kwargs``: a keyword they do not name is silently
ignored (``sageattn()`` drops ``smooth_k``), so the loader refuses a kernel whose function does
not name every keyword it would be passed.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KernelFn = Callable[..., Any]


@dataclass(frozen=True)
class KernelSpec:
    name: str
    label: str  # short, for logs: "sm90 fp8"
    load: Callable[[], KernelFn]  # returns the callable; may raise ImportError
    device_type: str = "cuda"
    archs: frozenset[tuple[int, int]] | None = None  # None: any compute capability
    dtypes: frozenset[str] = frozenset({"float16", "bfloat16"})
    head_dims: frozenset[int] = frozenset({64, 128})
    # Lower runs first; a family list below overrides it for the GPUs it names.
    priority: int = 100
    # The K-smoothing setting tried first (the other second); None: the kernel has no such
    # setting and is called without the keyword.
    smooth_k: bool | None = None

    def settings(self, first: bool | None = None) -> tuple[bool | None, ...]:
        """The smooth_k settings to try, `first` (else the stated one) first."""
        if self.smooth_k is None:
            return (None,)
        start = self.smooth_k if first is None else first
        return (start, not start)

    def serves(self, device_type: str, arch: tuple[int, int] | None, dtype: str,
               head_dim: int) -> bool:
        if device_type != self.device_type or dtype not in self.dtypes:
            return False
        if head_dim not in self.head_dims:
            return False
        return self.archs is None or arch in self.archs


class KernelRegistry:
    """Kernels by name, with a per-architecture preference order. Tests add their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, KernelSpec] = {}
        self._preference: dict[tuple[int, int], tuple[str, ...]] = {}
        self._loaded: dict[str, KernelFn] = {}

    def register(self, spec: KernelSpec) -> None:
        with self._lock:
            self._specs[spec.name] = spec
            self._loaded.pop(spec.name, None)

    def prefer(self, arch: tuple[int, int], names: tuple[str, ...]) -> None:
        with self._lock:
            self._preference[arch] = names

    def specs(self) -> list[KernelSpec]:
        with self._lock:
            return list(self._specs.values())

    def candidates(self, device_type: str, arch: tuple[int, int] | None, dtype: str,
                   head_dim: int) -> list[KernelSpec]:
        """Kernels that serve this call, best first."""
        with self._lock:
            order = self._preference.get(arch, ()) if arch else ()
            serving = [s for s in self._specs.values()
                       if s.serves(device_type, arch, dtype, head_dim)]
        rank = {name: i for i, name in enumerate(order)}
        return sorted(serving, key=lambda s: (rank.get(s.name, len(rank)), s.priority, s.name))

    def load(self, spec: KernelSpec) -> KernelFn:
        with self._lock:
            fn = self._loaded.get(spec.name)
        if fn is None:
            fn = spec.load()
            with self._lock:
                self._loaded[spec.name] = fn
        return fn


# --- SageAttention 2 kernels -----------------------------------------------------------------

class UnnamedKeyword(TypeError):
    """A keyword the runtime would pass that the kernel's function does not name."""


def unnamed_keywords(function: Callable[..., Any], keywords: tuple[str, ...]) -> list[str]:
    """The keywords `function` has no named parameter for (a trailing **kwargs would swallow
    them without effect). A signature that cannot be read names nothing."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return list(keywords)
    named = {name for name, p in parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [k for k in keywords if k not in named]


def require_named(function: Callable[..., Any], label: str, keywords: tuple[str, ...]) -> None:
    missing = unnamed_keywords(function, keywords)
    if missing:
        raise UnnamedKeyword(f"{label} has no parameter {', '.join(missing)}: "
                             f"it would be ignored")


# What the runtime passes to every SageAttention function besides a spec's fixed ones.
SAGE_KEYWORDS = ("tensor_layout", "is_causal", "sm_scale", "smooth_k")


def sage_loader(function: str, **fixed: Any) -> Callable[[], KernelFn]:
    """A loader for `sageattention.<function>`; it raises UnnamedKeyword where the function
    does not name a keyword it would be passed."""
    def load() -> KernelFn:
        import sageattention  # lazily: only where a routed call needs it

        target = getattr(sageattention, function)
        require_named(target, f"sageattention.{function}", SAGE_KEYWORDS + tuple(fixed))

        def kernel(q: Any, k: Any, v: Any, *, is_causal: bool = False,
                   scale: float | None = None, smooth_k: bool = True) -> Any:
            return target(q, k, v, tensor_layout="HND", is_causal=is_causal, sm_scale=scale,
                          smooth_k=smooth_k, **fixed)

        return kernel

    return load


_sage = sage_loader


AMPERE = frozenset({(8, 0), (8, 6), (8, 7)})
ADA_BLACKWELL = frozenset({(8, 9), (10, 0), (12, 0), (12, 1)})
HOPPER = frozenset({(9, 0)})
ALL_SM80_PLUS = AMPERE | ADA_BLACKWELL | HOPPER

# Each SageAttention 2 kernel tries smoothing on first: upstream's default, and on the
# synthetic outlier cases measured on an H100 (every kernel alike) the better of the two
# (+100: cos 0.996 on / 0.992 off; +300: 0.920 / 0.845; +600: 0.641 / 0.543). Off is tried next.
SMOOTH_K = True

SAGE_KERNELS = (
    KernelSpec("sage_fp8_sm90", "sm90 fp8", _sage("sageattn_qk_int8_pv_fp8_cuda_sm90",
                                                  pv_accum_dtype="fp32+fp32"), archs=HOPPER,
               smooth_k=SMOOTH_K),
    KernelSpec("sage_fp8_cuda_fp32fp16", "fp8 fp32+fp16",
               _sage("sageattn_qk_int8_pv_fp8_cuda", pv_accum_dtype="fp32+fp16"),
               archs=ADA_BLACKWELL | HOPPER, smooth_k=SMOOTH_K),
    KernelSpec("sage_fp8_cuda_fp32fp32", "fp8 fp32+fp32",
               _sage("sageattn_qk_int8_pv_fp8_cuda", pv_accum_dtype="fp32+fp32"),
               archs=ADA_BLACKWELL | HOPPER, smooth_k=SMOOTH_K),
    KernelSpec("sage_fp8_cuda_per_warp", "fp8 per-warp",
               _sage("sageattn_qk_int8_pv_fp8_cuda", qk_quant_gran="per_warp",
                     pv_accum_dtype="fp32+fp16"), archs=frozenset({(12, 0), (12, 1)}),
               smooth_k=SMOOTH_K),
    KernelSpec("sage_fp16_cuda", "fp16 cuda",
               _sage("sageattn_qk_int8_pv_fp16_cuda", pv_accum_dtype="fp32"),
               archs=ALL_SM80_PLUS, smooth_k=SMOOTH_K),
    KernelSpec("sage_fp16_triton", "fp16 triton", _sage("sageattn_qk_int8_pv_fp16_triton"),
               archs=ALL_SM80_PLUS | frozenset({(7, 5)}), smooth_k=SMOOTH_K),
)

# Order per family. sm86/87 take the CUDA fp16 kernel first, as the Windows fork does (the
# Triton path gave black images on Ampere); sm120 per-warp first, as upstream dispatches.
SAGE_PREFERENCE: dict[tuple[int, int], tuple[str, ...]] = {
    (8, 0): ("sage_fp16_cuda", "sage_fp16_triton"),
    (8, 6): ("sage_fp16_cuda", "sage_fp16_triton"),
    (8, 7): ("sage_fp16_cuda", "sage_fp16_triton"),
    (8, 9): ("sage_fp8_cuda_fp32fp16", "sage_fp8_cuda_fp32fp32", "sage_fp16_cuda"),
    (9, 0): ("sage_fp8_sm90", "sage_fp8_cuda_fp32fp16", "sage_fp16_cuda", "sage_fp16_triton"),
    (10, 0): ("sage_fp8_cuda_fp32fp16", "sage_fp16_cuda"),
    (12, 0): ("sage_fp8_cuda_per_warp", "sage_fp8_cuda_fp32fp16", "sage_fp16_cuda"),
    (12, 1): ("sage_fp8_cuda_per_warp", "sage_fp8_cuda_fp32fp16", "sage_fp16_cuda"),
    (7, 5): ("sage_fp16_triton",),
}


def default_registry() -> KernelRegistry:
    registry = KernelRegistry()
    for spec in SAGE_KERNELS:
        registry.register(spec)
    for arch, names in SAGE_PREFERENCE.items():
        registry.prefer(arch, names)
    return registry
