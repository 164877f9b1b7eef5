"""Errors a user can act on: the real CLI process, each failure named with its fix, on stderr."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.standins import clean_env, make_venv, run_cli


def test_a_usage_error_exits_64_not_2(tmp_path: Path) -> None:
    result = run_cli(["check", "--no-such-option"], clean_env(tmp_path))
    assert result.returncode == 64
    assert "unrecognized arguments" in result.stderr and result.stdout == ""


@pytest.mark.parametrize(("variable", "value"), [
    ("SAGEDOCTOR_TIMEOUT", "five"), ("SAGEDOCTOR_TARGET_TIMEOUT", "-1"),
    ("SAGEDOCTOR_MIN_COSINE", "2"), ("SAGEDOCTOR_RUNTIME", "maybe"),
    # D24 (issue 34): these were accepted silently
    ("SAGEDOCTOR_ROUTE_MARGIN", "abc"), ("SAGEDOCTOR_ROUTE_MARGIN", "-5"),
    ("SAGEDOCTOR_ROUTE_MARGIN", "nan"), ("SAGEDOCTOR_SPEED_CHECK", "banana"),
])
def test_a_bad_setting_names_the_variable(tmp_path: Path, variable: str, value: str) -> None:
    env = clean_env(tmp_path)
    env[variable] = value
    result = run_cli(["check", "system"], env)
    assert result.returncode == 64  # a usage error, as a bad option is
    assert "SD905" in result.stderr and variable in result.stderr and "fix:" in result.stderr
    assert "Traceback" not in result.stderr


def test_json_report_survives_a_console_that_cannot_show_the_path(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    env["PYTHONIOENCODING"] = "cp1252"
    venv = tmp_path / "Проект venv"
    result = run_cli(["check", "python", "--json", "--venv", str(venv)], env)
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert str(venv) in json.dumps(report, ensure_ascii=False)


def test_venv_that_is_a_file_or_a_dangling_link_says_so(tmp_path: Path) -> None:
    a_file = tmp_path / "venv.txt"
    a_file.write_text("", encoding="utf-8")
    link = tmp_path / "gone venv"
    link.symlink_to(tmp_path / "deleted")
    for venv, said in ((a_file, "is a file, not a folder"), (link, "which does not exist")):
        result = run_cli(["check", "python", "--json", "--venv", str(venv)], clean_env(tmp_path))
        report = json.loads(result.stdout)
        detail = next(f["detail"] for f in report["findings"] if f["code"] == "SD190")
        assert said in detail, detail


def test_a_symlink_loop_is_said_as_one(tmp_path: Path) -> None:
    """D25 (issue 34): a loop at bin/python was "a link to python3, which does not exist"."""
    venv = tmp_path / "venv"
    make_venv(venv)
    for name in ("python", "python3"):
        (venv / "bin" / name).unlink(missing_ok=True)
    (venv / "bin" / "python").symlink_to("python3")
    (venv / "bin" / "python3").symlink_to("python")
    looped = tmp_path / "looped venv"
    looped.symlink_to(looped.name)
    for where, said in ((venv, f"the interpreter {venv / 'bin' / 'python'} is a symlink loop"),
                        (looped, f"--venv {looped} is a symlink loop")):
        result = run_cli(["check", "python", "--json", "--venv", str(where)],
                         clean_env(tmp_path))
        report = json.loads(result.stdout)
        detail = next(f["detail"] for f in report["findings"] if f["code"] == "SD190")
        assert said in detail and "does not exist" not in detail, detail


@pytest.mark.parametrize("kind", ["binary", "folder", "fifo", "deep"])
def test_a_facts_file_that_is_not_a_report_is_sd901(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "facts.json"
    if kind == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage\x80")
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("[" * 100_000, encoding="utf-8")
    result = run_cli(["check", "--facts", str(path)], clean_env(tmp_path), timeout=30)
    assert result.returncode == 3
    assert "SD901" in result.stderr and "Traceback" not in result.stderr


def test_a_corrupt_refreshed_index_is_moved_aside_by_refresh(tmp_path: Path) -> None:
    from tests.standins import local_server
    from tests.test_index import _Api  # the recorded GitHub answers on a local server

    env = clean_env(tmp_path)
    user = tmp_path / "home" / ".config" / "sagedoctor" / "wheels_index.toml"
    user.parent.mkdir(parents=True)
    user.write_bytes(b"\x00 not toml [[[")
    fixtures = Path(__file__).parent / "fixtures" / "github_releases.json"
    _Api.pages = json.loads(fixtures.read_text(encoding="utf-8"))["pages"]
    _Api.pypi = json.loads((fixtures.parent / "pypi_versions.json").read_text(encoding="utf-8"))
    _Api.requests = []
    with local_server(_Api) as url:
        result = run_cli(["index", "refresh", "--api", url, "--pypi", f"{url}/simple"], env)
    assert result.returncode == 0, result.stderr
    assert "moved to" in result.stderr
    assert user.with_name("wheels_index.toml.corrupt").read_bytes() == b"\x00 not toml [[["
    assert user.is_file()


def non_utf8_venv(tmp_path: Path) -> Path:
    """A real venv at a path whose bytes are not UTF-8 (made elsewhere and moved: `venv`
    itself cannot write one there), with torch, SageAttention and the runtime."""
    from tests.standins import add_dist, add_sageattention, add_torch, make_venv

    made = tmp_path / "venv"
    site = make_venv(made)
    add_torch(site, "__version__ = '2.11.0+cu130'\ncuda = '13.0'\nhip = None\n", "2.11.0")
    add_sageattention(site, "2.2.0", ("_fused",))
    add_dist(site, "sagedoctor-runtime", "0.1.0")
    prefix = Path(os.fsdecode(os.fsencode(tmp_path) + b"/venv \xff latin-1"))
    try:
        os.rename(made, prefix)
    except (OSError, UnicodeError):
        pytest.skip("this file system refuses a name that is not UTF-8")
    return prefix


@pytest.mark.parametrize("args", [
    ["check"], ["plan"], ["install", "--dry-run"], ["enable"], ["disable"],
    ["uninstall", "--dry-run"], ["post-update"], ["verify"]])
def test_a_venv_at_a_path_that_is_not_utf8_is_no_internal_error(
        tmp_path: Path, args: list[str]) -> None:
    """D8 (issue 34): the venv's key in the state folder encoded its path as UTF-8."""
    import subprocess
    import sys

    prefix = non_utf8_venv(tmp_path)
    done = subprocess.run([sys.executable, "-m", "sagedoctor", *args, "--venv",
                           os.fsencode(prefix)], env=clean_env(tmp_path), capture_output=True,
                          timeout=120, check=False)
    stderr = done.stderr.decode("utf-8", "replace")
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    assert done.returncode in (0, 1, 2), stderr


