"""Which of verify's stored decisions are at the shapes of the apps users run: the sweep
measures these shapes, check shows their speed-up, and InvokeAI's switch weighs them. Pure:
a calibration in, facts out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..facts import AppShapeSpeed
from ..runtime.decisions import shape_key

if TYPE_CHECKING:
    from ..runtime.decisions import Calibration, Decision

# The shapes of the apps users run (bf16), as verify's sweep measures them: (dtype, head size,
# batch x heads, tokens). The names are what the output shows.
APP_SHAPES = {
    "SDXL 1024x1024": ("bfloat16", 64, 2 * 10, 4096),
    "FLUX 1024x1024": ("bfloat16", 128, 24, 4608),
    "FLUX 1536x1536": ("bfloat16", 128, 24, 9728),
    "FLUX 2048x2048": ("bfloat16", 128, 24, 16896),
    "Wan 2.1 720p": ("bfloat16", 128, 40, 32760),
}


def app_decisions(data: Calibration) -> dict[str, dict[str, Decision]]:
    """Per GPU, the stored decision for each app shape that has one."""
    out: dict[str, dict[str, Decision]] = {}
    for gpu, entry in data.gpus.items():
        for name, (dtype, d, bh, tokens) in APP_SHAPES.items():
            decision = entry.decisions.get(shape_key(dtype, d, bh, tokens, tokens, False))
            if decision is not None:
                out.setdefault(gpu, {})[name] = decision
    return out


def app_shape_speeds(data: Calibration) -> tuple[AppShapeSpeed, ...]:
    """The stored decisions at the app shapes, as facts: per GPU and shape."""
    out = []
    for gpu, shapes in sorted(app_decisions(data).items()):
        entry = data.gpus[gpu]
        for label, decision in shapes.items():
            _dtype, head_dim, _bh, tokens = APP_SHAPES[label]
            out.append(AppShapeSpeed(gpu, entry.name or gpu, entry.arch, label, head_dim,
                                     tokens, decision.kernel, round(decision.speedup, 3),
                                     decision.route))
    return tuple(out)
