"""The post-install smoke check: `sageattention.sageattn()` on each CUDA GPU against SDPA, in
the TARGET interpreter, before the transaction commits. Seconds, not the full `verify` sweep.

A Gaussian call decides (a build that is wrong there is wrong everywhere: v2.2.0's sm90
buffer). The rest of verify's accuracy suite (a joint text+image sequence with one channel
offset by +100/+300/+600, large-magnitude rows, near-constant rows) is run and its worst case
reported, not required: every SageAttention 2 kernel loses accuracy on such outliers, and the
runtime checks each call site on its own data and keeps SDPA where the kernel fails.

SAGEDOCTOR_SMOKE_DEVICE=cpu runs it on the CPU instead (for tests without a GPU, with a
stand-in sageattention); the default is every CUDA device torch sees.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..folders import bytecode_folder
from ..proc import ToolMissing, ToolTimeout
from ..runtime.bytecode import CACHE_ENV
from ..target_answer import ask_target, with_answer_function

SMOKE_TIMEOUT_S = 300.0
MIN_COSINE = 0.99
MAX_REL_L2 = 0.08

# The suite's cases at (batch, heads, tokens), head size 128: 256 text tokens, 1792 image.
SUITE_SHAPE = (1, 8, 2048)

# Runs inside the target venv (any Python >= 3.8): stdlib, torch and sageattention only; the
# suite's case maker is runtime.accuracy's own source, and cache_bytecode() runtime.bytecode's,
# put in front by smoke_script().
SMOKE_BODY = r"""
import math, sys
def _compare(got, ref, F):
    got, ref = got.float().flatten(), ref.float().flatten()
    cos = float(F.cosine_similarity(got, ref, dim=0))
    rel = float((got - ref).norm() / ref.norm().clamp_min(1e-12))
    return (cos if math.isfinite(cos) else None), (rel if math.isfinite(rel) else None)
def _suite(torch, F, sageattn, device, dtype):
    out = {}
    for i, case in enumerate(CASES):
        try:
            q, k, v = accuracy_case(torch, device, dtype, SHAPE, 128, case, seed=i + 1)
            got = sageattn(q, k, v, tensor_layout="HND", is_causal=False)
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
            cos, rel = _compare(got, ref, F)
            out[case] = {"cosine": cos, "rel_l2": rel}
        except Exception as exc:
            out[case] = {"error": "%s: %s" % (type(exc).__name__, str(exc)[:200])}
    return out
def main():
    device_kind, min_cos, max_l2 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    out = {"devices": [], "error": None}
    cache_bytecode()  # before torch is imported
    try:
        import torch
        import torch.nn.functional as F
        from sageattention import sageattn
    except Exception as exc:
        out["error"] = "import failed: %s: %s" % (type(exc).__name__, exc)
        return out
    if device_kind == "cpu":
        devices = [("cpu", "cpu", torch.float32)]
    else:
        if not torch.cuda.is_available():
            out["error"] = "torch sees no CUDA GPU"
            return out
        devices = [("cuda:%d" % i, torch.cuda.get_device_name(i), torch.float16)
                   for i in range(torch.cuda.device_count())]
    for device, name, dtype in devices:
        row = {"device": device, "name": name}
        try:
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, 8, 512, 128, device=device, dtype=dtype)
                       for _ in range(3))
            got = sageattn(q, k, v, tensor_layout="HND", is_causal=False).float()
            ref = F.scaled_dot_product_attention(q, k, v).float()
            finite = bool(torch.isfinite(got).all())
            cos = float(F.cosine_similarity(got.flatten(), ref.flatten(), dim=0))
            rel = float((got - ref).norm() / ref.norm().clamp_min(1e-12))
            row.update(finite=finite, cosine=cos if math.isfinite(cos) else None,
                       rel_l2=rel if math.isfinite(rel) else None)
            row["ok"] = (finite and row["cosine"] is not None and row["cosine"] >= min_cos
                         and row["rel_l2"] is not None and row["rel_l2"] <= max_l2)
            row["suite"] = _suite(torch, F, sageattn, device, dtype)
        except Exception as exc:
            row.update(ok=False, error="%s: %s" % (type(exc).__name__, str(exc)[:300]))
        out["devices"].append(row)
    return out
