"""Run the runtime self-test in the target interpreter, parse its report, and turn it into
the per-shape decisions the runtime reads, a verdict for state, and the record `check` and
`plan` read back (a `sageattn()` found wrong on a GPU is remembered)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import exit_codes
from .decide.app_shapes import APP_SHAPES as APP_SHAPES
from .decide.app_shapes import app_decisions, app_shape_speeds
from .errors import SagedoctorError
from .proc import ToolMissing, ToolResult, ToolTimeout, _kill_tree, run_tool
from .runtime.decisions import (
    PROGRESS_PREFIX,
    Calibration,
    Decision,
    build_fingerprint,
    gpu_identity,
    load_calibration,
    parse_shape_key,
    save_calibration,
    shape_key,
)
from .runtime.files import RUNTIME_PACKAGE as PACKAGE
from .runtime.records import parse_fingerprint

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
    # per kernel and smooth_k setting, the accuracy suite's worst case:
    # (kernel, setting, case, cosine, passed)
    worst: tuple[tuple[str, str, str, float | None, bool], ...] = ()

    @property
    def routes(self) -> bool:
        return bool(self.chosen) and self.routed > 0

    @property
    def calibration_key(self) -> str:
        return f"{self.arch}|{self.dtype}|{self.head_dim}"


def run_selftest(python: Path, quick: bool, timeout: float = 1800, fresh: bool = False,
                 progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """`fresh`: measure as if no earlier run had stored decisions for this build.
    `progress` gets one parsed progress line per measured shape (see `progress_line`)."""
    argv = [str(python), "-m", f"{PACKAGE}.selftest", "--json"] + (["--quick"] if quick else [])
    argv += ["--fresh"] if fresh else []
    from .target_answer import TOKEN_ENV, framed, new_token

    token = new_token()  # the report comes framed: the venv may print at start or exit
    from .folders import bytecode_folder
    from .runtime.bytecode import CACHE_ENV

    # (where its torch has no bytecode and it writes none: see runtime/bytecode.py)
    env = {**os.environ, TOKEN_ENV: token, CACHE_ENV: str(bytecode_folder())}
    try:
        if progress is None:
            done = run_tool(argv, timeout=timeout, env=env, answer_frame=token.encode())
        else:
            done = _run_streaming([*argv, "--progress"], timeout, progress, env)
    except ToolTimeout:
        raise VerifyError(f"the self-test did not finish within {timeout:.0f} s", "") from None
    except ToolMissing:
        raise VerifyTargetError(f"{python} does not exist", "pass --venv DIR or --python EXE") \
            from None
    if done.returncode != 0:
        raise VerifyTargetError(f"the self-test failed: {done.stderr.strip()[-400:]}",
                          f"run `sagedoctor install --python {python}` to bundle "
                          "the runtime")
    report = framed(done.stdout, token)
    if report is None:  # a runtime from before the frame: its report is the last line
        report = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return parse_report(report)


def parse_progress(line: str) -> dict[str, Any] | None:
    """A progress line of the self-test, checked field by field; None for anything else."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        data = json.loads(line[len(PROGRESS_PREFIX):])
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    out: dict[str, Any] = {}
    for name in ("key", "shape", "what"):
        value = data.get(name)
        out[name] = value[:80] if isinstance(value, str) else ""
    for name in ("done", "left"):
        value = data.get(name)
        out[name] = value if isinstance(value, int) and not isinstance(value, bool) \
            and 0 <= value < 1_000_000 else 0
    for name in ("spent_s", "left_s"):
        value = data.get(name)
        out[name] = float(value) if isinstance(value, int | float) \
            and not isinstance(value, bool) and 0 <= value < 1e7 else None
    return out


def progress_line(data: dict[str, Any]) -> str:
    """'bfloat16 D128 1x24: 1x24x9728 measured (12 done, about 9 left, ~14 s left)'."""
    left_s = data.get("left_s")
    eta = f", ~{left_s:.0f} s left" if isinstance(left_s, float) else ""
    return (f"{data['key']}: {data['shape']} {data['what']} ({data['done']} done, about "
            f"{data['left']} left{eta})")


