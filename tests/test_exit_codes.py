"""The one exit-code table (sagedoctor/exit_codes.py), applied by every command: the real CLI
process, the same broken target, the same code."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagedoctor import exit_codes
from tests.standins import H200, clean_env, fake_nvidia_smi, run_cli

PROFILES = Path(__file__).parent / "profiles"


@pytest.mark.parametrize("command", [
    ["check"], ["plan"], ["install"], ["verify"], ["enable"], ["disable"],
    ["uninstall", "--yes"], ["post-update", "--yes"],
])
def test_a_target_that_is_not_there_is_1_in_every_command(tmp_path: Path,
                                                          command: list[str]) -> None:
    gone = tmp_path / "no such venv"
    # A GPU that works: the target, not the machine, is what is wrong
    csv = (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8")
    fake_nvidia_smi(tmp_path / "bin", "replay", csv)
    done = run_cli([*command, "--venv", str(gone)], clean_env(tmp_path, tmp_path / "bin"))
    assert done.returncode == exit_codes.FIXABLE, (command, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize("repeat", ["0", "-2", "two"])
def test_verify_repeat_below_one_is_a_usage_error(tmp_path: Path, repeat: str) -> None:
    done = run_cli(["verify", "--repeat", repeat, "--venv", str(tmp_path)],
                   clean_env(tmp_path))
    assert done.returncode == exit_codes.USAGE
    assert "--repeat" in done.stderr and done.stdout == ""


def test_install_facts_without_dry_run_is_a_usage_error(tmp_path: Path) -> None:
    facts = PROFILES / "windows-triton-missing.json"
    done = run_cli(["install", "--facts", str(facts)], clean_env(tmp_path))
    assert done.returncode == exit_codes.USAGE
    assert "--dry-run" in done.stderr and done.stdout == ""
    # with --dry-run it is the plan, exit 0
    assert run_cli(["install", "--facts", str(facts), "--dry-run"],
                   clean_env(tmp_path)).returncode == exit_codes.READY


@pytest.mark.parametrize("url", ["ftp://example.org/s.tar.gz", "http://example.org/s.tar.gz",
                                 "https://", "file:///tmp/s.tar.gz", "http://[::1/x"])
def test_a_source_url_that_is_not_https_is_refused_before_anything(tmp_path: Path,
                                                                   url: str) -> None:
    done = run_cli(["install", "--venv", str(tmp_path / "v"), "--source-url", url],
                   clean_env(tmp_path))
    assert done.returncode == exit_codes.USAGE, done.stdout + done.stderr
    assert "--source-url" in done.stderr and "not" in done.stderr
    assert done.stdout == ""  # no plan, no "Nothing to do" printed first
    done = run_cli(["post-update", "--venv", str(tmp_path / "v"), "--source-url", url],
                   clean_env(tmp_path))
    assert done.returncode == exit_codes.USAGE and done.stdout == ""


def test_source_url_from_the_environment_is_checked_up_front(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    env["SAGEDOCTOR_SOURCE_URL"] = "ftp://example.org/s.tar.gz"
    done = run_cli(["install", "--venv", str(tmp_path / "v")], env)
    assert done.returncode == exit_codes.USAGE
    assert "SD905" in done.stderr and "SAGEDOCTOR_SOURCE_URL" in done.stderr
    assert done.stdout == ""


def test_the_readme_and_check_docs_list_the_table() -> None:
    root = Path(__file__).resolve().parent.parent
    for doc in (root / "README.md", root / "docs" / "check.md"):
        text = doc.read_text(encoding="utf-8")
        for code, meaning in exit_codes.TABLE:
            assert f"| {code} | {meaning} |" in text, (doc.name, code)


def test_the_interrupted_row_names_every_signal_an_install_exits_130_for() -> None:
    """Issue 34: SIGTERM and SIGHUP roll an install back and exit 130 as Ctrl+C does; the
    table said "(Ctrl+C)" alone."""
    from sagedoctor.install.signals import STOP_SIGNALS

    meaning = dict(exit_codes.TABLE)[exit_codes.INTERRUPTED]
    for name in ("Ctrl+C", *STOP_SIGNALS):
        assert name in meaning, (name, meaning)
