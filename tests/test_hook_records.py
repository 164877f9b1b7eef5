"""What is at the per-venv record paths is hostile: a FIFO, a folder or 80 MB of garbage at
verified.json or calibration.json must not hang (a FIFO's open waits for a writer) or slow
every Python of the venv. The hook stays off with one line saying why; the tool side says why
too. In a real venv with the bundled runtime and the real CPU torch (tests/test_hook.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from sagedoctor.runtime.records import RecordUnreadable, read_record_bytes
from tests.standins import run_cli
from tests.test_hook import SCRIPT, live_fingerprint, ours, venv, write_verified

pytest.importorskip("torch")
assert venv  # the fixture, imported for the tests below

HUGE = 80 * 1024 * 1024


def put_hostile(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:  # 80 MB of garbage
        with path.open("wb") as handle:
            handle.truncate(HUGE)


def run_app_bounded(python: Path, env: dict[str, str]) -> tuple[dict, str]:
    # The timeout turns the old hang into a failure.
    done = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=90)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


WORDS = {"fifo": "is a FIFO, not a file", "folder": "is a folder, not a file",
         "huge": f"is {HUGE} bytes, over the 8 MB"}


@pytest.mark.parametrize("name", ["verified.json", "calibration.json"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "huge"])
def test_a_hostile_record_keeps_the_hook_off_with_one_line(
        venv: tuple[Path, dict[str, str]], name: str, kind: str) -> None:
    python, env = venv
    write_verified(python, live_fingerprint(python, env), env)
    assert run_cli(["enable", "--python", str(python)], env).returncode == 0
    path = python.parent.parent / "sagedoctor" / name
    put_hostile(path, kind)
    info, stderr = run_app_bounded(python, env)
    assert not info["armed"] and info["same"]  # plain SDPA, answers unchanged
    lines = ours(stderr)
    assert len(lines) == 1, stderr
    assert str(path) in lines[0] and WORDS[kind] in lines[0], lines[0]
    assert "SageAttention stays off" in lines[0]


def test_check_reads_a_fifo_state_record_as_corrupt_instead_of_hanging(
        venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    prefix = python.parent.parent
    key = hashlib.sha256(str(prefix.resolve()).encode("utf-8")).hexdigest()[:16]
    state = Path(env["HOME"]) / ".local" / "state" / "sagedoctor" / "venvs" / f"{key}.json"
    state.parent.mkdir(parents=True)
    os.mkfifo(state)
    done = run_cli(["check", "--python", str(python), "--json"], env, timeout=120)
    assert done.returncode in (0, 1, 2), done.stderr
    # read as a corrupt record (with SageAttention installed, SD169: "does not parse")
    assert json.loads(done.stdout)["facts"]["verification"]["status"] == "corrupt"


@pytest.mark.parametrize("kind", ["fifo", "folder", "huge"])
def test_the_reader_refuses_what_is_no_bounded_regular_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "rec ü.json"
    put_hostile(path, kind)
    with pytest.raises(RecordUnreadable) as caught:
        read_record_bytes(str(path))
    assert WORDS[kind] in str(caught.value)


def test_the_reader_reads_a_regular_file_and_reports_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "rec.json"
    path.write_bytes(b'{"a": 1}')
    assert read_record_bytes(str(path)) == b'{"a": 1}'
    with pytest.raises(RecordUnreadable):
        read_record_bytes(str(path), limit=4)
    with pytest.raises(FileNotFoundError):
        read_record_bytes(str(tmp_path / "none.json"))


def test_enable_refuses_a_fifo_record_instead_of_hanging(
        venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    folder = python.parent.parent / "sagedoctor"
    folder.mkdir()
    os.mkfifo(folder / "verified.json")
    done = run_cli(["enable", "--python", str(python)], env, timeout=60)
    assert done.returncode == 1 and "SD930" in done.stderr, done.stderr
    assert not list(python.parent.parent.glob("lib/python*/site-packages/sagedoctor-*.pth"))
