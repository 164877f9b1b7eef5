"""Diffusion attention shapes on a GPU: plain SDPA, direct `sageattn()`, and the routing scope,
measured side by side in one run. Prints, per shape, the scope's time over the faster of the
other two, counting `sageattn()` only where its output is correct (target: <= 1.03), where
the scope sent the calls, and whether `sageattn()` itself was correct.

Run in a venv with torch, SageAttention and the runtime (bundled by `sagedoctor install`, or
this checkout's `sagedoctor.runtime`). The runtime reads the calibration `sagedoctor verify`
wrote into the venv; without one it times the first calls itself.

    python benchmarks/bench_attention.py [--reps 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from typing import Any

SHAPES = {  # name: (batch, heads, tokens, head_dim)
    "sdxl-1024": (2, 10, 4096, 64),
    "flux-1024": (1, 24, 4608, 128),
    "flux-1536": (1, 24, 9728, 128),  # at the Hopper crossover
    "flux-1792": (1, 24, 13312, 128),  # between two lengths verify measures: timed live
    "flux-2048": (1, 24, 16896, 128),
    "wan-720p": (1, 40, 32760, 128),
    # 16 heads: a batch x heads bucket verify does not sweep, so the router times it live
    # (bounded to about 0.25 s; `measured` in the router's stats)
    "new-1x16": (1, 16, 12000, 128),
}


def _runtime() -> Any:
    try:
        import sagedoctor_runtime as runtime  # the bundled copy, as users run it
    except ImportError:
        from sagedoctor import runtime
    return runtime


BURST = 8  # calls back to back per sample, as a denoising step issues them


def _time(fn: Any, torch: Any, reps: int) -> float:
    """Median per-call time over samples of BURST calls, synchronised once per sample."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(BURST):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / BURST)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, each path once per round in rotating order; medians")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--no-scope", action="store_true",
                        help="call SDPA without a scope: measures a venv switched on by "
                             "`sagedoctor enable` (the start-up hook)")
    args = parser.parse_args()

    import contextlib

    import torch
    import torch.nn.functional as F
    from sageattention import sageattn

    runtime = _runtime()
    compare = importlib.import_module(f"{runtime.__name__}.accuracy").compare
    router = runtime.get_router()
    scope = contextlib.nullcontext if args.no_scope else runtime.sage_scope
    if args.no_scope:  # one small call arms an enabled venv's hook, as an app's first call does
        tiny = torch.zeros(1, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
        F.scaled_dot_product_attention(tiny, tiny, tiny)
        print("start-up hook armed the router:", router.stats()["summary"] and router._global)
    dtype = getattr(torch, args.dtype)
    rows = []
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}, {args.dtype}, runtime "
          f"{runtime.__name__}, stored decisions "
          f"{sum(len(g.decisions) for g in router.calibration.gpus.values()) or 'none'}")
    print(f"{'shape':<10} {'SDPA ms':>8} {'sageattn ms':>11} {'scope ms':>9} {'scope/best':>10} "
          f"{'routed to':<22} {'sageattn() cos':>14}")
    for name, (b, h, s, d) in SHAPES.items():
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
        sdpa = router.original or F.scaled_dot_product_attention  # the real one, hook or not
        reference = sdpa(q.float(), k.float(), v.float())
        auto_cos = compare(sageattn(q, k, v, tensor_layout="HND"), reference).cosine
        before = dict(router.stats()["routed"])

        def scoped(q: Any = q, k: Any = k, v: Any = v) -> Any:
            # Inside the scope, as an app calls it; the scope itself is entered once per
            # generation, below, not per call.
            return F.scaled_dot_product_attention(q, k, v)

        times: dict[str, list[float]] = {"sdpa": [], "sage": [], "scope": []}
        with scope():
            scoped()  # the first-call check and any speed check happen here, untimed
            scope_cos = compare(scoped(), reference).cosine
        paths: dict[str, Any] = {"sdpa": lambda q=q, k=k, v=v, f=sdpa: f(q, k, v),
                                 "sage": lambda q=q, k=k, v=v: sageattn(q, k, v,
                                                                        tensor_layout="HND"),
                                 "scope": scoped}
        for round_ in range(args.rounds):
            # Each path runs alone for a while (as in a denoising loop, where a GPU at its
            # power limit clocks it by its own draw); the order rotates between rounds so
            # no path always follows the same one.
            order = list(paths)[round_ % 3:] + list(paths)[:round_ % 3]
            for name_ in order:
                with scope() if name_ == "scope" else contextlib.nullcontext():
                    times[name_].append(_time(paths[name_], torch, args.reps))
        sdpa_t, sage_t, scope_t = (statistics.median(times[n]) for n in ("sdpa", "sage", "scope"))
        after = router.stats()["routed"]
        routed = {label: n - before.get(label, 0) for label, n in after.items()
                  if n - before.get(label, 0)}
        target = "SageAttention " + ",".join(routed) if routed else "SDPA"
        # The faster of the correct ones: a `sageattn()` that returns garbage is no baseline.
        sage_ok = auto_cos >= 0.99
        ratio = scope_t / (min(sdpa_t, sage_t) if sage_ok else sdpa_t)
        rows.append({"shape": name, "b_h_s_d": [b, h, s, d], "sdpa_ms": sdpa_t * 1e3,
                     "sageattn_ms": sage_t * 1e3, "scope_ms": scope_t * 1e3,
                     "scope_over_best": ratio, "routed_to": target,
                     "sageattn_auto_cosine": auto_cos, "scope_cosine": scope_cos})
        print(f"{name:<10} {sdpa_t * 1e3:8.3f} {sage_t * 1e3:11.3f} {scope_t * 1e3:9.3f} "
              f"{ratio:10.3f} {target:<22} {auto_cos:14.5f}" + ("" if sage_ok else " (wrong)"))
        del q, k, v, reference
    print("router:", router.stats()["summary"], router.stats()["measured"])
    print("verified kernels:", router.stats()["keys"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"rows": rows, "stats": router.stats()}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
