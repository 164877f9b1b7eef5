"""The outlier case through the scope, on the GPU: a call site whose Q and K carry one channel
offset on the image tokens is served by SDPA while the Gaussian sites of the same shape route.

A joint sequence (512 text + N image tokens, 24 heads of 128, bf16; FLUX's layout) in one
"denoising step" of five layers of the same shape: Gaussian, +600, Gaussian, +300, +100 (one
channel of Q and K offset on the image tokens only, as InvokeAI measured in Qwen-Image's first
block). Three steps, a scope each, with the router's speed check off (the question here is
correctness, not speed). Per site: where it ran, and its cosine against SDPA (bf16) and against
an fp32 reference, beside `sageattn()` called directly on the same inputs.

Target (issue 37): every outlier site that fails the check has cosine >= 0.999 against SDPA,
and the Gaussian sites route.

    python benchmarks/bench_outlier_scope.py [--image-tokens 4096,16384]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch
import torch.nn.functional as F

from sagedoctor.runtime import Router, sage_scope

TEXT = 512
LAYERS = (0, 600, 0, 300, 100)  # the offset of each site of one step


def joint(image: int, offset: float, seed: int) -> tuple[Any, Any, Any]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(1, 24, TEXT + image, 128, device="cuda", generator=g)
               for _ in range(3))
    q[:, :, TEXT:, 0] += offset
    k[:, :, TEXT:, 0] += offset
    return q.bfloat16(), k.bfloat16(), v.bfloat16()


def cosine(a: Any, b: Any) -> float:
    return float(F.cosine_similarity(a.float().flatten(), b.float().flatten(), dim=0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-tokens", default="4096,16384")
    args = parser.parse_args()
    from sageattention import sageattn

    met = True
    for image in (int(x) for x in args.image_tokens.split(",")):
        router = Router(speed_check=False)
        step = [joint(image, offset, seed) for seed, offset in enumerate(LAYERS)]
        sdpa = [F.scaled_dot_product_attention(*call) for call in step]
        fp32 = [F.scaled_dot_product_attention(*(t.float() for t in call)) for call in step]
        direct = [sageattn(*call, tensor_layout="HND") for call in step]
        outs = []
        for _ in range(3):
            with sage_scope(router):
                outs.append([F.scaled_dot_product_attention(*call) for call in step])
        stats = router.stats()
        print(f"{torch.cuda.get_device_name()}: {TEXT} text + {image} image tokens, 24x128 "
              f"bf16; {stats['summary']}; sites {json.dumps(stats['sites'])}; "
              f"smooth_k per key {stats['smooth_k']}")
        print("| site | offset | scope vs SDPA (steps 1-3) | scope vs fp32 | sageattn() vs fp32 |")
        print("|---|---|---|---|---|")
        for i, offset in enumerate(LAYERS):
            vs_sdpa = [cosine(step_out[i], sdpa[i]) for step_out in outs]
            print(f"| {i} | +{offset} | {' / '.join(f'{c:.4f}' for c in vs_sdpa)} | "
                  f"{cosine(outs[0][i], fp32[i]):.4f} | {cosine(direct[i], fp32[i]):.4f} |")
            if offset >= 300 and min(vs_sdpa) < 0.999:
                met = False
        routed = sum(stats["routed"].values())
        if routed < 2 * 3:  # the two Gaussian sites, each step
            met = False
    print("target met" if met else "target NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
