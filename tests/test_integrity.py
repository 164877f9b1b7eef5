"""A downloaded archive is whole or says why not: real wheels and source archives, cut short
at every kind of place or with one byte flipped."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from sagedoctor.install.integrity import archive_problem
from tests.test_install_kit import sage_wheel


def tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"SageAttention-1/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


SOURCE = tar_gz({"setup.py": b"print('setup')\n" * 50, "csrc/kernel.cu": bytes(range(256)) * 64})


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_whole_archives_pass(tmp_path: Path) -> None:
    assert archive_problem(write(tmp_path, "src.tar.gz", SOURCE), "src.tar.gz") is None
    wheel = sage_wheel(tmp_path / "w")
    assert archive_problem(wheel, wheel.name) is None


@pytest.mark.parametrize("cut", [1, 10, 100, len(SOURCE) // 2, len(SOURCE) - 8, len(SOURCE) - 1])
def test_a_source_archive_cut_anywhere_is_damaged(tmp_path: Path, cut: int) -> None:
    path = write(tmp_path, "x.part", SOURCE[:cut])  # judged by the name it will have
    problem = archive_problem(path, "SageAttention-abc.tar.gz")
    assert problem is not None and ("truncated" in problem or "not a whole" in problem)


def test_a_flipped_byte_in_a_source_archive_is_damaged(tmp_path: Path) -> None:
    data = bytearray(SOURCE)
    data[len(data) // 2] ^= 0xFF
    assert archive_problem(write(tmp_path, "s.tar.gz", bytes(data)), "s.tar.gz") is not None


@pytest.mark.parametrize("how", ["cut", "flip"])
def test_a_damaged_wheel_is_found(tmp_path: Path, how: str) -> None:
    wheel = sage_wheel(tmp_path / "w", kernel="KERNEL = " + repr("k" * 4000) + "\n")
    data = bytearray(wheel.read_bytes())
    if how == "cut":
        data = data[:-50]  # the central directory is gone
    else:
        data[data.index(b"kkkk") + 10] ^= 0x01  # an entry's bytes: its CRC no longer matches
    problem = archive_problem(write(tmp_path, "d.part", bytes(data)), wheel.name)
    assert problem is not None
    assert ("CRC" in problem) if how == "flip" else ("not a whole zip" in problem)


def test_other_files_have_no_archive_check(tmp_path: Path) -> None:
    assert archive_problem(write(tmp_path, "notes.txt", b"\x00garbage"), "notes.txt") is None
