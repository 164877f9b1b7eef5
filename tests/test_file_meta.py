"""file_meta's writers where the file belongs to another user: sagedoctor's own records are
replaced whole (the folder is ours to write), the user's invokeai.yaml is rewritten in place
so its owner stays. Another user is a real one: a forked child that drops to `nobody`."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sagedoctor.file_meta import meta_of, write_atomic, write_keeping_meta

NOBODY = 65534
OTHER = 1  # daemon: neither root nor nobody

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(os, "getuid") or os.getuid() != 0,
    reason="needs root to make a file of another user and to become nobody")


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder nobody may write (pytest's tmp_path is under a 0700 folder of root's)."""
    folder = Path(tempfile.mkdtemp(prefix="sagedoctor meta ü "))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def as_nobody(work: Callable[[], None]) -> str:
    """Run ``work`` in a forked child as nobody; what it raised, or '' where it did not."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        outcome = b""
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            work()
        except BaseException as exc:
            outcome = f"{type(exc).__name__}: {exc}".encode()
        os.write(write, outcome or b"ok")
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return "" if said == "ok" else said


def test_a_record_of_another_user_is_replaced_whole(shared_folder: Path) -> None:
    record = shared_folder / "verified.json"
    record.write_bytes(b'{"old": true}')
    os.chown(record, OTHER, OTHER)
    record.chmod(0o644)  # not writable by nobody in place; the folder is

    assert as_nobody(lambda: write_atomic(record, b'{"new": true}')) == ""
    assert record.read_bytes() == b'{"new": true}'
    info = record.stat()
    assert stat.S_IMODE(info.st_mode) == 0o644  # the mode is kept; the owner cannot be
    assert info.st_uid == NOBODY
    assert sorted(p.name for p in shared_folder.iterdir()) == ["verified.json"]


def test_the_users_file_of_another_owner_is_rewritten_in_place(shared_folder: Path) -> None:
    config = shared_folder / "invokeai.yaml"
    config.write_bytes(b"schema_version: 4.0.3\n")
    os.chown(config, OTHER, OTHER)
    config.chmod(0o666)
    before = config.stat()
    meta = meta_of(config)

    assert as_nobody(lambda: write_keeping_meta(config, b"attention_backend: sage\n",
                                                meta)) == ""
    after = config.stat()
    assert config.read_bytes() == b"attention_backend: sage\n"
    assert (after.st_ino, after.st_uid, after.st_gid) == (before.st_ino, OTHER, OTHER)
    assert sorted(p.name for p in shared_folder.iterdir()) == ["invokeai.yaml"]
