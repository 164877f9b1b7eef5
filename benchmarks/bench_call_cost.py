"""What one SDPA call kept on SDPA costs the host inside a real model, side by side in one run:
through the scope's router, through a bare Python wrapper, and with nothing in between.

bench_scope_overhead times the router in a loop of calls, where its few objects stay in the
CPU's caches; inside a model much other code runs between two attention calls, and the same
lines cost several times as much (SDXL 1024 on an H100: 0.5 us a call in the loop, 3-7 us in
the model by the forwards' host time). This benchmark times each call where it happens: a
timer around the function in SDPA's place, in forwards of diffusers' real model classes
(bench_models' cases), with SDPA itself replaced by a stand-in that returns the query at once,
so what is timed is the Python path alone. Paths rotate per round; per path the median over
rounds of the mean per call; printed: the router's and the wrapper's cost over nothing, per
call and per forward.

On a GPU the router is the one `sagedoctor verify` left in this venv (run it first: its
decisions put the floor where calls are settled by their length). `--tiny` runs tiny configs
on the CPU with a router whose stored decisions keep every call on SDPA below its floor, as
the GPU's keep SDXL's; `--synthetic` uses such a router on the GPU too (no SageAttention or
verify needed: a call below the floor never reaches a kernel). `--baseline DIR` adds the
router of another sagedoctor tree (DIR holds its `sagedoctor` package, loaded under another
name) to the same rounds: two processes differ by more than the routers do (the same path
measured 0.9 and 1.4 us a call in two processes on one H100 host).

    python benchmarks/bench_call_cost.py [--only sdxl-1024] [--rounds 21] [--baseline DIR]
                                         [--synthetic]
    python benchmarks/bench_call_cost.py --tiny
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import sagedoctor.runtime
from sagedoctor.runtime import Router, get_router, sage_scope

sys.path.insert(0, str(Path(__file__).resolve().parent))
models: Any = importlib.import_module("bench_models")  # its cases, models and inputs


def stand_in(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: Any = None, **kwargs: Any) -> Any:
    return query  # the output's shape (the value's head size is the query's in these models)


def bare(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
         is_causal: bool = False, scale: Any = None, enable_gqa: bool = False,
         **kwargs: Any) -> Any:
    if attn_mask is None and not dropout_p and not is_causal and scale is None \
            and not enable_gqa and not kwargs:
        return stand_in(query, key, value)
    return stand_in(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale, **kwargs)


def stand_in_router(device: str, dtype: torch.dtype, lengths: range,
                    runtime: Any = sagedoctor.runtime) -> Any:
    """A router with a stand-in kernel for `device` whose stored decisions put the floor (see
    route_floor) above every length in `lengths`: the tiny cases' calls are settled there.
    `runtime`: a runtime package, ours or another tree's (its classes are its own)."""
    decisions = importlib.import_module(f"{runtime.__name__}.decisions")

    def load() -> Callable[..., Any]:
        def kernel(q: Any, k: Any, v: Any, *, is_causal: bool = False,
                   scale: float | None = None) -> Any:
            return stand_in(q, k, v)
        return kernel

    registry = runtime.KernelRegistry()
    registry.register(runtime.KernelSpec("stand_in", "stand-in", load, device_type=device))
    calibration = decisions.Calibration()
    name = str(dtype).rpartition(".")[2]
    for head_dim in (8, 16, 32, 64, 128):
        for bucket in (1, 2, 4, 8, 16, 32, 64):
            for tokens, route in ((lengths.stop // 2, False), (lengths.stop, True)):
                key = decisions.shape_key(name, head_dim, bucket, tokens, tokens, False)
                calibration.put(device, key, decisions.Decision(
                    route, "stand_in", 1.1 if route else 0.7, 0.6, 1.2, 9, "verify"))
    return runtime.Router(registry, calibration=calibration, min_seq_len=lengths.start)


def baseline_runtime(folder: Path) -> Any:
    """The runtime package of the sagedoctor tree in `folder`, as `sagedoctor_baseline` (its
    imports within the package are relative)."""
    package = folder / "sagedoctor"
    spec = importlib.util.spec_from_file_location(
        "sagedoctor_baseline", package / "__init__.py", submodule_search_locations=[str(package)])
    if spec is None or spec.loader is None:
        raise SystemExit(f"no sagedoctor package in {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sagedoctor_baseline"] = module
    spec.loader.exec_module(module)
    return importlib.import_module("sagedoctor_baseline.runtime")


def per_call_us(model: Any, args: dict[str, Any], inner: Callable[..., Any],
                scope: Scoped | None) -> tuple[float, int]:
    """One forward with a timer around `inner` in SDPA's place: (mean us a call, calls)."""
    spent = [0, 0]
    clock = time.perf_counter_ns

    def timed(*a: Any, **kw: Any) -> Any:
        began = clock()
        out = inner(*a, **kw)
        spent[0] += clock() - began
        spent[1] += 1
        return out

    F.scaled_dot_product_attention = stand_in  # type: ignore[assignment]
    with torch.inference_mode():
        if scope is None:
            F.scaled_dot_product_attention = timed
            model(**args, return_dict=False)
        else:
            with scope.scope(scope.router):  # installs the router over the stand-in
                F.scaled_dot_product_attention = timed
                model(**args, return_dict=False)
                F.scaled_dot_product_attention = stand_in  # type: ignore[assignment]
    return spent[0] / max(spent[1], 1) / 1e3, spent[1]


class Scoped:
    """A router and the scope function of its runtime (ours, or a baseline's)."""

    def __init__(self, router: Any, scope: Callable[..., Any]) -> None:
        self.router = router
        self.scope = scope
        F.scaled_dot_product_attention = stand_in  # type: ignore[assignment]
        with scope(router):  # the router's function, over the stand-in
            self.patched = F.scaled_dot_product_attention


def run_case(case: Any, device: torch.device, dtype: torch.dtype, tiny: bool,
             rounds: int, router: Router, baseline: Any = None) -> dict[str, Any]:
    model = models.build(case, device, dtype, tiny)
    args = models.inputs(case, device, dtype, tiny)
    real = F.scaled_dot_product_attention
    try:
        ours = Scoped(router, sage_scope)
        ways: dict[str, tuple[Callable[..., Any], Scoped | None]] = {
            "none": (stand_in, None), "wrapper": (bare, None), "scope": (ours.patched, ours)}
        if baseline is not None:
            theirs = Scoped(baseline, baseline_scope(baseline))
            ways["baseline"] = (theirs.patched, theirs)
        before = router.stats()
        for inner, scope in ways.values():  # untimed: the scope's first forward decides
            per_call_us(model, args, inner, scope)
        calls = 0
        times: dict[str, list[float]] = {name: [] for name in ways}
        names = list(ways)
        gc.collect()
        gc.disable()
        try:
            for i in range(rounds):
                for name in names[i % len(names):] + names[:i % len(names)]:
                    us, calls = per_call_us(model, args, *ways[name])
                    times[name].append(us)
        finally:
            gc.enable()
        after = router.stats()
    finally:
        F.scaled_dot_product_attention = real
        # the routers' next scopes must wrap the real SDPA again
        for each in (router, baseline):
            if each is not None:
                each.original = real
    medians = {name: statistics.median(t) for name, t in times.items()}
    over = {name: medians[name] - medians["none"] for name in medians}
    del model, args
    return {"case": case.name, "rounds": rounds, "calls_per_forward": calls,
            "us_per_call": {name: round(us, 3) for name, us in medians.items()},
            "router_over_none_us": round(over["scope"], 3),
            "wrapper_over_none_us": round(over["wrapper"], 3),
            "router_over_wrapper_us": round(over["scope"] - over["wrapper"], 3),
            "router_ms_per_forward": round(over["scope"] * calls / 1e3, 4),
            "router": models._delta(before, after),
            **({"baseline_over_wrapper_us": round(over["baseline"] - over["wrapper"], 3)}
               if baseline is not None else {})}


def baseline_scope(router: Any) -> Callable[..., Any]:
    return sys.modules[type(router).__module__].sage_scope


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="sdxl-1024", help="comma-separated case names")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--tiny", action="store_true", help="tiny configs on the CPU")
    parser.add_argument("--json", default=None, help="write every number here")
    parser.add_argument("--synthetic", action="store_true",
                        help="stand-in decisions that keep every call below the floor")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a folder holding another sagedoctor package: its router too")
    args = parser.parse_args()
    tiny = args.tiny
    device = torch.device("cpu" if tiny else "cuda")
    dtype = torch.bfloat16
    cases = models.TINY_CASES if tiny else models.CASES
    if args.only and not tiny:
        wanted = set(args.only.split(","))
        cases = tuple(c for c in cases if c.name in wanted)
    base = baseline_runtime(args.baseline) if args.baseline else None
    results = []
    synthetic = tiny or args.synthetic
    lengths = range(16, 1 << 20)
    for case in cases:
        router = stand_in_router(device.type, dtype, lengths) if synthetic else get_router()
        baseline = None
        if base is not None:  # the same decisions, in the other tree's router
            baseline = stand_in_router(device.type, dtype, lengths, base) if synthetic \
                else base.get_router()
        result = run_case(case, device, dtype, tiny, args.rounds, router, baseline)
        results.append(result)
        print(json.dumps(result), flush=True)
        print(f"{case.name}: {result['calls_per_forward']} SDPA calls a forward; the router "
              f"{result['router_over_none_us']:.2f} us a call over nothing, a bare wrapper "
              f"{result['wrapper_over_none_us']:.2f} us; the router's own share "
              f"{result['router_over_wrapper_us']:.2f} us a call, "
              f"{result['router_ms_per_forward']:.3f} ms a forward ({result['router']})"
              + (f"; the baseline's {result['baseline_over_wrapper_us']:.2f} us a call"
                 if baseline is not None else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"device": torch.cuda.get_device_name(device) if not tiny else "cpu",
                       "torch": torch.__version__, "results": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