def _run_streaming(argv: Sequence[str], timeout: float,
                   progress: Callable[[dict[str, Any]], None],
                   env: dict[str, str] | None = None) -> ToolResult:
    """run_tool with the self-test's stderr read line by line: progress lines go to
    `progress` as they come, the rest is kept. The tree is killed on timeout or Ctrl+C."""
    kwargs: dict[str, Any] = {}
    if sys.platform == "win32":
        kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP | getattr(
            subprocess, "CREATE_NO_WINDOW", 0)
    else:
        kwargs["start_new_session"] = True
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, **kwargs)
    except FileNotFoundError as exc:
        raise ToolMissing(argv[0]) from exc
    except PermissionError as exc:
        raise ToolMissing(f"{argv[0]} (not executable)") from exc
    out: list[bytes] = []
    err: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    reader = threading.Thread(target=lambda: out.append(stdout.read()), daemon=True)
    reader.start()

    def read_stderr() -> None:
        for raw in stderr:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            parsed = parse_progress(line)
            if parsed is None:
                if sum(len(e) for e in err) < 1_000_000:
                    err.append(line)
                continue
            with contextlib.suppress(Exception):  # a broken display never stops the test
                progress(parsed)

    errors = threading.Thread(target=read_stderr, daemon=True)
    errors.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.wait()
        raise ToolTimeout(argv, timeout) from None
    except BaseException:
        _kill_tree(proc)
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
        raise
    reader.join(timeout=10)
    errors.join(timeout=10)
    return ToolResult(tuple(argv), proc.returncode,
                      b"".join(out).decode("utf-8", errors="replace"), "\n".join(err))


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
                measured=len(sweep),
                worst=_worst_cases(kernels)))
    return out


def _worst_cases(kernels: list[dict[str, Any]]) -> tuple[tuple[str, str, str, float | None,
                                                               bool], ...]:
    out = []
    for kernel in kernels:
        worst = kernel.get("worst")
        if not isinstance(worst, dict):
            continue  # a report from before the suite
        for setting, case in worst.items():
            if isinstance(case, dict):
                cosine = case.get("cosine")
                out.append((str(kernel.get("name")), str(setting), str(case.get("case")),
                            float(cosine) if isinstance(cosine, int | float) else None,
                            bool(case.get("passed"))))
    return tuple(out)


def render_worst_cases(results: list[KeyResult]) -> str:
    """'bfloat16 D128 sage_fp8_sm90: smooth_k=True joint_offset_600 cos 0.641 (fails), ...'"""
    lines = []
    for r in results:
        if r.worst:
            parts = ", ".join(
                f"{kernel} {setting} {case} "
                + (f"cos {cos:.3f}" if cos is not None else "error")
                + ("" if passed else " (fails)")
                for kernel, setting, case, cos, passed in r.worst)
            lines.append(f"  GPU {r.gpu} {r.dtype} D{r.head_dim}: {parts}")
    if not lines:
        return ""
    return ("Worst case of the accuracy suite per kernel and smooth_k setting (the router "
            "checks each call site on its own data):\n" + "\n".join(lines) + "\n")


def _point_routes(point: dict[str, Any]) -> bool:
    """A sweep point's decision; reports of the first schema had no decision, only times."""
    if "route" in point:
        return point["route"] is True
    kernel, sdpa = point.get("kernel_ms"), point.get("sdpa_ms")
    return isinstance(kernel, int | float) and isinstance(sdpa, int | float) and kernel < sdpa


def calibration(report: dict[str, Any], when: str = "") -> Calibration:
    """The per-GPU, per-shape decisions of one self-test run, for the runtime's file."""
    quick = bool((report.get("measure") or {}).get("quick"))
    fingerprint = parse_fingerprint(report.get("fingerprint"))
    out = Calibration(build_fingerprint(fingerprint.dists if fingerprint is not None else {}))
    inputs = report.get("inputs")
    if isinstance(inputs, dict):
        out.inputs = {str(k): v if isinstance(v, str) else None for k, v in inputs.items()}
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
                    source="verify-quick" if quick else "verify",
                    measured_at=str(point["measured_at"]) if point.get("reused")
                    and isinstance(point.get("measured_at"), str) else when)
                out.put(gpu_id, shape_key(str(key["dtype"]), int(key["head_dim"]),
                                          batch * heads, tokens, tokens, False),
                        decision, str(gpu.get("name", "")), str(gpu["arch"]))
    return out


