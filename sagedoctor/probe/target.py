"""The target interpreter: which one, and what it has installed (asked through itself)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

import packaging

from ..errors import FactsFileError, TargetError
from ..facts import TargetFacts, parse_record
from ..proc import ToolMissing, ToolTimeout, run_tool

TARGET_TIMEOUT_S = 20.0


def venv_python(venv: PurePath, os_name: str) -> PurePath:
    """The venv's interpreter: ``Scripts\\python.exe`` on Windows, ``bin/python`` elsewhere."""
    if os_name == "windows":
        return PureWindowsPath(venv, "Scripts", "python.exe")
    return PurePosixPath(venv, "bin", "python")


def current_os() -> str:
    return "windows" if sys.platform == "win32" else sys.platform.rstrip("0123456789")


def default_interpreter(env: dict[str, str] | None = None) -> Path:
    """The active venv's interpreter (VIRTUAL_ENV), else the one running sagedoctor."""
    env = dict(os.environ) if env is None else env
    active = env.get("VIRTUAL_ENV")
    if active:
        candidate = Path(venv_python(Path(active), current_os()))
        if candidate.exists():
            return candidate
    return Path(sys.executable)


def _script_text() -> str:
    # A plain file read: importlib.resources costs ~15 ms of imports on every check.
    return Path(__file__).with_name("target_script.py").read_text(encoding="utf-8")


def probe_target(python: Path) -> TargetFacts:
    if not python.exists():
        raise TargetError(
            f"the interpreter {python} does not exist",
            "pass --venv DIR (the folder holding bin/ or Scripts\\) or --python EXE",
        )
    # Our own packaging, appended last, only serves a target that has neither packaging nor pip.
    fallback = str(Path(packaging.__file__).parent.parent)
    timeout = float(os.environ.get("SAGEDOCTOR_TARGET_TIMEOUT", TARGET_TIMEOUT_S))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONIOENCODING"] = "utf-8"
    try:
        result = run_tool([str(python), "-I", "-", fallback], timeout=timeout, env=env,
                          input_text=_script_text())
    except ToolMissing as exc:
        raise TargetError(f"cannot start {python}", "check that the venv is intact") from exc
    except ToolTimeout as exc:
        raise TargetError(str(exc), "check that the interpreter starts by hand") from exc
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or [""])[-1]
        raise TargetError(
            f"{python} failed to report (exit {result.returncode}): {tail}",
            "run it by hand to see the error; recreate the venv if it is broken",
        )
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise TargetError(f"{python} answered with something that is not JSON: {exc}") from exc
    try:
        return parse_record(TargetFacts, data, "target", str(python))
    except FactsFileError as exc:
        raise TargetError(f"unexpected answer from {python}: {exc.message}") from exc
