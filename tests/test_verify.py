"""Reading the self-test's report: a real one, recorded on the H200 with the broken v2.2.0
build, and what `verify` makes of it; the calibration and the verified fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagedoctor.verify import (
    VerifyError,
    calibration,
    key_results,
    parse_report,
    render_table,
    verdict,
)

RECORDED = Path(__file__).parent / "fixtures" / "selftest-h200-v2.2.0.json"
RECORDED_MAIN = Path(__file__).parent / "fixtures" / "selftest-h200-main.json"


def recorded() -> dict:
    return parse_report(RECORDED.read_text(encoding="utf-8"))


def test_the_broken_sm90_kernel_is_rejected_and_nothing_is_routed() -> None:
    report = recorded()
    results = key_results(report)
    assert {(r.dtype, r.head_dim) for r in results} == {
        ("bfloat16", 64), ("bfloat16", 128), ("float16", 64), ("float16", 128)}
    for r in results:
        assert "sage_fp8_sm90" in r.rejected
        assert r.chosen == "sage_fp8_cuda_fp32fp16"  # correct, but slower than SDPA
        assert r.cosine is not None and r.cosine > 0.999
        assert r.best_speedup is not None and r.best_speedup < 1
        assert r.crossover is None
        assert r.auto_passed is False  # what sageattn() itself picks is garbage
    assert verdict(report, results) == "sdpa-only"
    decisions = [d for g in calibration(report).gpus.values() for d in g.decisions.values()]
    assert decisions and not any(d.route for d in decisions)
    table = render_table(results)
    assert "WRONG" in table and "never" in table and "sage_fp8_cuda_fp32fp16" in table


def test_the_good_build_routes_long_sequences_to_the_sm90_kernel() -> None:
    report = parse_report(RECORDED_MAIN.read_text(encoding="utf-8"))
    results = key_results(report)
    assert verdict(report, results) == "routing"
    for r in results:
        assert r.chosen == "sage_fp8_sm90" and not r.rejected and r.auto_passed is True
        assert r.cosine is not None and r.cosine > 0.999
    cal = calibration(report)
    (gpu,) = cal.gpus.values()
    routed = {k for k, d in gpu.decisions.items() if d.route}
    # A report of the first schema (no per-point decision): a point routes where the kernel
    # was faster. Long D=128 shapes route, 1024 tokens never does.
    assert "bfloat16|128|32|32768|32768|0" in routed
    assert "bfloat16|128|32|1024|1024|0" not in routed
    assert "bfloat16|64|32|1024|1024|0" not in routed
    assert report["fingerprint"]["dists"]["sageattention"] == "2.2.0"


def test_a_routing_verdict_writes_the_fingerprint_and_a_failing_one_removes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagedoctor.state import record_verification, state_path, venv_record_path
    from sagedoctor.verify import chosen_kernels, verdict, verify_record

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the user's state store
    prefix = tmp_path / "venv"

    def record(report: dict, results: list, when: str) -> None:
        record_verification(prefix, prefix / "bin" / "python", verdict(report, results),
                            report.get("fingerprint", {}), verify_record(report, results),
                            when, chosen_kernels(results))

    report = recorded()
    results = key_results(report)
    path = venv_record_path(prefix)
    record(report, results, "2026-12-02T00:00:00")
    assert not path.exists() and state_path(prefix).is_file()  # sdpa-only: not armed
    fast = [r.__class__(**{**r.__dict__, "crossover": 12288, "routed": 3}) for r in results]
    report["fingerprint"] = {"python": "3.12.3", "dists": {"torch": "2.11.0"}}
    record(report, fast, "2026-12-02T00:00:00")
    data = json.loads(path.read_text())
    assert data["verdict"] == "routing" and data["fingerprint"]["dists"]["torch"] == "2.11.0"
    assert data["kernels"]["9.0|bfloat16|128"] == "sage_fp8_cuda_fp32fp16"
    record(report, results, "later")
    assert not path.exists()  # a later failing verify switches the hook off


def test_decisions_are_kept_per_gpu_and_a_quick_run_does_not_replace_a_full_one(
        tmp_path: Path) -> None:
    from sagedoctor.runtime.decisions import load_calibration
    from sagedoctor.verify import write_calibration

    report = parse_report(RECORDED_MAIN.read_text(encoding="utf-8"))
    second = json.loads(json.dumps(report["gpus"][0]))
    second.update(index=1, uuid="GPU-second")
    report["gpus"].append(second)
    full = calibration(report, "2026-12-03T00:00:00")
    assert len(full.gpus) == 2
    path = write_calibration(tmp_path, full)
    quick_report = json.loads(json.dumps(report))
    quick_report["measure"] = {"quick": True}
    for key in quick_report["gpus"][0]["keys"]:
        for point in key["sweep"]:
            point["route"] = False
    write_calibration(tmp_path, calibration(quick_report, "2026-12-04T00:00:00"))
    stored = load_calibration(str(path))
    assert {d.source for g in stored.gpus.values() for d in g.decisions.values()} == {"verify"}
    assert stored.to_json()["gpus"] == full.to_json()["gpus"]


def test_repeated_runs_report_agreement_and_the_shapes_that_flipped() -> None:
    from sagedoctor.verify import agreement, run_signature

    report = parse_report(RECORDED_MAIN.read_text(encoding="utf-8"))
    runs, signatures = [], []
    for flip in (False, False, True):
        copy = json.loads(json.dumps(report))
        if flip:
            copy["gpus"][0]["keys"][0]["sweep"][-1]["kernel_ms"] = 1e9
        runs.append(calibration(copy))
        signatures.append(run_signature(key_results(copy)))
    result = agreement(runs, signatures)
    assert result["runs"] == 3 and result["shapes"] > 10
    assert result["shapes_agreeing"] == result["shapes"] - 1
    assert len(result["flipped"]) == 1 and "route route sdpa" in result["flipped"][0]
    # The recorded (first-schema) sweep has one app shape, SDXL's 4096 tokens: it held.
    assert list(result["app_shapes"]) == ["NVIDIA H200|9.0|0 SDXL 1024x1024"]
    assert result["app_shapes_agreeing"] == 1
    sdxl = json.loads(json.dumps(report))
    sdxl["gpus"][0]["keys"][0]["sweep"][2]["kernel_ms"] = 1e-6  # 4096 tokens now "routes"
    flipped = agreement([*runs[:2], calibration(sdxl)], signatures)
    assert flipped["app_shapes"]["NVIDIA H200|9.0|0 SDXL 1024x1024"] == [False, False, True]
    assert flipped["app_shapes_agreeing"] == 0


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"schema_version": 2, "gpus": []}',
                                  '{"schema_version": 1, "gpus": {}}'])
def test_malformed_reports_are_errors(text: str) -> None:
    with pytest.raises(VerifyError):
        parse_report(text)


STAND_IN_SELFTEST = '''
import json, sys, time
prefix = "SAGEDOCTOR_PROGRESS "
assert sys.argv[1:4] == ["-m", "sagedoctor_runtime.selftest", "--json"], sys.argv
assert "--progress" in sys.argv
for done in (1, 2):
    print(prefix + json.dumps({"key": "bfloat16 D128 1x24", "shape": f"1x24x{done}",
                               "what": "measured", "done": done, "left": 2 - done,
                               "spent_s": done, "left_s": 2.0 - done}), file=sys.stderr,
          flush=True)
print("a warning on stderr", file=sys.stderr)
if "SLEEP" in sys.argv[0]:
    time.sleep(60)
print(json.dumps({"schema_version": 1, "gpus": [], "import": "ok"}))
'''


def _stand_in_python(folder: Path, name: str) -> Path:
    """An executable standing in for the target interpreter: it answers `-m <runtime>.
    selftest` with progress lines on stderr and a report on stdout."""
    import os
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(f"#!{sys.executable}\n{STAND_IN_SELFTEST}", encoding="utf-8")
    os.chmod(script, 0o755)
    return script


@pytest.mark.skipif(__import__("sys").platform == "win32", reason="a shebang stand-in")
def test_verify_streams_the_self_tests_progress_and_still_reads_its_report(
        tmp_path: Path) -> None:
    from sagedoctor.verify import run_selftest

    python = _stand_in_python(tmp_path / "a venv é" / "bin", "python")
    seen: list[dict] = []
    report = run_selftest(python, quick=False, progress=seen.append)
    assert report["gpus"] == [] and report["import"] == "ok"
    assert [(p["shape"], p["done"], p["left"]) for p in seen] == [("1x24x1", 1, 1),
                                                                  ("1x24x2", 2, 0)]


@pytest.mark.skipif(__import__("sys").platform == "win32", reason="a shebang stand-in")
def test_a_self_test_past_its_time_is_killed_with_its_progress_stream(tmp_path: Path) -> None:
    import time

    from sagedoctor.verify import run_selftest

    python = _stand_in_python(tmp_path / "bin", "python-SLEEP")
    seen: list[dict] = []
    started = time.monotonic()
    with pytest.raises(VerifyError, match="did not finish within 2 s"):
        run_selftest(python, quick=False, timeout=2, progress=seen.append)
    assert time.monotonic() - started < 20
    assert len(seen) == 2  # the lines before the stall were shown


def test_the_cli_rewrites_one_progress_line_on_a_terminal_and_throttles_a_log() -> None:
    import io

    from sagedoctor.commands.verify import progress_printer

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    data = {"key": "float16 D64 2x10", "shape": "2x10x8192", "what": "measured", "done": 3,
            "left": 40, "spent_s": 3.0, "left_s": 40.0}
    terminal = Terminal()
    show = progress_printer(terminal)
    show(data)
    show({**data, "done": 4})
    assert terminal.getvalue().count("\r\x1b[K") == 2 and "\n" not in terminal.getvalue()
    assert terminal.getvalue().endswith("(4 done, about 40 left, ~40 s left)")
    log = io.StringIO()
    show = progress_printer(log)
    for _ in range(5):
        show(data)
    assert log.getvalue().count("\n") == 1  # at most a line every 10 s