def _clear_unreadable(path: Path) -> None:
    """What is at the record's path and is no record (a folder, a FIFO, a symlink loop, a
    huge file: what the hook refuses) goes, so that the new one can take its place; the
    name is sagedoctor's, in sagedoctor's folder of the venv."""
    import shutil

    from .runtime.records import record_problem

    if record_problem(str(path)) is None:
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def write_calibration(prefix: Path, data: Calibration) -> Path:
    """Merged into what is there: a quick run never replaces a full one's shapes, and a run
    of another build replaces everything. A full run replaces the earlier sweep of each key it
    measured whole (bisection measures other lengths each time; an older point left between
    the new brackets would contradict them); shapes the app timed itself stay."""
    from .state import VenvFiles

    path = VenvFiles(prefix).calibration
    _clear_unreadable(path)
    existing = load_calibration(str(path))
    for gpu, entry in data.gpus.items():
        keys = {(parsed[0], parsed[1]) for key, decision in entry.decisions.items()
                if decision.source == "verify" and (parsed := parse_shape_key(key)) is not None}
        existing = existing.without_sweep(gpu, keys)
    save_calibration(str(path), existing.merged_with(data))
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
    return "\n".join(lines) + "\n" + render_worst_cases(results)


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


def render_app_rules(data: Calibration, torch_cuda: str | None) -> str:
    """What InvokeAI's fixed rule does at its shapes on each GPU measured here, beside what
    verify measured there (for a venv that holds InvokeAI)."""
    from .decide.app_switch import invokeai_rule_lines

    lines = invokeai_rule_lines(app_shape_speeds(data), torch_cuda)
    return "".join(f"{line}\n" for line in lines)


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


def render_reuse(report: dict[str, Any]) -> str:
    """Whether stored decisions were kept, and why: 'kept 38 stored shape decisions, re-timed
    9 (same SageAttention build, ...)' or 'every shape measured (--fresh: ...)'."""
    reuse = (report.get("measure") or {}).get("reuse")
    if not isinstance(reuse, dict):
        return ""
    why = str(reuse.get("why", ""))[:300]
    kept, timed = reuse.get("kept", 0), reuse.get("timed", 0)
    again = [str(f) for f in reuse.get("families_remeasured") or []][:20]
    if reuse.get("allowed") and isinstance(kept, int) and kept + (timed or 0) > 0:
        line = f"kept {kept} stored shape decisions and re-timed {timed} ({why})"
        if again:
            line += "; measured anew where the sample disagreed: " + ", ".join(again)
        return line + "\n" + _render_sister(report)
    return f"every shape measured: {why}\n" + _render_sister(report)


def _render_sister(report: dict[str, Any]) -> str:
    """'fp16 took 23 shape decisions of bf16 ...': families of the second dtype that borrowed
    the first's decisions (the same kernel) after their sample agreed."""
    sister = (report.get("measure") or {}).get("sister")
    if not isinstance(sister, dict):
        return ""
    families = [str(f) for f in sister.get("families") or []][:20]
    again = [str(f) for f in sister.get("families_remeasured") or []][:20]
    kept, timed = sister.get("kept", 0), sister.get("timed", 0)
    if not isinstance(kept, int) or not isinstance(timed, int) or not (families or again):
        return ""
    line = ""
    if families:
        line = (f"took {kept} shape decisions from the other dtype with the same kernel, after "
                f"a sample of {timed} agreed: " + ", ".join(families))
    if again:
        line += ("; " if line else "") + "measured whole where the other dtype's sample " \
            "disagreed: " + ", ".join(again)
    return line + "\n"


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
    # Over every shape any run stored, each run's decision as the router takes it: stored,
    # or interpolated between that run's brackets (bisection stores different lengths).
    union = sorted({(gpu, shape) for run in runs for gpu, entry in run.gpus.items()
                    for shape in entry.decisions})
    shapes: dict[tuple[str, str], list[bool | None]] = {}
    for gpu, shape in union:
        shapes[(gpu, shape)] = [(found.route if found is not None else None)
                                for found, _how in (run.lookup(gpu, shape) for run in runs)]
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


