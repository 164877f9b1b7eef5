"""With no app found and no --venv, --python or --comfyui, sagedoctor never takes its own
environment (the venv or tool folder it runs from) as the target: the Python areas say that
nothing was chosen and name the three ways to choose, and the exit code comes from the table
(1: fixable; 2 where no GPU makes SageAttention impossible anyway). An active venv that is not
sagedoctor's own is still the target."""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

from tests.standins import H200, clean_env, fake_nvidia_smi, make_venv, run_cli

WAYS = ("--venv DIR", "--python EXE", "--comfyui DIR")


def with_gpu(tmp_path: Path) -> dict[str, str]:
    csv = (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8")
    fake_nvidia_smi(tmp_path / "bin", "replay", csv)
    return clean_env(tmp_path, tmp_path / "bin")


def no_target_finding(report: dict) -> dict:
    (found,) = [f for f in report["findings"] if f["code"] == "SD190"]
    assert found["area"] == "python" and found["severity"] == "error"
    assert "does not diagnose its own environment" in found["detail"]
    assert all(way in found["fix"] for way in WAYS), found["fix"]
    return found


def test_check_with_no_app_names_the_three_ways_and_never_inspects_itself(
        tmp_path: Path) -> None:
    done = run_cli(["check", "--json"], with_gpu(tmp_path))
    report = json.loads(done.stdout)
    assert report["facts"]["target"] is None  # not sys.prefix, nothing of it read
    no_target_finding(report)
    assert done.returncode == 1  # fixable: name the app


def test_check_without_a_gpu_still_exits_2(tmp_path: Path) -> None:
    done = run_cli(["check", "--json"], clean_env(tmp_path))
    report = json.loads(done.stdout)
    no_target_finding(report)
    assert {f["code"] for f in report["findings"]} >= {"SD111"}
    assert done.returncode == 2


def test_its_own_venv_active_is_not_a_target_either(tmp_path: Path) -> None:
    env = {**with_gpu(tmp_path), "VIRTUAL_ENV": sys.prefix}  # a developer's activated .venv
    done = run_cli(["check", "--json"], env)
    assert json.loads(done.stdout)["facts"]["target"] is None
    text = run_cli(["check"], env)
    assert all(way in text.stdout for way in WAYS) and text.returncode == 1


def test_another_active_venv_is_the_target(tmp_path: Path) -> None:
    app = tmp_path / "app venv"
    make_venv(app)
    done = run_cli(["check", "--json"], {**with_gpu(tmp_path), "VIRTUAL_ENV": str(app)})
    assert json.loads(done.stdout)["facts"]["target"]["prefix"] == str(app)


def test_plan_and_install_stop_with_the_same_advice_and_change_nothing(tmp_path: Path) -> None:
    env = with_gpu(tmp_path)
    site = Path(sysconfig.get_paths()["purelib"])  # sagedoctor's own: nothing changes there
    before = sorted(p.name for p in site.iterdir())
    for args in (["plan"], ["install", "--dry-run"], ["install"]):
        done = run_cli(args, env)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert all(way in done.stdout + done.stderr for way in WAYS), (args, done.stdout)
    assert sorted(p.name for p in site.iterdir()) == before
