"""Whether one SDPA call may leave PyTorch: a reason string when it may not, else None.

Runs on every call, so it reads only cheap tensor attributes, in the order most calls fail;
the router keeps what depends on the tensors' signature alone (`shape_reasons`) per signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Reason keys (counted in stats; the log line uses the text).
REASONS = {
    "device": "not on a GPU",
    "dtype": "not fp16/bf16",
    "shape": "not 4-D",
    "mask": "masked",
    "dropout": "dropout",
    "head_dim": "head size",
    "mixed": "mixed devices or dtypes",
    "gqa": "grouped K/V heads",
    "causal_lengths": "causal with unequal lengths",
    "grad": "needs gradients",
    "compiling": "torch.compile tracing",
    "short": "short sequence",
    "slower": "SDPA faster here",
    "unmeasured": "shape not timed (per-process budget spent)",
    "unverified": "no verified kernel",
    "site": "failed its own check at this call site",
    "retired": "device retired",
    "oom": "out of memory earlier",
    "fault": "kernel error",
    "subclass": "tensor subclass",
    "unknown_args": "unknown arguments",
}


CUDA_ONLY = frozenset({"cuda"})


def ineligible_reason(
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any,
    dropout_p: float,
    is_causal: bool,
    device_types: frozenset[str],
    dtypes: frozenset[Any],
    head_dims: frozenset[int],
    min_seq_len: int,
    grad_enabled: Callable[[], bool],
    compiling: Callable[[], bool],
) -> str | None:
    """The first reason this call must stay on SDPA; the torch state is asked only if needed."""
    if attn_mask is not None:
        return "mask"
    if dropout_p:
        return "dropout"
    before, after = shape_reasons(q, k, v, is_causal, device_types, dtypes, head_dims,
                                  min_seq_len)
    return before or state_reason(q, k, v, grad_enabled, compiling) or after


def shape_reasons(q: Any, k: Any, v: Any, is_causal: bool, device_types: frozenset[str],
                  dtypes: frozenset[Any], head_dims: frozenset[int],
                  min_seq_len: int) -> tuple[str | None, str | None]:
    """The reasons that follow from the tensors' types, devices, dtypes and shapes alone (so
    the router may keep them per signature): the first of those checked before the torch
    state (`state_reason`), and the first of those checked after it."""
    # q.is_cuda is a plain flag; q.device.type builds objects (~1-4 us on CPU tensors): ask it
    # only when a registered kernel serves another device type.
    if not q.is_cuda and (device_types == CUDA_ONLY or q.device.type not in device_types):
        return "device", None
    dtype = q.dtype
    if dtype not in dtypes:
        return "dtype", None
    device = q.device
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "shape", None
    if k.device != device or v.device != device or k.dtype != dtype or v.dtype != dtype:
        return "mixed", None
    return None, _late_reason(q, k, v, is_causal, head_dims, min_seq_len)


def _late_reason(q: Any, k: Any, v: Any, is_causal: bool, head_dims: frozenset[int],
                 min_seq_len: int) -> str | None:
    batch, heads, q_len, head_dim = q.shape
    if head_dim not in head_dims or k.shape[-1] != head_dim or v.shape[-1] != head_dim:
        return "head_dim"
    if k.shape[1] != heads or v.shape[1] != heads or k.shape[0] != batch:
        return "gqa"
    kv_len = k.shape[2]
    if is_causal and q_len != kv_len:
        return "causal_lengths"
    if q_len < min_seq_len or kv_len < min_seq_len:
        return "short"
    if type(q).__name__ != "Tensor" or type(k) is not type(q) or type(v) is not type(q):
        return "subclass"  # e.g. quantised tensor subclasses that dispatch SDPA themselves
    return None


def state_reason(q: Any, k: Any, v: Any, grad_enabled: Callable[[], bool],
                 compiling: Callable[[], bool]) -> str | None:
    """The reasons that change from call to call with the same tensors' shapes."""
    if compiling():
        return "compiling"
    if (q.requires_grad or k.requires_grad or v.requires_grad) and grad_enabled():
        return "grad"  # SageAttention has no backward pass
    return None
