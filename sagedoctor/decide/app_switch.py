"""Which switch routes attention to SageAttention for an app: the app's own (InvokeAI's
`attention_backend`) or sagedoctor's start-up hook. One router at a time, the better one for
this machine, said why. Pure: facts in, a choice out.

InvokeAI's scope (facts/apps.md, docs/invokeai.md) picks one kernel per GPU architecture by a
fixed table and has none for sm75, sm87, sm103 and sm110: there it logs "unavailable" and stays
on SDPA, so writing `attention_backend: sage` would do nothing at all. Where it has one, its
fixed rule sends every long self-attention to it: where verify measured that kernel slower
than SDPA at InvokeAI's shapes (SDXL 4096 tokens at 0.68x on an H100), the hook, which routes
per shape by measurement, is the better switch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..facts import AppShapeSpeed, Facts, Gpu
from .versions import cc_tuple, parse_version

USES = ("app", "sagedoctor")
# The shapes verify measures (decide.app_shapes.APP_SHAPES) of models that enter InvokeAI's scope
# (FLUX.1, SDXL...; not Wan): what its fixed rule meets in its own generations.
INVOKEAI_SHAPES = ("SDXL 1024x1024", "FLUX 1024x1024", "FLUX 1536x1536", "FLUX 2048x2048")


# InvokeAI's kernel descriptions (invokeai_kernel) in sagedoctor's registry names: where verify
# measured another kernel than InvokeAI would call, the reason says so.
REGISTRY_NAMES = {
    "fp16 CUDA (fp32 accumulation)": "sage_fp16_cuda",
    "fp16 Triton": "sage_fp16_triton",
    "fp8 CUDA (fp32+fp16 accumulation)": "sage_fp8_cuda_fp32fp16",
    "fp8 CUDA (fp32+fp32 accumulation)": "sage_fp8_cuda_fp32fp32",
    "sm90 fp8 (fp32+fp32 accumulation)": "sage_fp8_sm90",
    "fp8 per-warp": "sage_fp8_cuda_per_warp",
}


def _other_kernel(shape: AppShapeSpeed, torch_cuda: str | None) -> str:
    """', not InvokeAI's own (X)' where verify timed another kernel than InvokeAI calls."""
    own = invokeai_kernel(shape.arch, torch_cuda)
    if own is None or REGISTRY_NAMES.get(own) == shape.kernel:
        return ""
    return f"; InvokeAI's own {own} kernel was not timed"


def invokeai_rule_routes(head_dim: int, q_len: int, kv_len: int) -> bool:
    """InvokeAI's fixed rule for an unmasked, non-causal fp16/bf16 call: head 64 or 128,
    query >= 1536 and key >= 512 tokens go to its kernel; the rest stays on SDPA."""
    return head_dim in (64, 128) and q_len >= 1536 and kv_len >= 512


def invokeai_rule_at_shapes(facts: Facts) -> list[AppShapeSpeed]:
    """verify's current measurements at InvokeAI's shapes that its rule sends to its kernel."""
    from .requirements import verification_is_current

    record, target = facts.verification, facts.target
    if record is None or target is None or record.status != "verified" \
            or not verification_is_current(record, target):
        return []
    return [s for s in record.app_shapes if s.shape in INVOKEAI_SHAPES
            and invokeai_rule_routes(s.head_dim, s.tokens, s.tokens)]


def invokeai_rule_lines(shapes: tuple[AppShapeSpeed, ...] | list[AppShapeSpeed],
                        torch_cuda: str | None) -> list[str]:
    """verify's words for an InvokeAI venv: per GPU measured, what InvokeAI's fixed rule does
    at each of its shapes there, beside what verify measured and what the hook does."""
    out: list[str] = []
    gpus: dict[str, list[AppShapeSpeed]] = {}
    for s in shapes:
        if s.shape in INVOKEAI_SHAPES:
            gpus.setdefault(s.gpu, []).append(s)
    for measured in gpus.values():
        first = measured[0]
        cc = cc_tuple(first.arch)
        sm = f"sm{cc[0]}{cc[1]}" if cc else "an unknown architecture"
        kernel = invokeai_kernel(first.arch, torch_cuda)
        out.append(f"InvokeAI's own switch (attention_backend: sage) on {first.name} ({sm}):")
        if kernel is None:
            out.append("  no kernel for this GPU in its table: every call stays on SDPA; "
                       "sagedoctor's hook is the switch that can route here")
            continue
        for s in measured:
            head = f"  {s.shape} ({s.tokens} tokens): "
            if not invokeai_rule_routes(s.head_dim, s.tokens, s.tokens):
                out.append(head + "its rule keeps it on SDPA")
                continue
            verdict = "faster" if s.speedup >= 1.0 else "slower"
            hook = "routes it too" if s.route else "keeps it on SDPA"
            other = "" if REGISTRY_NAMES.get(kernel) == s.kernel else \
                " (another kernel: InvokeAI's was not timed)"
            out.append(head + f"its rule sends it to its {kernel} kernel; verify measured "
                       f"{s.kernel} there at {s.speedup:.2f}x SDPA ({verdict}){other}; "
                       f"sagedoctor's hook {hook}")
    return out


