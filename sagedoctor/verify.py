"""Run the runtime self-test in the target interpreter, parse its report, and turn it into
the per-shape decisions the runtime reads, a verdict for state, and the record `check` and
`plan` read back (a `sageattn()` found wrong on a GPU is remembered)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import exit_codes
from .errors import SagedoctorError
from .install.bundle import PACKAGE
from .proc import ToolMissing, ToolTimeout, run_tool
from .runtime.decisions import (
    Calibration,
    Decision,
    build_fingerprint,
    gpu_identity,
    merge_into_file,
    shape_key,
)

FIRST_SCHEMA_HEADS = {64: 20, 128: 24}


class VerifyError(SagedoctorError):
    code = "SD920"


class VerifyTargetError(VerifyError):
    """The target itself is what stops the self-test (gone, or no runtime in it): fixable,
    as the same venv is in `check` and `plan`."""

    exit_status = exit_codes.FIXABLE


@dataclass(frozen=True)
class KeyResult:
    gpu: int
    gpu_name: str
    arch: str
    dtype: str
    head_dim: int
    chosen: str | None
    cosine: float | None
    rel_l2: float | None
    best_speedup: float | None
    crossover: int | None
    auto_passed: bool | None  # what `sageattn()` itself picks: correct?
    auto_kernel: str | None
    rejected: tuple[str, ...]  # kernels that failed the check
    gpu_id: str = ""  # UUID where the report has it
    crossovers: tuple[tuple[str, int | None], ...] = ()  # per "batch x heads" of the sweep
    routed: int = 0  # sweep points routed
    measured: int = 0  # sweep points measured

    @property
    def routes(self) -> bool:
        return bool(self.chosen) and self.routed > 0

    @property
    def calibration_key(self) -> str:
        return f"{self.arch}|{self.dtype}|{self.head_dim}"


def run_selftest(python: Path, quick: bool, timeout: float = 1800,
                 fresh: bool = False) -> dict[str, Any]:
    """`fresh`: measure as if no earlier run had stored decisions for this build."""
    argv = [str(python), "-m", f"{PACKAGE}.selftest", "--json"] + (["--quick"] if quick else [])
    argv += ["--fresh"] if fresh else []
    try:
        done = run_tool(argv, timeout=timeout)
    except ToolTimeout:
        raise VerifyError(f"the self-test did not finish within {timeout:.0f} s", "") from None
    except ToolMissing:
        raise VerifyTargetError(f"{python} does not exist", "pass --venv DIR or --python EXE") \
            from None
    if done.returncode != 0:
        raise VerifyTargetError(f"the self-test failed: {done.stderr.strip()[-400:]}",
                          f"run `sagedoctor install --venv {python.parent.parent}` to bundle "
                          "the runtime")
    return parse_report(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")


def parse_report(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise VerifyError(f"the self-test printed no JSON report ({exc})", "") from exc
    if not isinstance(data, dict) or data.get("schema_version") != 1 or not isinstance(
            data.get("gpus"), list):
        raise VerifyError("the self-test report has an unknown form", "")
    return data


def key_results(report: dict[str, Any]) -> list[KeyResult]:
    out = []
    for gpu in report["gpus"]:
        gpu_id = gpu_identity(gpu.get("uuid"), str(gpu.get("name", "")), str(gpu["arch"]),
                              int(gpu["index"]))
        for key in gpu.get("keys", []):
            kernels = key.get("kernels", [])
            chosen = next((k for k in kernels if k.get("name") == key.get("chosen")), None)
            normal = (chosen or {}).get("normal", {})
            sweep = key.get("sweep", [])
            speedups = [p["speedup"] for p in sweep if isinstance(p.get("speedup"), int | float)]
            auto = key.get("sageattn_auto", {})
            crossovers = key.get("crossovers")
            if not isinstance(crossovers, dict):
                crossovers = {"": key.get("crossover")}
            out.append(KeyResult(
                gpu=int(gpu["index"]), gpu_name=str(gpu.get("name", "")),
                arch=str(gpu["arch"]), dtype=str(key["dtype"]), head_dim=int(key["head_dim"]),
                chosen=key.get("chosen"), cosine=normal.get("cosine"),
                rel_l2=normal.get("rel_l2"), best_speedup=max(speedups) if speedups else None,
                crossover=key.get("crossover"),
                auto_passed=auto.get("passed") if "passed" in auto else None,
                auto_kernel=auto.get("kernel"),
                rejected=tuple(k["name"] for k in kernels if not k.get("passed")),
                gpu_id=gpu_id,
                crossovers=tuple((str(k), v if isinstance(v, int) else None)
                                 for k, v in crossovers.items()),
                routed=sum(1 for p in sweep if _point_routes(p)),
                measured=len(sweep)))
    return out


def _point_routes(point: dict[str, Any]) -> bool:
    """A sweep point's decision; reports of the first schema had no decision, only times."""
    if "route" in point:
        return point["route"] is True
    kernel, sdpa = point.get("kernel_ms"), point.get("sdpa_ms")
    return isinstance(kernel, int | float) and isinstance(sdpa, int | float) and kernel < sdpa


