"""Run the runtime self-test in the target interpreter, parse its report, and turn it into
the calibration the runtime reads and a verdict for state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SagedoctorError
from .install.bundle import PACKAGE
from .proc import ToolMissing, ToolTimeout, run_tool


class VerifyError(SagedoctorError):
    code = "SD920"


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

    @property
    def calibration_key(self) -> str:
        return f"{self.arch}|{self.dtype}|{self.head_dim}"


def run_selftest(python: Path, quick: bool, timeout: float = 1800) -> dict[str, Any]:
    argv = [str(python), "-m", f"{PACKAGE}.selftest", "--json"] + (["--quick"] if quick else [])
    try:
        done = run_tool(argv, timeout=timeout)
    except ToolTimeout:
        raise VerifyError(f"the self-test did not finish within {timeout:.0f} s", "") from None
    except ToolMissing:
        raise VerifyError(f"{python} does not exist", "pass --venv DIR or --python EXE") \
            from None
    if done.returncode != 0:
        raise VerifyError(f"the self-test failed: {done.stderr.strip()[-400:]}",
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
        for key in gpu.get("keys", []):
            kernels = key.get("kernels", [])
            chosen = next((k for k in kernels if k.get("name") == key.get("chosen")), None)
            normal = (chosen or {}).get("normal", {})
            speedups = [p["speedup"] for p in key.get("sweep", [])
                        if isinstance(p.get("speedup"), int | float)]
            auto = key.get("sageattn_auto", {})
            out.append(KeyResult(
                gpu=int(gpu["index"]), gpu_name=str(gpu.get("name", "")),
                arch=str(gpu["arch"]), dtype=str(key["dtype"]), head_dim=int(key["head_dim"]),
                chosen=key.get("chosen"), cosine=normal.get("cosine"),
                rel_l2=normal.get("rel_l2"), best_speedup=max(speedups) if speedups else None,
                crossover=key.get("crossover"),
                auto_passed=auto.get("passed") if "passed" in auto else None,
                auto_kernel=auto.get("kernel"),
                rejected=tuple(k["name"] for k in kernels if not k.get("passed"))))
    return out


def calibration(results: list[KeyResult]) -> dict[str, Any]:
    """What the runtime reads: per arch|dtype|head size, the length from which to route.
    Several GPUs of one arch keep the most cautious (largest) crossover."""
    crossovers: dict[str, int | None] = {}
    for r in results:
        value = r.crossover if r.chosen else None
        key = r.calibration_key
        if key in crossovers:
            old = crossovers[key]
            value = None if old is None or value is None else max(old, value)
        crossovers[key] = value
    return {"schema_version": 1, "crossovers": crossovers}


def write_calibration(prefix: Path, data: dict[str, Any]) -> Path:
    path = prefix / "sagedoctor" / "calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def verdict(report: dict[str, Any], results: list[KeyResult]) -> str:
    """'routing': some kernel is used somewhere; 'sdpa-only': correct but never faster, or
    none correct; 'broken': SageAttention did not even import."""
    if report.get("import") != "ok" or report.get("error"):
        return "broken"
    if any(r.chosen and r.crossover for r in results):
        return "routing"
    return "sdpa-only"


def write_verified(prefix: Path, report: dict[str, Any], results: list[KeyResult],
                   when: str) -> Path | None:
    """The fingerprint the start-up hook compares with; removed when nothing may be routed,
    so an old verdict cannot switch a broken build on."""
    path = prefix / "sagedoctor" / "verified.json"
    outcome = verdict(report, results)
    if outcome != "routing":
        path.unlink(missing_ok=True)
        return None
    data = {"schema_version": 1, "verified_at": when, "verdict": outcome,
            "fingerprint": report.get("fingerprint", {}),
            "kernels": {r.calibration_key: r.chosen for r in results}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def render_table(results: list[KeyResult]) -> str:
    head = ("GPU", "dtype", "D", "kernel", "cosine", "rel L2", "best speed-up", "routes from",
            "sageattn() auto")
    rows = [head]
    for r in results:
        rows.append((
            f"{r.gpu} sm{r.arch.replace('.', '')}", r.dtype, str(r.head_dim),
            r.chosen or "none (SDPA)",
            f"{r.cosine:.5f}" if r.cosine is not None else "-",
            f"{r.rel_l2:.4f}" if r.rel_l2 is not None else "-",
            f"{r.best_speedup:.2f}x" if r.best_speedup is not None else "-",
            (f"{r.crossover} tokens" if r.crossover else "never") if r.chosen else "never",
            {True: "correct", False: "WRONG", None: "n/a"}[r.auto_passed]
            + (f" ({r.auto_kernel})" if r.auto_kernel else ""),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    return "\n".join(lines) + "\n"