@dataclass(frozen=True)
class VerifyRun:
    """One self-test run of `verify_venv` and what it wrote."""

    number: int
    report: dict[str, Any]
    results: tuple[KeyResult, ...]
    calibration: Calibration
    calibration_path: Path
    verdict: str  # 'routing', 'sdpa-only' or 'broken'
    seconds: float
    reuse: str  # render_reuse's note: stored decisions kept, or why not


@dataclass(frozen=True)
class VerifyOutcome:
    """What `verify_venv` found and wrote: the last run decides the verdict and the records."""

    runs: tuple[VerifyRun, ...]
    agreement: dict[str, Any]
    verified_path: Path | None  # the venv's arming record, where the verdict is routing

    @property
    def last(self) -> VerifyRun:
        return self.runs[-1]

    @property
    def verdict(self) -> str:
        return self.last.verdict

    @property
    def report(self) -> dict[str, Any]:
        return self.last.report

    @property
    def results(self) -> tuple[KeyResult, ...]:
        return self.last.results

    @property
    def calibration_path(self) -> Path:
        return self.last.calibration_path

    @property
    def stable(self) -> bool:
        return bool(self.agreement["keys_agreeing"] == self.agreement["keys"])

    @property
    def exit_code(self) -> int:
        """0 only for a routing verdict every run agreed on."""
        return 0 if self.verdict == "routing" and self.stable else 1

    def to_json(self) -> dict[str, Any]:
        """What `verify --json` writes."""
        return {"verdict": self.verdict, "report": self.report,
                "calibration": self.last.calibration.to_json(),
                "calibration_path": str(self.calibration_path),
                "verified_path": str(self.verified_path) if self.verified_path else None,
                "agreement": self.agreement}


def verify_venv(python: Path, prefix: Path, quick: bool, fresh: bool = False, repeat: int = 1,
                progress: Callable[[dict[str, Any]], None] | None = None,
                each_run: Callable[[VerifyRun], None] | None = None) -> VerifyOutcome:
    """Run the self-test `repeat` times, write the decisions and the state store's records
    after each run, and say what was found. `progress` gets the self-test's progress per
    measured shape; `each_run` each run as it ends (the CLI shows it before the next)."""
    import datetime
    import time

    from .decide.fixes import quote
    from .hook import refuse_if_pending
    from .probe.target import current_os
    from .state import record_verification, venv_record_path

    # What verify proves of a half-installed venv the next install rolls back would arm it.
    refuse_if_pending(prefix, "verify", f"--venv {quote(str(prefix), current_os())}")
    runs: list[VerifyRun] = []
    signatures = []
    verified: Path | None = None
    for number in range(1, max(1, repeat) + 1):
        started = time.monotonic()
        report = run_selftest(python, quick, fresh=fresh and number == 1, progress=progress)
        took = time.monotonic() - started
        results = key_results(report)
        when = datetime.datetime.now(datetime.timezone.utc).isoformat()
        data = calibration(report, when)
        signatures.append(run_signature(results))
        path = write_calibration(prefix, data)
        outcome = verdict(report, results)
        # The state store's record: what check and plan say of this venv from now on, and
        # (routing only) the venv's arming record the start-up hook reads.
        # the target's report is hostile: a fingerprint that does not parse is recorded as
        # none (its record then matches no venv, and the hook stays off)
        fingerprint = parse_fingerprint(report.get("fingerprint", {}))
        record_verification(prefix, python, outcome,
                            fingerprint.to_json() if fingerprint is not None else {},
                            verify_record(report, results), when, chosen_kernels(results))
        verified = venv_record_path(prefix) if outcome == "routing" else None
        run = VerifyRun(number, report, tuple(results), data, path, outcome, took,
                        render_reuse(report))
        runs.append(run)
        if each_run is not None:
            each_run(run)
    return VerifyOutcome(tuple(runs), agreement([r.calibration for r in runs], signatures),
                         verified)