def calibration(report: dict[str, Any], when: str = "") -> Calibration:
    """The per-GPU, per-shape decisions of one self-test run, for the runtime's file."""
    quick = bool((report.get("measure") or {}).get("quick"))
    out = Calibration(build_fingerprint((report.get("fingerprint") or {}).get("dists") or {}))
    for gpu in report["gpus"]:
        gpu_id = gpu_identity(gpu.get("uuid"), str(gpu.get("name", "")), str(gpu["arch"]),
                              int(gpu["index"]))
        for key in gpu.get("keys", []):
            if not key.get("chosen"):
                continue  # no correct kernel: the router's own check keeps SDPA
            for point in key.get("sweep", []):
                # Reports of the first schema swept one head count per head size, batch 1.
                point = {"batch": 1, "heads": FIRST_SCHEMA_HEADS.get(int(key["head_dim"]), 16),
                         **point}
                try:
                    tokens, batch, heads = (int(point[n]) for n in ("tokens", "batch", "heads"))
                    speedup = float(point["speedup"])
                except (KeyError, TypeError, ValueError):
                    continue
                decision = Decision(
                    route=_point_routes(point), kernel=str(key["chosen"]), speedup=speedup,
                    low=float(point.get("low", speedup)), high=float(point.get("high", speedup)),
                    rounds=int(point.get("rounds", 0)),
                    source="verify-quick" if quick else "verify", measured_at=when)
                out.put(gpu_id, shape_key(str(key["dtype"]), int(key["head_dim"]),
                                          batch * heads, tokens, tokens, False),
                        decision, str(gpu.get("name", "")), str(gpu["arch"]))
    return out


def write_calibration(prefix: Path, data: Calibration) -> Path:
    """Merged into what is there: a quick run never replaces a full one's shapes, and a run
    of another build replaces everything."""
    path = prefix / "sagedoctor" / "calibration.json"
    merge_into_file(str(path), data)
    return path


def verdict(report: dict[str, Any], results: list[KeyResult]) -> str:
    """'routing': some kernel is used somewhere; 'sdpa-only': correct but never faster, or
    none correct; 'broken': SageAttention did not even import."""
    if report.get("import") != "ok" or report.get("error"):
        return "broken"
    if any(r.routes for r in results):
        return "routing"
    return "sdpa-only"


def chosen_kernels(results: list[KeyResult]) -> dict[str, str | None]:
    """Per arch|dtype|head size, the kernel verify chose (None: SDPA)."""
    return {r.calibration_key: r.chosen for r in results}


def describe_routing(r: KeyResult) -> str:
    """'from 9728 (1x24), from 12288 (1x40)', 'never', or 'at 5 of 19 lengths'."""
    if not r.routes:
        return "never"
    parts = []
    for shape, value in r.crossovers:
        label = f" ({shape})" if shape else ""
        parts.append(f"from {value}{label}" if value else f"some lengths{label}")
    text = ", ".join(parts)
    if r.measured and r.routed < r.measured:
        text += f"; {r.routed} of {r.measured} shapes"
    return text