_answer(main())
"""


def smoke_script() -> str:
    """SMOKE_BODY behind the accuracy suite's case maker, as runtime.accuracy defines it."""
    import inspect

    from ..runtime import accuracy, bytecode

    cases = [c for c in accuracy.ACCURACY_CASES if c != "gaussian"]
    head = (f"TEXT_TOKENS = {accuracy.TEXT_TOKENS!r}\n"
            f"CASES = {cases!r}\nSHAPE = {SUITE_SHAPE!r}\n"
            + inspect.getsource(accuracy.accuracy_case)
            # where the target's torch has no bytecode and none is written: runtime.bytecode
            + "import importlib.util, os\n"
            + f"CACHE_ENV = {bytecode.CACHE_ENV!r}\nPROBES = {bytecode.PROBES!r}\n"
            + "".join(inspect.getsource(f) for f in (
                bytecode.cache_folder, bytecode.has_bytecode, bytecode.cache_bytecode)))
    # (annotations unevaluated: the case maker's are typing names the target need not have)
    return "from __future__ import annotations\n" + with_answer_function(head + SMOKE_BODY)


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    summary: str
    report: dict[str, object]


def smoke_device() -> str:
    return "cpu" if os.environ.get("SAGEDOCTOR_SMOKE_DEVICE", "").strip() == "cpu" else "cuda"


def judge(report: dict[str, object]) -> SmokeResult:
    """Pure: the parsed report -> passed or not, and one line saying why."""
    if report.get("error"):
        return SmokeResult(False, str(report["error"]), report)
    rows = report.get("devices")
    if not isinstance(rows, list) or not rows:
        return SmokeResult(False, "no device was checked", report)
    parts, ok = [], True
    for row in rows:
        if not isinstance(row, dict):
            return SmokeResult(False, "malformed smoke report", report)
        cos, rel = row.get("cosine"), row.get("rel_l2")
        good = row.get("ok") is True
        ok = ok and good
        detail = (str(row.get("error")) if row.get("error") else
                  f"cosine {cos:.4f}, rel L2 {rel:.3f}" if isinstance(cos, float)
                  and isinstance(rel, float) else "output not finite")
        parts.append(f"{row.get('device')} ({row.get('name')}): {detail}"
                     + ("" if good else " [wrong]") + _worst(row.get("suite")))
    return SmokeResult(ok, "; ".join(parts), report)


def _worst(suite: Any) -> str:
    """', outliers worst joint_offset_600 cosine 0.641': the suite's lowest cosine (a case
    that failed to run counts as worst), reported, not judged."""
    if not isinstance(suite, dict) or not suite:
        return ""
    worst: tuple[float, str, str] | None = None
    for case, result in suite.items():
        if not isinstance(result, dict):
            continue
        cos = result.get("cosine")
        if result.get("error") or not isinstance(cos, float):
            found = (float("-inf"), str(case)[:40], str(result.get("error") or "not finite")[:80])
        else:
            found = (cos, str(case)[:40], f"cosine {cos:.3f}")
        if worst is None or found[0] < worst[0]:
            worst = found
    if worst is None:
        return ""
    return f", outliers worst {worst[1]} {worst[2]}"


def run_smoke(python: Path, timeout: float = SMOKE_TIMEOUT_S,
              device: str | None = None) -> SmokeResult:
    argv = [str(python), "-c", smoke_script(), device or smoke_device(), str(MIN_COSINE),
            str(MAX_REL_L2)]
    try:
        # (where its torch has no bytecode and it writes none: see runtime/bytecode.py)
        asked = ask_target(argv, timeout=timeout,
                           env={**os.environ, CACHE_ENV: str(bytecode_folder())})
    except ToolTimeout:
        return SmokeResult(False, f"sageattn() did not finish within {timeout:g} s", {})
    except ToolMissing as exc:
        return SmokeResult(False, f"the target interpreter is missing: {exc}", {})
    try:
        report = asked.json()
    except (ValueError, RecursionError):
        report = None
    if isinstance(report, dict):
        return judge(report)
    done = asked.result
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return SmokeResult(False, f"the check crashed (exit {done.returncode}): "
                       + " | ".join(tail), {})
