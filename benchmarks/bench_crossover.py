"""A dense, independent sweep of SDPA against every correct SageAttention kernel on this GPU,
compared with the decisions `sagedoctor verify` stored for the venv.

Every 1024 tokens from 4096 to 32768, bf16 and fp16, head sizes 64 and 128, 10, 24 and 40
heads (10 heads at batch 2, as SDXL runs with classifier-free guidance; the others at batch 1).
Timing is deliberately not verify's: bursts of back-to-back calls between two host clock reads
with one synchronisation, both paths alternating first; per-call medians. A burst lasts at least
`--burst-s` seconds (0.2 by default; 0 for a fixed `--burst` count), so each path runs alone
long enough for a GPU at its power limit to clock it by its own draw, as a denoising loop
does (docs/measurement.md); `--chosen-only` times SDPA against just the runtime's kernel.
Each kernel the runtime's registry offers for the GPU is checked against fp32 SDPA first;
wrong ones are reported and not timed.

For each point the kernel the runtime would use (the first correct one in its order) is
judged: "route" when its speed-up is at least the margin (1.03), "sdpa" below 1.00, a tie in
between. A stored decision disagrees when it routes a point judged "sdpa" or keeps SDPA at a
point judged "route"; ties never count. The disagreements are listed; exit 0 either way.

    python benchmarks/bench_crossover.py [--samples 3] [--burst 3] [--burst-s 0.2]
        [--chosen-only] [--json FILE]
        [--calibration FILE] [--dtypes bfloat16,float16] [--head-dims 64,128]
        [--heads 10,24,40] [--lengths 4096:32768:1024]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any


def _runtime() -> Any:
    try:
        import sagedoctor_runtime as runtime  # the bundled copy, as users run it
    except ImportError:
        from sagedoctor import runtime
    return runtime


def lengths(text: str) -> list[int]:
    start, stop, step = (int(x) for x in text.split(":"))
    return list(range(start, stop + 1, step))


def judge(speedup: float, margin: float) -> str:
    if speedup >= margin:
        return "route"
    if speedup < 1.0:
        return "sdpa"
    return "tie"


def disagrees(stored_route: bool, verdict: str) -> bool:
    return (stored_route and verdict == "sdpa") or (not stored_route and verdict == "route")


def crossover(points: list[tuple[int, str]]) -> int | None:
    """Shortest length from which every longer one is judged "route"."""
    best = None
    for tokens, verdict in sorted(points, reverse=True):
        if verdict != "route":
            break
        best = tokens
    return best


def burst_calls(one_call_s: float, burst: int, burst_s: float) -> int:
    """Calls per burst: at least `burst`, and enough to last `burst_s` seconds."""
    if burst_s > 0 and one_call_s > 0:
        return max(burst, min(100_000, math.ceil(burst_s / one_call_s)))
    return burst


def burst_time(fn: Callable[[], Any], sync: Callable[[], None], burst: int) -> float:
    sync()
    started = time.perf_counter()
    for _ in range(burst):
        fn()
    sync()
    return (time.perf_counter() - started) / burst


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--burst", type=int, default=3)
    parser.add_argument("--burst-s", type=float, default=0.2,
                        help="each burst lasts at least this long (0: exactly --burst calls)")
    parser.add_argument("--chosen-only", action="store_true",
                        help="time SDPA against the runtime's kernel only")
    parser.add_argument("--lengths", type=lengths, default=lengths("4096:32768:1024"))
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--heads", default="10,24,40")
    parser.add_argument("--calibration", metavar="FILE",
                        help="stored decisions (default: the venv's, as the runtime reads them)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F

    runtime = _runtime()
    name = runtime.__name__
    accuracy = importlib.import_module(f"{name}.accuracy")
    decisions = importlib.import_module(f"{name}.decisions")
    measure = importlib.import_module(f"{name}.measure")
    registry = importlib.import_module(f"{name}.registry").default_registry()
    router_mod = importlib.import_module(f"{name}.router")
    path = args.calibration or router_mod.calibration_path()
    stored = router_mod.load_current_calibration(path)
    margin = measure.FULL.with_env().margin
    thresholds = accuracy.Thresholds.from_env()

    device = torch.device("cuda", 0)
    major, minor = torch.cuda.get_device_capability(device)
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    gpu = decisions.gpu_identity(str(uuid) if uuid else None, torch.cuda.get_device_name(device),
                                 f"{major}.{minor}", 0)
    n_stored = len(stored.gpus[gpu].decisions) if gpu in stored.gpus else 0
    print(f"{torch.cuda.get_device_name(device)} ({gpu}), torch {torch.__version__}; margin "
          f"{margin}; {args.samples} samples of {args.burst} calls"
          + (f" or {args.burst_s} s" if args.burst_s > 0 else "") + " per path and point; "
          f"stored decisions for this GPU: {n_stored} ({path})")
    sync = torch.cuda.synchronize
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    compared = 0
    disagreements: list[str] = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for d in (int(x) for x in args.head_dims.split(",")):
            kernels = []
            g = torch.Generator(device=device).manual_seed(0)
            check = [torch.randn(1, 8, 4096, d, device=device, generator=g).to(dtype)
                     for _ in range(3)]
            reference = F.scaled_dot_product_attention(check[0].float(), check[1].float(),
                                                       check[2].float())
            for spec in registry.candidates("cuda", (major, minor), dtype_name, d):
                try:
                    fn = registry.load(spec)
                    result = accuracy.compare(fn(*check, is_causal=False, scale=None),
                                              reference)
                    ok = result.passes(thresholds)
                    why = f"cos {result.cosine:.5f}"
                except Exception as exc:  # a kernel that fails is reported, not timed
                    ok, why = False, f"{type(exc).__name__}: {exc}"[:120]
                print(f"  {dtype_name} D{d} {spec.name}: {'correct' if ok else 'WRONG'} ({why})")
                if ok:
                    kernels.append((spec.name, fn))
            del check, reference
            if not kernels:
                continue
            chosen = kernels[0][0]  # the runtime's pick: first correct one in its order
            if args.chosen_only:
                kernels = kernels[:1]
            for heads in (int(x) for x in args.heads.split(",")):
                batch = 2 if heads == 10 else 1
                points: list[tuple[int, str]] = []
                line = []
                for tokens in args.lengths:
                    q, k, v = (torch.randn(batch, heads, tokens, d, device=device, dtype=dtype)
                               for _ in range(3))
                    paths: dict[str, Callable[[], Any]] = {
                        "sdpa": partial(F.scaled_dot_product_attention, q, k, v)}
                    for kname, fn in kernels:
                        paths[kname] = partial(fn, q, k, v, is_causal=False, scale=None)
                    times: dict[str, list[float]] = {p: [] for p in paths}
                    order = list(paths)
                    calls = {}
                    for p in order:
                        paths[p]()  # warm: the first call of a shape compiles or allocates
                        calls[p] = burst_calls(burst_time(paths[p], sync, 1), args.burst,
                                               args.burst_s)
                    for sample in range(args.samples):
                        for p in order if sample % 2 == 0 else reversed(order):
                            times[p].append(burst_time(paths[p], sync, calls[p]))
                    median = {p: statistics.median(t) for p, t in times.items()}
                    speedups = {p: median["sdpa"] / median[p] for p in paths if p != "sdpa"}
                    verdict = judge(speedups[chosen], margin)
                    points.append((tokens, verdict))
                    key = decisions.shape_key(dtype_name, d, batch * heads, tokens, tokens,
                                              False)
                    decision = stored.decision(gpu, key)
                    row: dict[str, Any] = {
                        "dtype": dtype_name, "head_dim": d, "batch": batch, "heads": heads,
                        "tokens": tokens, "sdpa_ms": median["sdpa"] * 1e3,
                        "speedups": speedups, "chosen": chosen, "verdict": verdict,
                        "stored": None}
                    if decision is not None and decision.kernel == chosen:
                        compared += 1
                        row["stored"] = {"route": decision.route, "speedup": decision.speedup,
                                         "source": decision.source}
                        if disagrees(decision.route, verdict):
                            row["disagrees"] = True
                            disagreements.append(
                                f"{dtype_name} D{d} {batch}x{heads} {tokens}: stored "
                                f"{'route' if decision.route else 'sdpa'} "
                                f"({decision.speedup:.2f}x, {decision.source}), measured "
                                f"{speedups[chosen]:.2f}x")
                    rows.append(row)
                    line.append(f"{tokens // 1024}k {speedups[chosen]:.2f}"
                                + ("*" if row.get("disagrees") else ""))
                    del q, k, v
                cross = crossover(points)
                best = {kname: max(r["speedups"][kname] for r in rows
                                   if (r["dtype"], r["head_dim"], r["heads"])
                                   == (dtype_name, d, heads))
                        for kname, _ in kernels}
                summary.append({"dtype": dtype_name, "head_dim": d, "batch": batch,
                                "heads": heads, "chosen": chosen, "crossover": cross,
                                "best_speedup": best})
                print(f"{dtype_name} D{d} {batch}x{heads} {chosen}: routes from "
                      f"{cross if cross else 'never'}; best "
                      + ", ".join(f"{n} {s:.2f}x" for n, s in best.items()))
                for i in range(0, len(line), 10):
                    print("    " + "  ".join(line[i:i + 10]))
    print(f"stored decisions compared: {compared}; disagreements: {len(disagreements)}"
          + (" (* above)" if disagreements else ""))
    for text in disagreements:
        print(f"  disagrees: {text}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"gpu": gpu, "margin": margin, "summary": summary, "rows": rows,
                       "compared": compared, "disagreements": disagreements}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
