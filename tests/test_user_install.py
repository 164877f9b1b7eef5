"""README's user install, followed literally on Linux: a wheel of this tree, `uv tool install
./sagedoctor-<version>-py3-none-any.whl` into tool folders of the test's own, then
`sagedoctor check` from the PATH uv put it on, away from this tree and with no app around.
uv resolves the dependencies offline, from wheels of the test interpreter's own installed
copies (tests/wheelhouse.py): nothing is downloaded."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

from tests.standins import clean_env
from tests.wheelhouse import wheelhouse

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="README's Linux commands")


def linux_install_commands() -> list[str]:
    """The shell lines of README's Linux user install (its ```sh block under ### Linux)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Install"):]
    section = section[section.index("### Linux"):]
    block = section[section.index("```sh") + len("```sh"):]
    block = block[:block.index("```")]
    return [line.split("#")[0].strip() for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def build_wheel(out: Path, tmp_path: Path) -> Path:
    """sagedoctor's wheel from a copy of this tree (nothing is written into it)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "sagedoctor", source / "sagedoctor",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "-w", str(out),
                    str(source)], check=True, capture_output=True, timeout=300)
    return next(out.glob("sagedoctor-*.whl"))


def test_readme_linux_user_install_with_a_local_wheel_then_check(tmp_path: Path) -> None:
    commands = linux_install_commands()
    install = next(c for c in commands if c.startswith("uv tool install ./sagedoctor-"))
    assert "sagedoctor check" in commands

    folder = tmp_path / "Downloads"  # where the user saved the wheel
    wheel = build_wheel(folder, tmp_path)
    assert re.fullmatch(r"uv tool install \./sagedoctor-[^ ]+-py3-none-any\.whl", install)
    argv = ["uv", "tool", "install", f"./{wheel.name}"]  # README's line with this version

    tools = tmp_path / "uv tools"
    env = clean_env(tmp_path, path_prefix=tools / "bin")
    env |= {"UV_TOOL_DIR": str(tools / "envs"), "UV_TOOL_BIN_DIR": str(tools / "bin"),
            "UV_CACHE_DIR": str(tmp_path / "uv cache"), "UV_PYTHON_DOWNLOADS": "never",
            "UV_PYTHON": str(Path(getattr(sys, "_base_executable", sys.executable)).resolve()),
            "UV_OFFLINE": "1",
            "UV_FIND_LINKS": str(wheelhouse(list(distribution("sagedoctor").requires or []),
                                            tmp_path / "wheelhouse"))}
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
    done = subprocess.run([uv, *argv[1:]], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tools / "bin" / "sagedoctor").exists()

    elsewhere = tmp_path / "somewhere else"
    elsewhere.mkdir()
    check = subprocess.run(["sagedoctor", "check"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode in (1, 2), check.stdout + check.stderr  # exit codes: README
    assert "Traceback" not in check.stderr and "internal error" not in check.stdout
    # Its own environment (uv's tool folder) is never the target: it asks for the app's.
    assert str(tools / "envs") not in check.stdout, check.stdout
    assert "--venv DIR" in check.stdout and "--comfyui DIR" in check.stdout