def render_table(results: list[KeyResult]) -> str:
    head = ("GPU", "dtype", "D", "kernel", "cosine", "rel L2", "best speed-up", "routes",
            "sageattn() auto")
    rows = [head]
    for r in results:
        rows.append((
            f"{r.gpu} sm{r.arch.replace('.', '')}", r.dtype, str(r.head_dim),
            r.chosen or "none (SDPA)",
            f"{r.cosine:.5f}" if r.cosine is not None else "-",
            f"{r.rel_l2:.4f}" if r.rel_l2 is not None else "-",
            f"{r.best_speedup:.2f}x" if r.best_speedup is not None else "-",
            describe_routing(r),
            {True: "correct", False: "WRONG", None: "n/a"}[r.auto_passed]
            + (f" ({r.auto_kernel})" if r.auto_kernel else ""),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    return "\n".join(lines) + "\n"


def verify_record(report: dict[str, Any], results: list[KeyResult]) -> dict[str, Any]:
    """The record's results (state.py keeps verdict, time and fingerprint beside them): per
    GPU whether `sageattn()` itself, what ComfyUI, KJNodes and diffusers call, was correct."""
    gpus: dict[str, dict[str, Any]] = {}
    for r in results:
        entry = gpus.setdefault(r.gpu_id, {"index": r.gpu, "name": r.gpu_name, "arch": r.arch,
                                           "sageattn_auto": {}})
        entry["sageattn_auto"][f"{r.dtype}|{r.head_dim}"] = {"kernel": r.auto_kernel,
                                                             "passed": r.auto_passed}
    return {"error": report.get("error"), "gpus": gpus}


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


def render_app_shapes(data: Calibration) -> str:
    """'FLUX 1536x1536 (9728 tokens): SageAttention, 1.09x SDPA' per app shape and GPU."""
    lines = []
    for gpu, shapes in sorted(app_decisions(data).items()):
        name = data.gpus[gpu].name or gpu
        lines.append(f"{name} ({gpu}):")
        for label, decision in shapes.items():
            tokens = APP_SHAPES[label][3]
            where = "SageAttention" if decision.route else "PyTorch SDPA"
            lines.append(f"  {label} ({tokens} tokens): {where}, kernel at "
                         f"{decision.speedup:.2f}x SDPA ({decision.low:.2f}-{decision.high:.2f})")
    return "\n".join(lines) + "\n" if lines else ""


def run_signature(results: list[KeyResult]) -> dict[str, Any]:
    """One run's outcome, for `verify --repeat`: the verdict per key and every shape's
    decision."""
    return {f"{r.gpu_id}|{r.dtype}|{r.head_dim}": describe_routing(r) if r.chosen else "never"
            for r in results}


def agreement(runs: list[Calibration], signatures: list[dict[str, Any]]) -> dict[str, Any]:
    """How far N runs agree: per key verdicts, per shape decisions, and the shapes that
    flipped."""
    keys = sorted({k for s in signatures for k in s})
    key_agree = [k for k in keys if len({s.get(k) for s in signatures}) == 1]
    shapes: dict[tuple[str, str], list[bool | None]] = {}
    for i, run in enumerate(runs):
        for gpu, entry in run.gpus.items():
            for shape, decision in entry.decisions.items():
                shapes.setdefault((gpu, shape), [None] * len(runs))[i] = decision.route
    flipped = sorted(f"{gpu} {shape}: " + " ".join("route" if v else "sdpa" if v is False
                                                    else "-" for v in values)
                     for (gpu, shape), values in shapes.items() if len(set(values)) > 1)
    apps: dict[str, list[bool | None]] = {}
    for i, run in enumerate(runs):
        for gpu, decided in app_decisions(run).items():
            for name, decision in decided.items():
                apps.setdefault(f"{gpu} {name}", [None] * len(runs))[i] = decision.route
    return {"runs": len(runs), "keys": len(keys), "keys_agreeing": len(key_agree),
            "shapes": len(shapes), "shapes_agreeing": len(shapes) - len(flipped),
            "flipped": flipped, "app_shapes": apps,
            "app_shapes_agreeing": sum(1 for v in apps.values() if len(set(v)) == 1),
            "verdicts": {k: [s.get(k) for s in signatures] for k in keys}}
