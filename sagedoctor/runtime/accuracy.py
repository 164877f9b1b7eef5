"""Numeric comparison of a kernel's output with SDPA's, and the pass thresholds.

Why these numbers: on a real H200, correct SageAttention kernels measured cosine 0.9992 and
relative L2 0.038 against SDPA (bf16, D=128); the broken sm90 kernel of tag v2.2.0 measured
cosine ~0 and relative L2 ~41. cosine >= 0.99 and rel L2 <= 0.08 leave about 2x margin over
the correct kernels and reject the broken one by orders of magnitude.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

MIN_COSINE = 0.99
MAX_REL_L2 = 0.08


@dataclass(frozen=True)
class Thresholds:
    min_cosine: float = MIN_COSINE
    max_rel_l2: float = MAX_REL_L2

    @classmethod
    def from_env(cls) -> Thresholds:
        """SAGEDOCTOR_MIN_COSINE / SAGEDOCTOR_MAX_REL_L2 override the defaults."""

        def number(name: str, default: float) -> float:
            try:
                return float(os.environ.get(name, default))
            except ValueError:
                return default

        return cls(number("SAGEDOCTOR_MIN_COSINE", MIN_COSINE),
                   number("SAGEDOCTOR_MAX_REL_L2", MAX_REL_L2))


@dataclass(frozen=True)
class Comparison:
    cosine: float
    rel_l2: float
    finite: bool

    def passes(self, thresholds: Thresholds) -> bool:
        return (self.finite and self.cosine >= thresholds.min_cosine
                and self.rel_l2 <= thresholds.max_rel_l2)

    def describe(self) -> str:
        return f"cos {self.cosine:.5f}, rel L2 {self.rel_l2:.4f}" + (
            "" if self.finite else ", NaN/Inf")


def compare(output: Any, reference: Any) -> Comparison:
    """Cosine similarity and relative L2 error in fp32 over the whole tensor."""
    import torch

    out = output.detach().float().flatten()
    ref = reference.detach().float().flatten()
    if out.shape != ref.shape:
        return Comparison(0.0, float("inf"), False)
    finite = bool(torch.isfinite(out).all())
    if not finite:
        return Comparison(0.0, float("inf"), False)
    ref_norm = ref.norm()
    out_norm = out.norm()
    denom = float(ref_norm * out_norm)
    cosine = float(out @ ref) / denom if denom > 0 else (1.0 if float(ref_norm) == 0 else 0.0)
    rel = float((out - ref).norm() / ref_norm) if float(ref_norm) > 0 else float(out_norm)
    return Comparison(cosine, rel, True)
