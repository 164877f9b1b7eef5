"""Whole diffusion models, side by side in one run: what each way of calling attention does to
one denoising forward of diffusers' real model classes.

Models (full-size configs, random weights built on the GPU in bf16, nothing downloaded):
`UNet2DConditionModel` with SDXL's config (1024x1024 and 2048x2048, batch 2 as with CFG),
`FluxTransformer2DModel` with FLUX.1-dev's (1024, 1536, 2048), `WanTransformer3DModel` with
Wan2.1-14B's (480p and 720p, 81 frames; 720p with 2 of its 40 identical layers).

Paths, on the same inputs:
- `sdpa`: PyTorch's SDPA, untouched;
- `sage_all`: `sageattn()` on every call without a mask (ComfyUI's --use-sage-attention);
- `fixed_rule`: `sageattn()` where the query has >= 1536 tokens and the keys >= 512
  (InvokeAI's rule), SDPA elsewhere;
- `scope`: `sagedoctor.runtime.sage_scope()` around the forward, with the decisions the last
  `sagedoctor verify` stored in this interpreter's venv (run it first);
- `wrapper`: a bare Python function in place of SDPA that calls it: the floor any Python-level
  router pays (a model that is launch-bound pays it on every call).

Per path: the median time of one forward over rounds whose order rotates (after two untimed
forwards per path: the scope's first one checks its call sites; the cyclic garbage collector
off while timing; where a case repeats, a round's time is the fastest of its `repeat` forwards
back to back: SDXL 1024's 3, as the host's load moves single launch-bound forwards by up to
half), the speed-up against SDPA, scope / best (the scope's median over the
fastest path's; beside it the median of per-round ratios to that path, and the ratio of the
minima), the output's cosine and relative L2
against SDPA's, and the router's summary for one forward. Targets (issue 37): scope / best
<= 1.01 everywhere, and the scope's rel L2 no worse than sage_all's.

Needs diffusers (`pip install sagedoctor[bench]`), torch with CUDA and SageAttention.

    python benchmarks/bench_models.py [--only sdxl-1024,flux-1024] [--rounds N] [--json F]
                                      [--profile]
    python benchmarks/bench_models.py --tiny   # a CPU smoke run: tiny configs, SDPA and scope
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

SDXL: dict[str, Any] = {
    "sample_size": 128, "in_channels": 4, "out_channels": 4,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "block_out_channels": [320, 640, 1280], "layers_per_block": 2,
    "transformer_layers_per_block": [1, 2, 10], "attention_head_dim": [5, 10, 20],
    "cross_attention_dim": 2048, "use_linear_projection": True,
    "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816,
}
FLUX_DEV: dict[str, Any] = {
    "patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38,
    "attention_head_dim": 128, "num_attention_heads": 24, "joint_attention_dim": 4096,
    "pooled_projection_dim": 768, "guidance_embeds": True, "axes_dims_rope": [16, 56, 56],
}
WAN_14B: dict[str, Any] = {
    "patch_size": [1, 2, 2], "num_attention_heads": 40, "attention_head_dim": 128,
    "in_channels": 16, "out_channels": 16, "text_dim": 4096, "freq_dim": 256,
    "ffn_dim": 13824, "num_layers": 40, "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads", "eps": 1e-6, "rope_max_seq_len": 1024,
}
# --tiny: the same classes, small enough for a CPU
TINY: dict[str, dict[str, Any]] = {
    "sdxl": {**SDXL, "block_out_channels": [32, 64, 64], "transformer_layers_per_block": [1, 1, 1],
             "attention_head_dim": [2, 2, 2], "cross_attention_dim": 32,
             "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 80,
             "norm_num_groups": 32},
    "flux": {**FLUX_DEV, "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 64,
             "num_attention_heads": 2, "joint_attention_dim": 32, "pooled_projection_dim": 16,
             "axes_dims_rope": [8, 28, 28]},
    "wan": {**WAN_14B, "num_attention_heads": 2, "attention_head_dim": 64, "text_dim": 32,
            "ffn_dim": 64, "num_layers": 1, "freq_dim": 32},
}


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # sdxl | flux | wan
    height: int
    width: int
    frames: int = 1
    layers: int | None = None  # Wan 720p: 2 of the 40 identical layers
    rounds: int = 7
    # forwards per path in a round, the fastest kept: a launch-bound forward's time moves
    # with the host's load (SDXL 1024 on an H100: single forwards from 57 to 128 ms), and
    # the fastest of a few back to back is the path's own cost
    repeat: int = 1


CASES = (
    Case("sdxl-1024", "sdxl", 1024, 1024, rounds=41, repeat=3),
    Case("sdxl-2048", "sdxl", 2048, 2048, rounds=9),
    Case("flux-1024", "flux", 1024, 1024, rounds=11),
    Case("flux-1536", "flux", 1536, 1536, rounds=7),
    Case("flux-2048", "flux", 2048, 2048, rounds=7),
    Case("wan-480p", "wan", 480, 832, frames=81, rounds=5),
    Case("wan-720p-2of40", "wan", 720, 1280, frames=81, layers=2, rounds=7),
)
TINY_CASES = (Case("sdxl-tiny", "sdxl", 256, 256, rounds=3),
              Case("flux-tiny", "flux", 256, 256, rounds=3),
              Case("wan-tiny", "wan", 64, 64, frames=5, rounds=3))


def build(case: Case, device: torch.device, dtype: torch.dtype, tiny: bool) -> Any:
    """The model with random weights, made on `device` in `dtype` (no fp32 copy first)."""
    # imported by name: diffusers is the `bench` extra, not a dependency of the tool (nor of
    # its type check)
    diffusers = importlib.import_module("diffusers")

    config = dict(TINY[case.model] if tiny else {"sdxl": SDXL, "flux": FLUX_DEV,
                                                  "wan": WAN_14B}[case.model])
    if case.layers is not None:
        config["num_layers"] = case.layers
    cls = getattr(diffusers, {"sdxl": "UNet2DConditionModel", "flux": "FluxTransformer2DModel",
                              "wan": "WanTransformer3DModel"}[case.model])
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(0)
            model = cls(**config)
    finally:
        torch.set_default_dtype(previous)
    model = model.to(device=device, dtype=dtype).eval()
    # as from_pretrained(torch_dtype=bf16) does: the modules the class keeps in fp32 (Wan's
    # norms, rope and time embedder) stay fp32
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for name, module in model.named_modules():
        if keep & set(name.split(".")):
            module.float()
    return model


def inputs(case: Case, device: torch.device, dtype: torch.dtype, tiny: bool) -> dict[str, Any]:
    g = torch.Generator(device=device).manual_seed(1)

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    config: dict[str, Any] = TINY[case.model] if tiny else {}
    if case.model == "sdxl":
        h, w = case.height // 8, case.width // 8
        text = config.get("cross_attention_dim", 2048)
        pooled = config.get("projection_class_embeddings_input_dim", 2816) - 6 * config.get(
            "addition_time_embed_dim", 256)
        return {"sample": randn(2, 4, h, w),
                "timestep": torch.tensor([500.0, 500.0], device=device),
                "encoder_hidden_states": randn(2, 77, text),
                "added_cond_kwargs": {
                    "text_embeds": randn(2, pooled),
                    "time_ids": torch.tensor([[case.height, case.width, 0, 0, case.height,
                                               case.width]] * 2, device=device, dtype=dtype)}}
    if case.model == "flux":
        h, w = case.height // 16, case.width // 16
        ids = torch.zeros(h, w, 3, device=device)
        ids[..., 1] = torch.arange(h, device=device)[:, None]
        ids[..., 2] = torch.arange(w, device=device)[None, :]
        text_tokens = 512
        return {"hidden_states": randn(1, h * w, 64),
                "encoder_hidden_states": randn(1, text_tokens,
                                               config.get("joint_attention_dim", 4096)),
                "pooled_projections": randn(1, config.get("pooled_projection_dim", 768)),
                "timestep": torch.tensor([0.5], device=device, dtype=dtype),
                "img_ids": ids.reshape(h * w, 3).to(dtype),
                "txt_ids": torch.zeros(text_tokens, 3, device=device, dtype=dtype),
                "guidance": torch.tensor([3.5], device=device, dtype=dtype)}
    frames = (case.frames - 1) // 4 + 1
    return {"hidden_states": randn(1, 16, frames, case.height // 8, case.width // 8),
            "timestep": torch.tensor([500], device=device),
            "encoder_hidden_states": randn(1, 512, config.get("text_dim", 4096))}


# --- the paths ---------------------------------------------------------------------------------

def _sage_when(rule: Callable[[Any, Any], bool]) -> Callable[..., Any]:
    """An SDPA replacement that sends maskless fp16/bf16 4-D calls `rule` accepts to
    `sageattn()`, everything else to SDPA."""
    from sageattention import sageattn

    sdpa = F.scaled_dot_product_attention

    def attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                  dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
                  enable_gqa: bool = False, **kwargs: Any) -> Any:
        if (attn_mask is None and not dropout_p and not enable_gqa and not kwargs
                and query.dim() == 4 and query.dtype in (torch.float16, torch.bfloat16)
                and query.shape[-1] <= 128 and rule(query, key)):
            return sageattn(query, key, value, tensor_layout="HND", is_causal=is_causal,
                            sm_scale=scale)
        extra = {"enable_gqa": True} if enable_gqa else {}
        return sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale, **extra, **kwargs)

    return attention


@contextlib.contextmanager
def patched(replacement: Callable[..., Any]) -> Iterator[None]:
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = replacement
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def paths(with_sage: bool) -> dict[str, Callable[[], contextlib.AbstractContextManager[Any]]]:
    from sagedoctor import runtime

    out: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
        "sdpa": contextlib.nullcontext}
    if with_sage:
        every = _sage_when(lambda q, k: True)
        fixed = _sage_when(lambda q, k: q.shape[2] >= 1536 and k.shape[2] >= 512)
        out["sage_all"] = lambda: patched(every)
        out["fixed_rule"] = lambda: patched(fixed)
    out["scope"] = runtime.sage_scope
    sdpa = F.scaled_dot_product_attention

    def bare(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: Any = None, enable_gqa: bool = False,
             **kwargs: Any) -> Any:
        if attn_mask is None and not dropout_p and not is_causal and scale is None \
                and not enable_gqa and not kwargs:
            return sdpa(query, key, value)
        extra = {"enable_gqa": True} if enable_gqa else {}
        return sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale, **extra, **kwargs)

    out["wrapper"] = lambda: patched(bare)
    return out


def forward(model: Any, args: dict[str, Any], way: Callable[[], Any]) -> Any:
    with torch.inference_mode(), way():
        out = model(**args, return_dict=False)[0]
    return out


def timed(model: Any, args: dict[str, Any], way: Callable[[], Any],
          device: torch.device) -> tuple[float, float]:
    """(ms of one forward, ms the host took to issue it)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        began = time.perf_counter()
        forward(model, args, way)
        issued = time.perf_counter() - began
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)), issued * 1e3
    began = time.perf_counter()
    forward(model, args, way)
    spent = (time.perf_counter() - began) * 1e3
    return spent, spent