def test_records_of_a_venv_at_a_path_that_is_not_utf8_read_back(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """D8: what verify writes for such a venv (its path inside) is read back as written."""
    from sagedoctor.runtime.hook import dist_stats
    from sagedoctor.state import record_verification, still_as_verified, venv_site_dirs

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    prefix = non_utf8_venv(tmp_path)
    sites = venv_site_dirs(prefix)
    record_verification(prefix, prefix / "bin" / "python", "routing",
                        {"python": None, "stat": dist_stats(sites), "sites": sites}, {},
                        "2026-12-01T00:00:00+00:00")
    assert still_as_verified(prefix) == (True, ())


HUGE = "1" * 5000  # over int()'s 4300 digits: packaging's Version raised ValueError


def _hugely_versioned(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A venv whose sageattention and triton METADATA say a 5000-digit version, and an
    nvidia-smi whose driver version is one."""
    from tests.standins import H200, add_dist, add_sageattention, add_torch, fake_nvidia_smi

    prefix = tmp_path / "venv"
    site = make_venv(prefix)
    add_torch(site, "__version__ = '2.11.0+cu130'\ncuda = '13.0'\nhip = None\n", "2.11.0")
    add_sageattention(site, "2.2.0", ("_fused",))
    add_dist(site, "triton", "3.6.0")
    for name, version in (("sageattention", "2.2.0"), ("triton", "3.6.0")):
        metadata = site / f"{name}-{version}.dist-info" / "METADATA"
        metadata.write_text(metadata.read_text(encoding="utf-8").replace(version, HUGE),
                            encoding="utf-8")
    csv = (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8")
    assert "580." in csv
    tools = tmp_path / "tools"
    fake_nvidia_smi(tools, "replay", csv.replace("580.", HUGE + ".", 1))
    return prefix, clean_env(tmp_path, tools)


def test_a_5000_digit_version_is_no_internal_error(tmp_path: Path) -> None:
    """D9 (issue 34): in METADATA, nvidia-smi's driver or a --facts file."""
    prefix, env = _hugely_versioned(tmp_path)
    for command in ("check", "plan"):
        done = run_cli([command, "--venv", str(prefix)], env)
        assert done.returncode in (1, 2), done.stdout + done.stderr
        assert "internal error" not in done.stderr, done.stderr
    done = run_cli(["check", "--json", "--venv", str(prefix)], env)
    assert "internal error" not in done.stderr and done.returncode in (1, 2), done.stderr
    report = json.loads(done.stdout)

    def huge(node: object) -> object:  # every version in the report: 5000 digits
        if isinstance(node, dict):
            return {k: HUGE if isinstance(v, str) and k.endswith("version")
                    and "schema" not in k and k != "sagedoctor_version" else huge(v)
                    for k, v in node.items()}
        return [huge(v) for v in node] if isinstance(node, list) else node

    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(huge(report)), encoding="utf-8")
    for command in ("check", "plan"):
        done = run_cli([command, "--facts", str(facts)], env)
        assert "internal error" not in done.stderr, done.stderr
        assert done.returncode in (1, 2), done.stdout + done.stderr
