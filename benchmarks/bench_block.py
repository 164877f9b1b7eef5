"""The scope inside a model-like transformer block, timed sustained: LayerNorm, the qkv
projection, attention, the output projection and an MLP, as in a diffusion transformer's
denoising loop, at the app shapes. Three ways to run attention in the same block: PyTorch
SDPA, direct `sageattn()`, and SDPA inside the routing scope (which sends the call wherever
the stored decisions say). Each way runs alone, first untimed for `--settle` seconds (a GPU
at its power limit sets its clock by the running load, and follows a change of load with a
lag: a way timed right after another way's different load pays that lag, as a denoising loop
that runs one path for many steps never does), then timed for `--seconds`. The ways' order
changes per round so that each way follows every other way equally often (a Williams design);
the medians per block are compared. `--control` adds a second, identical direct-SDPA way: its
ratio to the first is the bench's own floor, what two identical ways differ by.
`--order rotate --settle 0` is the earlier arrangement (each way always after the same one).
Target (issue 21): scope / best <= 1.03 at every shape, counting `sageattn()` only where its
output is correct.

    python benchmarks/bench_block.py [--seconds 0.4] [--settle 0.25] [--rounds N]
                                     [--order balanced|rotate] [--control] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from typing import Any

SHAPES = {  # name: (batch, heads, tokens, head_dim)
    "sdxl-1024": (2, 10, 4096, 64),
    "flux-1024": (1, 24, 4608, 128),
    "flux-1536": (1, 24, 9728, 128),
    "flux-2048": (1, 24, 16896, 128),
    "wan-720p": (1, 40, 32760, 128),
}


def balanced_orders(ways: int) -> list[list[int]]:
    """Orders of `ways` items in which each item directly follows every other item equally
    often (Williams 1949): one Latin square for an even count, it and its mirror for an odd
    one. Rounds run these orders in turn, the last way of one round before the first of the
    next."""
    first = [0]
    low, high = 1, ways - 1
    while len(first) < ways:
        first.append(low)
        low += 1
        if len(first) < ways:
            first.append(high)
            high -= 1
    square = [[(x + shift) % ways for x in first] for shift in range(ways)]
    return square if ways % 2 == 0 else square + [row[::-1] for row in square]


def rotated_orders(ways: int) -> list[list[int]]:
    """The earlier arrangement: each round starts one way later, so each way always follows
    the same other way."""
    return [list(range(shift, ways)) + list(range(shift)) for shift in range(ways)]


def _runtime() -> Any:
    try:
        import sagedoctor_runtime as runtime  # the bundled copy, as users run it
    except ImportError:
        from sagedoctor import runtime
    return runtime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=0.4, help="timed, per way and round")
    parser.add_argument("--settle", type=float, default=0.25,
                        help="untimed, per way and round, before its timed window")
    parser.add_argument("--rounds", type=int, default=0,
                        help="default: one pass over the orders (6 for 3 ways, 4 with --control)")
    parser.add_argument("--order", choices=("balanced", "rotate"), default="balanced")
    parser.add_argument("--control", action="store_true",
                        help="add a second direct-SDPA way, to show the bench's own floor")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F
    from sageattention import sageattn

    runtime = _runtime()
    router = runtime.get_router()
    dtype = torch.bfloat16
    sdpa = router.original or F.scaled_dot_product_attention  # the real one, hook or not
    rows = []
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    print(f"settle {args.settle} s, timed {args.seconds} s per way and round, {args.order} order")
    control_head = f" {'SDPA2/SDPA':>10}" if args.control else ""
    print(f"{'shape':<10} {'SDPA ms':>8} {'sageattn ms':>11} {'scope ms':>9} {'scope/best':>10}"
          f"{control_head}  routed")
    for name, (b, h, s, d) in SHAPES.items():
        width = h * d
        norm1 = torch.nn.LayerNorm(width, device="cuda", dtype=dtype)
        norm2 = torch.nn.LayerNorm(width, device="cuda", dtype=dtype)
        qkv = torch.nn.Linear(width, 3 * width, device="cuda", dtype=dtype)
        proj = torch.nn.Linear(width, width, device="cuda", dtype=dtype)
        mlp_in = torch.nn.Linear(width, 4 * width, device="cuda", dtype=dtype)
        mlp_out = torch.nn.Linear(4 * width, width, device="cuda", dtype=dtype)
        x = torch.randn(b, s, width, device="cuda", dtype=dtype)

        def block(attention: Any, x: Any = x, b: int = b, s: int = s, h: int = h,
                  d: int = d, width: int = width, norm1: Any = norm1, norm2: Any = norm2,
                  qkv: Any = qkv, proj: Any = proj, mlp_in: Any = mlp_in,
                  mlp_out: Any = mlp_out) -> Any:
            q, k, v = qkv(norm1(x)).view(b, s, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
            out = attention(q, k, v).transpose(1, 2).reshape(b, s, width)
            y = x + proj(out)
            return y + mlp_out(F.gelu(mlp_in(norm2(y)), approximate="tanh"))

        ways: dict[str, Any] = {
            "sdpa": lambda: block(lambda q, k, v: sdpa(q, k, v)),
            "sage": lambda: block(lambda q, k, v: sageattn(q, k, v, tensor_layout="HND")),
            "scope": lambda: block(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
        }
        if args.control:
            ways["sdpa2"] = lambda: block(lambda q, k, v: sdpa(q, k, v))
        names = list(ways)
        orders = (balanced_orders if args.order == "balanced" else rotated_orders)(len(names))
        rounds = args.rounds or len(orders)
        with torch.no_grad():
            reference = block(lambda q, k, v: sdpa(q.float(), k.float(),
                                                    v.float()).to(dtype)).float()
            sage_out = ways["sage"]().float()
            sage_cos = float(F.cosine_similarity(sage_out.flatten(), reference.flatten(), dim=0))
            before = dict(router.stats()["routed"])
            with runtime.sage_scope():
                ways["scope"]()  # the first-call check (and any live timing), untimed
            times: dict[str, list[float]] = {n: [] for n in ways}
            for round_ in range(rounds):
                for way in (names[i] for i in orders[round_ % len(orders)]):
                    with runtime.sage_scope() if way == "scope" else contextlib.nullcontext():
                        fn = ways[way]
                        fn()
                        settled = time.perf_counter()
                        while time.perf_counter() - settled < args.settle:
                            for _ in range(4):
                                fn()
                            torch.cuda.synchronize()
                        torch.cuda.synchronize()
                        calls, started = 0, time.perf_counter()
                        while time.perf_counter() - started < args.seconds:
                            for _ in range(4):
                                fn()
                            calls += 4
                            torch.cuda.synchronize()
                        times[way].append((time.perf_counter() - started) / calls)
        after = router.stats()["routed"]
        routed = {label: n - before.get(label, 0) for label, n in after.items()
                  if n - before.get(label, 0)}
        sdpa_t, sage_t, scope_t = (statistics.median(times[n]) for n in ("sdpa", "sage", "scope"))
        sage_ok = sage_cos >= 0.99
        ratio = scope_t / (min(sdpa_t, sage_t) if sage_ok else sdpa_t)
        target = "SageAttention" if routed else "SDPA"
        row: dict[str, Any] = {
            "shape": name, "b_h_s_d": [b, h, s, d], "sdpa_ms": sdpa_t * 1e3,
            "sageattn_ms": sage_t * 1e3, "scope_ms": scope_t * 1e3, "scope_over_best": ratio,
            "routed_to": target, "sageattn_cosine": sage_cos,
            "times_ms": {n: [t * 1e3 for t in ts] for n, ts in times.items()}}
        control = ""
        if args.control:
            row["sdpa2_over_sdpa"] = statistics.median(times["sdpa2"]) / sdpa_t
            control = f" {row['sdpa2_over_sdpa']:10.3f}"
        rows.append(row)
        print(f"{name:<10} {sdpa_t * 1e3:8.3f} {sage_t * 1e3:11.3f} {scope_t * 1e3:9.3f} "
              f"{ratio:10.3f}{control}  {target}", flush=True)
        del x, reference, sage_out, norm1, norm2, qkv, proj, mlp_in, mlp_out
    print("router:", router.stats()["summary"], router.stats()["measured"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"settings": vars(args), "rows": rows, "stats": router.stats()}, handle,
                      indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