def profile(model: Any, args: dict[str, Any], way: Callable[[], Any], device: torch.device,
            top: int = 14) -> str:
    """Where the host's time of three forwards goes (cProfile, by own time)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(3):
        forward(model, args, way)
    profiler.disable()
    if device.type == "cuda":
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def compare(out: Any, ref: Any) -> tuple[float, float]:
    a, b = out.float().flatten(), ref.float().flatten()
    cosine = float(F.cosine_similarity(a, b, dim=0))
    return cosine, float((a - b).norm() / b.norm().clamp_min(1e-12))


def run_case(case: Case, device: torch.device, dtype: torch.dtype, tiny: bool,
             rounds: int | None, with_sage: bool, profiled: bool = False,
             repeat: int | None = None) -> dict[str, Any]:
    from sagedoctor import runtime

    began = time.perf_counter()
    model = build(case, device, dtype, tiny)
    args = inputs(case, device, dtype, tiny)
    built_s = time.perf_counter() - began
    ways = paths(with_sage)
    outputs = {}
    router = runtime.get_router()
    stats_before = router.stats()
    for name, way in ways.items():  # two untimed forwards each; the first's output is kept
        outputs[name] = forward(model, args, way).float().cpu()
        if name == "scope":
            stats_first = router.stats()
            forward(model, args, way)
            stats_second = router.stats()
        else:
            forward(model, args, way)
    times: dict[str, list[float]] = {name: [] for name in ways}
    host: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    repeat = max(1, repeat or case.repeat)
    # The cyclic collector off while timing, as timeit does: a launch-bound forward's time
    # is the host's, and a full collection (a big heap of modules and tensors) landing in
    # one path's forward made rounds of 65 ms and 125 ms (SDXL 1024 on an H100).
    gc.collect()
    gc.disable()
    try:
        for i in range(rounds or case.rounds):
            for name in names[i % len(names):] + names[:i % len(names)]:  # rotated
                ms, issued = min(timed(model, args, ways[name], device)
                                 for _ in range(repeat))
                times[name].append(ms)
                host[name].append(issued)
    finally:
        gc.enable()
    if profiled:
        for name in ("sdpa", "scope"):
            print(f"--- {case.name}: host profile of 3 forwards, {name}", file=sys.stderr)
            print(profile(model, args, ways[name], device), file=sys.stderr)
    medians = {name: statistics.median(t) for name, t in times.items()}
    best = min(ms for name, ms in medians.items() if name != "wrapper")  # (a diagnostic)
    best_name = min((name for name in medians if name != "wrapper"), key=medians.__getitem__)
    result: dict[str, Any] = {
        "case": case.name, "rounds": rounds or case.rounds, "repeat": repeat,
        "built_s": round(built_s, 1),
        "paths": {}, "scope_over_best": round(medians["scope"] / best, 4),
        "scope_over_best_min": round(min(times["scope"]) / min(
            min(t) for name, t in times.items() if name != "wrapper"), 4),
        # per round against the best path's forward of the same round (they run back to
        # back): drift of the host's load over the run cancels
        "scope_over_best_paired": round(statistics.median(
            a / b for a, b in zip(times["scope"], times[best_name], strict=True)), 4),
        # the router's own share: against a bare Python function in SDPA's place
        "scope_over_wrapper_paired": round(statistics.median(
            a / b for a, b in zip(times["scope"], times["wrapper"], strict=True)), 4),
        "router_first_forward": _delta(stats_before, stats_first),
        "router_per_forward": _delta(stats_first, stats_second),
        "sites": stats_second.get("sites")}
    for name in ways:
        cosine, rel = compare(outputs[name], outputs["sdpa"])
        result["paths"][name] = {
            "ms": round(medians[name], 3), "all_ms": [round(t, 3) for t in times[name]],
            "launch_ms": round(statistics.median(host[name]), 3),
            "min_ms": round(min(times[name]), 3),  # best case: a launch-bound forward's
            # wall time moves with the host's load; its minimum with the path's own cost
            "speedup": round(medians["sdpa"] / medians[name], 4),
            "cosine": round(cosine, 6), "rel_l2": round(rel, 5)}
    del model, args, outputs
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _delta(before: dict[str, Any], after: dict[str, Any]) -> str:
    from collections import Counter

    from sagedoctor.runtime.router import summary_line

    routed = Counter(after["routed"]) - Counter(before["routed"])
    sdpa = Counter(after["sdpa"]) - Counter(before["sdpa"])
    return summary_line(routed, sdpa)


def table(results: list[dict[str, Any]], device: str) -> str:
    lines = [f"device: {device}, torch {torch.__version__}",
             "| case | SDPA ms (launch) | sage_all | fixed_rule | scope (launch) | wrapper | "
             "scope / best (paired; by min) | rel L2 scope (sage_all) | router, one forward |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = r["paths"]

        def cell(name: str, p: dict[str, Any] = p) -> str:
            return f"{p[name]['speedup']:.3f}x" if name in p else "-"

        sage_rel = f"{p['sage_all']['rel_l2']:.4f}" if "sage_all" in p else "-"
        lines.append(f"| {r['case']} | {p['sdpa']['ms']:.1f} ({p['sdpa']['launch_ms']:.1f}) | "
                     f"{cell('sage_all')} | {cell('fixed_rule')} | {cell('scope')} "
                     f"({p['scope']['launch_ms']:.1f}) | {cell('wrapper')} | "
                     f"{r['scope_over_best']:.3f} ({r['scope_over_best_paired']:.3f}; "
                     f"{r['scope_over_best_min']:.3f}) | "
                     f"{p['scope']['rel_l2']:.4f} ({sage_rel}) | {r['router_per_forward']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per path")
    parser.add_argument("--repeat", type=int, default=None,
                        help="forwards per path in a round, the fastest kept (default: the "
                             "case's, 3 at SDXL 1024, else 1)")
    parser.add_argument("--json", default=None, help="write every number here")
    parser.add_argument("--tiny", action="store_true", help="tiny configs on the CPU")
    parser.add_argument("--profile", action="store_true",
                        help="print where the host's time goes, SDPA and scope (stderr)")
    args = parser.parse_args()
    tiny = args.tiny
    device = torch.device("cpu" if tiny else "cuda")
    dtype = torch.float32 if tiny else torch.bfloat16
    cases: tuple[Case, ...] = TINY_CASES if tiny else CASES
    if args.only:
        wanted = set(args.only.split(","))
        cases = tuple(c for c in cases if c.name in wanted)
    try:
        import sageattention  # noqa: F401

        with_sage = not tiny
    except ImportError:
        if not tiny:
            print("SageAttention is not importable here", file=sys.stderr)
            return 2
        with_sage = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results = []
    for case in cases:
        result = run_case(case, device, dtype, tiny, args.rounds, with_sage, args.profile,
                          args.repeat)
        results.append(result)
        print(json.dumps(result), flush=True)
    print(table(results, name))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"device": name, "torch": torch.__version__, "results": results}, handle,
                      indent=1)
    met = all(r["scope_over_best"] <= 1.01 for r in results) and all(
        r["paths"]["scope"]["rel_l2"] <= r["paths"]["sage_all"]["rel_l2"]
        for r in results if "sage_all" in r["paths"])
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