def _measured(shape: AppShapeSpeed) -> str:
    return f"{shape.shape} ({shape.tokens} tokens) {shape.speedup:.2f}x on {shape.name}"


def invokeai_kernel(arch: str | None, torch_cuda: str | None) -> str | None:
    """The kernel InvokeAI's own scope calls on a GPU of this compute capability; None where
    its table has none (sm75, sm87, sm103, sm110, and anything it does not name)."""
    cc = cc_tuple(arch)
    if cc is None:
        return None
    if cc == (8, 0):
        return "fp16 CUDA (fp32 accumulation)"
    if cc == (8, 6):
        return "fp16 Triton"
    if cc == (8, 9):
        cuda = parse_version(torch_cuda or "")
        new = cuda is not None and cuda.release[:2] >= (12, 8)
        return f"fp8 CUDA ({'fp32+fp16' if new else 'fp32+fp32'} accumulation)"
    if cc[0] == 9:
        return "sm90 fp8 (fp32+fp32 accumulation)"
    if cc in ((10, 0), (12, 0), (12, 1)):
        return "fp8 per-warp"
    return None


@dataclass(frozen=True)
class SwitchChoice:
    """Who routes this app's attention: its own switch ("app") or sagedoctor's hook."""

    app: str  # "InvokeAI"
    use: str  # one of USES
    why: str
    forced: bool = False  # the user chose it with --use
    app_serves: bool = True  # the app's own kernel table covers every GPU here


def _sm(gpu: Gpu) -> str:
    cc = cc_tuple(gpu.compute_capability)
    return f"sm{cc[0]}{cc[1]}" if cc else "an unknown architecture"


def choose_invokeai_switch(facts: Facts, use: str | None = None) -> SwitchChoice:
    """InvokeAI's own `attention_backend` where its kernel table serves every NVIDIA GPU here;
    sagedoctor's hook where it has none for one of them. `use` ("app" | "sagedoctor", from
    --use) overrides, and the reason says what the override costs."""
    gpus = [g for g in (facts.gpu.gpus if facts.gpu else ()) if g.vendor == "nvidia"]
    torch = facts.target.torch if facts.target else None
    cuda = torch.cuda if torch else None
    uncovered = [g for g in gpus if invokeai_kernel(g.compute_capability, cuda) is None]
    if uncovered:
        names = ", ".join(f"{g.name} ({_sm(g)})" for g in uncovered)
        gap = (f"InvokeAI's own scope has no kernel for {names}: it logs 'unavailable' and "
               "stays on SDPA")
        if use == "app":
            return SwitchChoice("InvokeAI", "app", f"--use app: {gap}, so nothing is faster "
                                "there", forced=True, app_serves=False)
        return SwitchChoice("InvokeAI", "sagedoctor", f"{gap}; sagedoctor's start-up hook "
                            "routes instead", forced=use == "sagedoctor", app_serves=False)
    if not gpus:
        served = "no NVIDIA GPU is known here"
    else:
        served = "; ".join(f"{g.name} ({_sm(g)}) with its "
                           f"{invokeai_kernel(g.compute_capability, cuda)} kernel" for g in gpus)
    measured = invokeai_rule_at_shapes(facts)
    slower = [s for s in measured if s.speedup < 1.0]
    if slower:
        worst = min(slower, key=lambda s: s.speedup)
        cost = (f"InvokeAI's rule would send {worst.shape} ({worst.tokens} tokens) to "
                f"SageAttention, and verify measured the kernel there ({worst.kernel}) at "
                f"{worst.speedup:.2f}x SDPA on {worst.name}{_other_kernel(worst, cuda)}" + (
                    f" (and {', '.join(_measured(s) for s in slower if s is not worst)})"
                    if len(slower) > 1 else ""))
        if use == "app":
            return SwitchChoice("InvokeAI", "app", f"--use app: {cost}", forced=True)
        them = "them" if len(slower) > 1 else "it"
        return SwitchChoice("InvokeAI", "sagedoctor", f"{cost}; sagedoctor's hook keeps {them} "
                            "on SDPA", forced=use == "sagedoctor")
    agree = ("; verify measured its shapes faster here: "
             + ", ".join(_measured(s) for s in measured)) if measured else \
        "; no verify measurements at its shapes yet"
    if use == "sagedoctor":
        return SwitchChoice("InvokeAI", "sagedoctor", "--use sagedoctor: sagedoctor's start-up "
                            f"hook routes instead of InvokeAI's own kernel table ({served})",
                            forced=True)
    return SwitchChoice("InvokeAI", "app", f"InvokeAI's own kernel table serves {served}"
                        + agree, forced=use == "app")
