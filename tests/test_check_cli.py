"""`sagedoctor check` end to end: real venvs, a fake nvidia-smi on PATH, the real CLI process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sagedoctor import __version__
from tests.standins import (
    H200,
    INVOKEAI_CONFIG_NEW,
    INVOKEAI_CONFIG_OLD,
    add_dist,
    add_invokeai,
    add_sageattention,
    add_torch,
    clean_env,
    fake_nvidia_smi,
    make_venv,
    run_cli,
)

TORCH_CU130 = (H200 / "torch-version.py").read_text(encoding="utf-8")
ALL_MODULES = ("_fused", "_qattn_sm80", "_qattn_sm89", "_qattn_sm90")


def codes(report: dict, severity: str | None = None) -> set[str]:
    return {f["code"] for f in report["findings"] if severity in (None, f["severity"])}


@pytest.fixture(scope="module")
def h200_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venvs") / "app venv"
    site = make_venv(venv)
    add_torch(site, TORCH_CU130)
    add_dist(site, "triton", "3.6.0")
    add_sageattention(site, "2.2.0", ALL_MODULES)
    add_dist(site, "sagedoctor-runtime", __version__)  # what `install` bundles: a ready venv
    return venv


def check_json(args: list[str], env: dict[str, str]) -> tuple[int, dict]:
    result = run_cli(["check", "--json", *args], env)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def test_cpu_machine_without_nvidia_exits_2_and_says_why(tmp_path: Path) -> None:
    result = run_cli(["check"], clean_env(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "SD111" in result.stdout
    assert "cannot work on this machine" in result.stdout


def test_one_h200_replayed_from_a_real_nvidia_smi(tmp_path: Path, h200_venv: Path) -> None:
    csv = (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8")
    fake_nvidia_smi(tmp_path / "bin", "replay", csv)
    code, report = check_json(["--venv", str(h200_venv)], clean_env(tmp_path, tmp_path / "bin"))
    gpu = report["facts"]["gpu"]
    assert gpu["source"] == "nvidia-smi"
    assert gpu["driver_version"] == "580.159.04"
    assert [(g["name"], g["compute_capability"], g["memory_mib"]) for g in gpu["gpus"]] == [
        ("NVIDIA H200", "9.0", 143771)]
    torch = report["facts"]["target"]["torch"]
    assert (torch["version"], torch["full_version"], torch["cuda"]) == (
        "2.11.0", "2.11.0+cu130", "13.0")
    assert codes(report, "error") == set()
    assert code == 0
    assert report["status"] == "ready"


def test_two_mixed_gpus_are_all_listed_and_the_old_one_flagged(
        tmp_path: Path, h200_venv: Path) -> None:
    csv = ("0, NVIDIA GeForce RTX 4090, 8.9, 581.57, 24564 MiB\n"
           "1, NVIDIA GeForce GTX 1080 Ti, 6.1, 581.57, 11264 MiB\n")
    fake_nvidia_smi(tmp_path / "bin", "replay", csv)
    code, report = check_json(["--venv", str(h200_venv)], clean_env(tmp_path, tmp_path / "bin"))
    names = [g["name"] for g in report["facts"]["gpu"]["gpus"]]
    assert names == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce GTX 1080 Ti"]
    old = [f for f in report["findings"] if f["code"] == "SD112"]
    assert len(old) == 1 and "GTX 1080 Ti" in old[0]["detail"]
    assert old[0]["fatal"] is False  # the 4090 still works
    # torch cu130 has no kernels for Pascal, but SageAttention does not use that GPU: torch
    # need not change, and the 4090 is ready
    assert "SD144" in codes(report, "info") and "SD144" not in codes(report, "error")
    assert "needs 8.0 or newer" in old[0]["detail"]
    assert code == 0


def test_r470_driver_without_compute_cap_falls_back_to_the_name_table(
        tmp_path: Path, h200_venv: Path) -> None:
    csv = ("0, NVIDIA GeForce RTX 3090, 470.182.03, 24268 MiB\n"
           "1, NVIDIA Graphics Device, 470.182.03, 16160 MiB\n")
    fake_nvidia_smi(tmp_path / "bin", "r470", csv)
    _, report = check_json(["--venv", str(h200_venv)], clean_env(tmp_path, tmp_path / "bin"))
    gpus = report["facts"]["gpu"]["gpus"]
    assert [(g["compute_capability"], g["cc_source"]) for g in gpus] == [
        ("8.6", "name-table"), (None, "unknown")]
    assert "SD115" in codes(report, "warn")
    # torch 2.11+cu130 needs driver 580; 470 is far too old
    assert "SD120" in codes(report, "error")


def test_garbage_from_nvidia_smi_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path / "bin", "replay", "\x00\x07garbage, ,\n<html>oops</html>\n")
    code, report = check_json([], clean_env(tmp_path, tmp_path / "bin"))
    detail = next(f["detail"] for f in report["findings"] if f["code"] == "SD116")
    assert "nothing usable" in detail
    assert code == 1


def test_failing_nvidia_smi_reports_its_message(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path / "bin", "fail")
    _, report = check_json([], clean_env(tmp_path, tmp_path / "bin"))
    detail = next(f["detail"] for f in report["findings"] if f["code"] == "SD116")
    assert "Driver/library version mismatch" in detail


def test_hanging_nvidia_smi_hits_the_timeout(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path / "bin", "hang")
    env = clean_env(tmp_path, tmp_path / "bin")
    env["SAGEDOCTOR_TIMEOUT"] = "1"
    started = time.monotonic()
    code, report = check_json([], env)
    elapsed = time.monotonic() - started
    assert elapsed < 15, f"check took {elapsed:.1f} s: the hang was not cut off"
    detail = next(f["detail"] for f in report["findings"] if f["code"] == "SD116")
    assert "did not answer within 1 s" in detail
    assert code == 1


def test_json_report_replays_through_facts(tmp_path: Path, h200_venv: Path) -> None:
    csv = (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8")
    fake_nvidia_smi(tmp_path / "bin", "replay", csv)
    env = clean_env(tmp_path, tmp_path / "bin")
    code, report = check_json(["--venv", str(h200_venv)], env)
    saved = tmp_path / "réport with space.json"
    saved.write_text(json.dumps(report), encoding="utf-8")
    code2, replay = check_json(["--facts", str(saved)], clean_env(tmp_path))
    assert replay["findings"] == report["findings"]
    assert replay["facts"] == report["facts"]
    assert code2 == code


def test_one_area_runs_only_what_it_needs(tmp_path: Path) -> None:
    code, report = check_json(["gpu"], clean_env(tmp_path))
    assert {f["area"] for f in report["findings"]} == {"gpu"}
    assert report["facts"]["target"] is None  # the interpreter was never asked
    assert code == 2


def test_no_color_wins_over_force_color(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    env["FORCE_COLOR"] = "1"
    assert "\x1b[" in run_cli(["check", "system"], env).stdout
    env["NO_COLOR"] = "1"
    assert "\x1b[" not in run_cli(["check", "system"], env).stdout


def test_a_broken_facts_file_exits_3_with_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "facts.json"
    bad.write_text('{"schema_version": 1, "system": {"os": 3}}', encoding="utf-8")
    result = run_cli(["check", "--facts", str(bad)], clean_env(tmp_path))
    assert result.returncode == 3
    assert "SD901" in result.stderr and "fix:" in result.stderr


def test_missing_venv_is_a_could_not_check_finding(tmp_path: Path) -> None:
    code, report = check_json(["--venv", str(tmp_path / "nope")], clean_env(tmp_path))
    failure = next(f for f in report["findings"] if f["code"] == "SD190")
    assert failure["area"] == "python"
    assert "does not exist" in failure["detail"]
    assert code == 2  # still no GPU here


def _invokeai_root(tmp_path: Path, config_source: str, yaml_text: str) -> Path:
    root = tmp_path / "Invoke AI ünïcode"
    site = make_venv(root / ".venv")
    add_torch(site, TORCH_CU130)
    add_invokeai(site, "6.14.2", config_source)
    (root / "invokeai.yaml").write_text(yaml_text, encoding="utf-8")
    return root


def test_invokeai_root_from_env_is_the_default_target_and_bad_key_is_caught(
        tmp_path: Path) -> None:
    root = _invokeai_root(tmp_path, INVOKEAI_CONFIG_OLD,
                          "# Internal metadata - do not edit:\nschema_version: 4.0.3\n\n"
                          "attention_type: torch-sdp\nattention_backend: sage\n")
    env = clean_env(tmp_path)
    env["INVOKEAI_ROOT"] = str(root)
    _, report = check_json([], env)
    inv = report["facts"]["invokeai"]
    assert (inv["root_source"], inv["schema_version"], inv["attention_type"]) == (
        "INVOKEAI_ROOT", "4.0.3", "torch-sdp")
    target = report["facts"]["target"]
    assert target["prefix"] == str(root / ".venv")  # InvokeAI's venv was inspected by default
    assert target["invokeai"]["attention_backend_supported"] is False
    assert {"SD182", "SD184"} <= codes(report)


def test_invokeai_that_declares_attention_backend_is_detected(tmp_path: Path) -> None:
    root = _invokeai_root(tmp_path, INVOKEAI_CONFIG_NEW, "schema_version: 4.0.3\n")
    _, report = check_json(["--root", str(root), "--venv", str(root / ".venv")],
                           clean_env(tmp_path))
    package = report["facts"]["target"]["invokeai"]
    assert package["attention_backend_supported"] is True
    assert package["attention_backend_choices"] == ["auto", "torch-sdp", "sage"]
    assert not {"SD182", "SD184"} & codes(report)


def test_hostile_invokeai_yaml_is_a_warning(tmp_path: Path) -> None:
    root = _invokeai_root(tmp_path, INVOKEAI_CONFIG_OLD, "schema_version: [unclosed\n: : :\n")
    _, report = check_json(["invokeai", "--root", str(root)], clean_env(tmp_path))
    assert "SD183" in codes(report, "warn")


def test_an_interpreter_that_answers_garbage_is_a_could_not_check_finding(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\ncat > /dev/null\necho 'Welcome to Python!'\n", encoding="utf-8")
    fake.chmod(0o755)
    code, report = check_json(["python", "--python", str(fake)], clean_env(tmp_path))
    failure = next(f for f in report["findings"] if f["code"] == "SD190")
    assert "gave no answer" in failure["detail"] and "Welcome to Python!" in failure["detail"]
    assert code == 1
