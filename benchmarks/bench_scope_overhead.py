"""What the scope adds to an SDPA call that stays on SDPA, on the CPU, side by side in one run.

Small bf16 CPU tensors (B=1, H=2, S=32, D=64: not on a GPU, so ineligible) are run through
plain `F.scaled_dot_product_attention` and through the patched one inside `sage_scope()`, in
short rounds whose order alternates (plain-scoped, scoped-plain) so drift and warm-up hit both
alike; the added time is the median of the paired differences. For scale, the same run
measures a bare Python wrapper around SDPA: no Python-level patch can cost less. Target: <= 2 us.

Second case, the dearer path: an eligible call (the same tensors, with a stand-in kernel
registered for the CPU and the router's shortest length lowered to 16 so that S=32 counts)
that a stored decision keeps on SDPA ("SDPA faster here"), as SDXL's and FLUX-1024's calls are
on an H100: the router's whole path for such a call, then SDPA. Target: <= 8 us (at a
0.45 ms SDXL block, 2% of it).

Third case, a real model's call mix: SDXL's UNet at 1024x1024, batch 2 (CFG), one forward's
140 SDPA calls in its order (per transformer block a self-attention over 4096 or 1024 tokens,
then a cross-attention over 77 text tokens), every one kept on SDPA as on an H100: the stored
decisions route from 16384 tokens, so every call lies below the router's floor (8193) and is
settled by its length alone. The tensors carry SDXL's
shapes as zero-stride views (no memory), and SDPA itself is replaced by a stand-in that returns
at once on both sides, so what is timed is the router alone. Target: <= 3 us per call (140
calls in a 68.6 ms forward: 0.6%). `--device cuda` runs the same mix with CUDA tensors (the
attributes of a CUDA tensor cost more to read than a CPU one's).

    python benchmarks/bench_scope_overhead.py [--calls 4000] [--rounds 31] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

from sagedoctor.runtime import Router, sage_scope
from sagedoctor.runtime.decisions import Calibration, Decision, shape_key
from sagedoctor.runtime.registry import KernelRegistry, KernelSpec

ELIGIBLE_TARGET_US = 8.0
MIX_TARGET_US = 3.0


def per_call_us(fn: object, args: tuple[object, ...], calls: int) -> float:
    call = fn  # bound locally: the loop measures the call, not the lookup
    started = time.perf_counter()
    for _ in range(calls):
        call(*args)  # type: ignore[operator]
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument("--device", default="cpu", help="the SDXL mix's tensors' device")
    parser.add_argument("--mix-only", action="store_true", help="only the SDXL call mix")
    args = parser.parse_args()
    if args.mix_only:
        sys.exit(0 if sdxl_mix(args) <= MIX_TARGET_US else 1)
    torch.set_num_threads(1)
    q = torch.randn(1, 2, 32, 64).to(torch.bfloat16)
    router = Router()  # the real registry: SageAttention kernels, none reachable on a CPU
    plain_sdpa = F.scaled_dot_product_attention

    def bare(query: Any, key: Any, value: Any, attn_mask: Any = None,
             dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
             enable_gqa: bool = False, **kwargs: Any) -> Any:
        return plain_sdpa(query, key, value)

    plain, scoped, wrapped = paired_rounds(router, plain_sdpa, bare, (q, q, q), args)
    p, s = statistics.median(plain), statistics.median(scoped)
    paired = statistics.median(b - a for a, b in zip(plain, scoped, strict=True))
    floor = statistics.median(wrapped)
    print(f"{args.rounds} rounds x {args.calls} calls, torch {torch.__version__}")
    print(f"plain SDPA        {p:7.2f} us/call")
    print(f"inside sage_scope {s:7.2f} us/call")
    print(f"added             {paired:7.2f} us/call  (median of paired rounds; target <= 2.00)")
    print(f"ratio             {s / p:7.3f}")
    print(f"a bare Python wrapper adds {floor:.2f} us/call in the same run (the floor)")
    print(f"stats: {router.stats()['summary']}")

    kept = kept_on_sdpa_router(plain_sdpa, q)
    plain2, scoped2, _ = paired_rounds(kept, plain_sdpa, bare, (q, q, q), args)
    paired2 = statistics.median(b - a for a, b in zip(plain2, scoped2, strict=True))
    summary = kept.stats()["summary"]
    print(f"eligible, kept on SDPA by a stored decision: plain "
          f"{statistics.median(plain2):.2f} us/call, added {paired2:.2f} us/call "
          f"(target <= {ELIGIBLE_TARGET_US:.2f})")
    print(f"stats: {summary}")
    if "SDPA faster here" not in summary:
        sys.exit("the eligible case did not take the stored-decision path")
    mix = sdxl_mix(args)
    sys.exit(0 if paired <= 2.0 and paired2 <= ELIGIBLE_TARGET_US and mix <= MIX_TARGET_US
             else 1)


def sdxl_calls(device: Any) -> list[tuple[Any, Any, Any]]:
    """One forward of SDXL's UNet at 1024x1024, batch 2: its attention calls in order, as
    zero-stride views with the real shapes (bf16, head size 64)."""
    base = torch.zeros(1, dtype=torch.bfloat16, device=device)

    def view(b: int, h: int, s: int) -> Any:
        return base.expand(b, h, s, 64)

    calls = []
    # (tokens, heads, transformer blocks): down 64x64 (2 attentions x 2 layers), down 32x32
    # (2 x 10), mid (1 x 10), up 32x32 (3 x 10), up 64x64 (3 x 2)
    for tokens, heads, blocks in ((4096, 10, 4), (1024, 20, 20), (1024, 20, 10),
                                  (1024, 20, 30), (4096, 10, 6)):
        for _ in range(blocks):
            q = view(2, heads, tokens)
            calls.append((q, q, q))  # self-attention
            text = view(2, heads, 77)
            calls.append((q, text, text))  # cross-attention to the prompt's 77 tokens
    assert len(calls) == 140
    return calls


def sdxl_mix(args: argparse.Namespace) -> float:
    """The router's added time per call over SDXL's call mix, all kept on SDPA (see above)."""
    device = torch.device(args.device)
    calls = sdxl_calls(device)

    def stand_in_sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None,
                      dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
                      **kwargs: Any) -> Any:
        return query

    def kernel_loader() -> Any:
        def kernel(q: Any, k: Any, v: Any, *, is_causal: bool = False,
                   scale: float | None = None) -> Any:
            return F.scaled_dot_product_attention(q.contiguous(), k.contiguous(),
                                                  v.contiguous())
        return kernel

    registry = KernelRegistry()
    registry.register(KernelSpec("stand_in", "stand-in", kernel_loader,
                                 device_type=device.type))
    calibration = Calibration()
    gpu = "cpu" if device.type == "cpu" else None
    router = Router(registry, calibration=calibration)
    if gpu is None:  # the router keys CUDA decisions by the GPU's identity
        gpu = router._gpu_of(calls[0][0])[0]
    # as a verify on an H100 stores them: SDPA up to 8192 tokens, the kernel from 16384
    for heads in (10, 20):
        for tokens, route in ((1024, False), (4096, False), (8192, False), (16384, True)):
            calibration.put(gpu, shape_key("bfloat16", 64, 2 * heads, tokens, tokens, False),
                            Decision(route, "stand_in", 1.1 if route else 0.7, 0.6, 1.2, 9,
                                     "verify"))
    router.calibration = calibration  # as loaded at start-up: the router's floor follows it
    real = F.scaled_dot_product_attention
    rounds = max(11, args.rounds // 4)
    repeat = max(1, args.calls // len(calls))
    plain: list[float] = []
    scoped: list[float] = []
    wrapped: list[float] = []

    def bare(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: Any = None, enable_gqa: bool = False,
             **kwargs: Any) -> Any:
        return stand_in_sdpa(query, key, value)

    def run(fn: Any) -> float:
        started = time.perf_counter()
        for _ in range(repeat):
            for q, k, v in calls:
                fn(q, k, v)
        return (time.perf_counter() - started) / (repeat * len(calls)) * 1e6

    F.scaled_dot_product_attention = stand_in_sdpa  # type: ignore[assignment]
    try:
        with sage_scope(router):  # first pass: the first-call check and the memo, untimed
            for q, k, v in calls:
                F.scaled_dot_product_attention(q, k, v)
        for i in range(rounds):
            for way in (("plain", "scoped") if i % 2 == 0 else ("scoped", "plain")):
                if way == "plain":
                    plain.append(run(stand_in_sdpa))
                else:
                    with sage_scope(router):
                        scoped.append(run(F.scaled_dot_product_attention))
            wrapped.append(run(bare) - plain[-1])
    finally:
        F.scaled_dot_product_attention = real
    added = statistics.median(b - a for a, b in zip(plain, scoped, strict=True))
    summary = router.stats()["summary"]
    floor = statistics.median(wrapped)
    print(f"SDXL 1024x1024 call mix on {device} (140 calls a forward, {rounds} rounds x "
          f"{repeat} forwards): the router adds {added:.2f} us/call "
          f"(target <= {MIX_TARGET_US:.2f}); {added * 140 / 1e3:.3f} ms a forward; a bare "
          f"Python wrapper adds {floor:.2f} us/call in the same run")
    print(f"stats: {summary}")
    if router.stats()["routed"] or "SDPA faster here" not in summary:
        sys.exit("the SDXL mix did not stay on SDPA by its stored decisions")
    return added


def paired_rounds(router: Router, plain_sdpa: Any, bare: Any, args3: tuple[Any, ...],
                  args: argparse.Namespace) -> tuple[list[float], list[float], list[float]]:
    plain: list[float] = []
    scoped: list[float] = []
    wrapped: list[float] = []
    for i in range(args.rounds):
        def run_plain() -> None:
            plain.append(per_call_us(plain_sdpa, args3, args.calls))

        def run_scoped() -> None:
            with sage_scope(router):
                scoped.append(per_call_us(F.scaled_dot_product_attention, args3, args.calls))

        for step in ((run_plain, run_scoped) if i % 2 == 0 else (run_scoped, run_plain)):
            step()
        wrapped.append(per_call_us(bare, args3, args.calls) - plain[-1])
    return plain, scoped, wrapped


def kept_on_sdpa_router(plain_sdpa: Any, q: Any) -> Router:
    """A router with a CPU stand-in kernel (SDPA itself, so the first-call check passes) and a
    stored decision that SDPA is faster at q's shape."""
    def load() -> Any:
        def kernel(q: Any, k: Any, v: Any, *, is_causal: bool = False,
                   scale: float | None = None) -> Any:
            return plain_sdpa(q, k, v, is_causal=is_causal, scale=scale)
        return kernel

    registry = KernelRegistry()
    registry.register(KernelSpec("cpu_stand_in", "cpu", load, device_type="cpu"))
    batch, heads, length, head_dim = q.shape
    calibration = Calibration()
    calibration.put("cpu", shape_key("bfloat16", head_dim, batch * heads, length, length, False),
                    Decision(False, "cpu_stand_in", 0.5, 0.4, 0.6, 5, "verify"))
    return Router(registry, calibration=calibration, min_seq_len=16)


if __name__ == "__main__":
    main()
