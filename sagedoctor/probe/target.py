"""The target interpreter: which one, and what it has installed (asked through itself)."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

import packaging

from ..errors import FactsFileError, TargetError
from ..facts import TargetFacts, parse_record
from ..proc import ToolMissing, ToolOutputTooLarge, ToolTimeout
from ..settings import number_from_env
from ..target_answer import ask_target

TARGET_TIMEOUT_S = 20.0
# The answer is a few kB; a broken or hostile interpreter must not fill our memory.
MAX_ANSWER_BYTES = 8 * 1024 * 1024


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


def is_own_environment(python: Path) -> bool:
    """Whether this interpreter belongs to sagedoctor's own environment (the venv, or uv's or
    pipx's tool folder, it runs from): it holds sagedoctor, never the app to diagnose."""
    # Folders compared, not the interpreter's symlink target: every venv's python leads to
    # the same base interpreter.
    try:
        here = python.absolute().parent
        return Path(sys.prefix).resolve() in (here.parent.resolve(), here.resolve())
    except OSError:
        return False


def no_target() -> TargetError:
    return TargetError(
        "no app was found and none was named: sagedoctor does not diagnose its own environment",
        "name the app's Python: --venv DIR (its venv), --python EXE (its interpreter) or "
        "--comfyui DIR (a ComfyUI install)")


def _script_text() -> str:
    # A plain file read: importlib.resources costs ~15 ms of imports on every check.
    return Path(__file__).with_name("target_script.py").read_text(encoding="utf-8")


def _dangling(path: Path) -> str | None:
    """What is wrong with a broken symlink ("a link to X, which does not exist", "a symlink
    loop"), or None if ``path`` is not one."""
    try:
        if not path.is_symlink():
            return None
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # python -> python3 -> python: no target to name
            return "a symlink loop"
        try:
            return f"a link to {os.readlink(path)}, which does not exist"
        except OSError:
            return None
    return None


def missing_target_error(python: Path, venv: Path | None) -> TargetError:
    """Why the interpreter is not there, said in terms of what the user passed."""
    fix = "pass --venv DIR (the folder holding bin/ or Scripts\\) or --python EXE"
    if venv is not None:
        link = _dangling(venv)
        if link is not None:
            return TargetError(f"--venv {venv} is {link}", fix)
        if not venv.exists():
            return TargetError(f"--venv {venv} does not exist", fix)
        if not venv.is_dir():
            return TargetError(f"--venv {venv} is a file, not a folder",
                               "pass the venv's folder, or --python EXE for an interpreter")
    link = _dangling(python)
    if link is not None:
        return TargetError(f"the interpreter {python} is {link}",
                           "the Python this venv was made from is gone: recreate the venv")
    if venv is not None:
        return TargetError(f"{venv} has no {python.relative_to(venv)}: it is not a virtual "
                           "environment, or a broken one", fix)
    return TargetError(f"the interpreter {python} does not exist", fix)


def probe_target(python: Path, venv: Path | None = None) -> TargetFacts:
    try:
        present = python.is_file()
    except OSError as exc:
        raise TargetError(f"cannot look at {python}: {exc.strerror or exc}",
                          "give this user read access to the venv, or pass another one") from exc
    if not present:
        if python.is_dir():
            raise TargetError(f"--python {python} is a folder, not an interpreter",
                              "pass the python executable itself, or --venv DIR")
        raise missing_target_error(python, venv)
    # Our own packaging, appended last, only serves a target that has neither packaging nor pip.
    fallback = str(Path(packaging.__file__).parent.parent)
    timeout = number_from_env(os.environ, "SAGEDOCTOR_TARGET_TIMEOUT", TARGET_TIMEOUT_S)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONIOENCODING"] = "utf-8"
    try:
        answer = ask_target([str(python), "-I", "-", fallback], timeout=timeout, env=env,
                            input_text=_script_text(), max_output_bytes=MAX_ANSWER_BYTES)
    except ToolOutputTooLarge as exc:
        raise TargetError(f"{python} answered with more than {MAX_ANSWER_BYTES // 2**20} MB",
                          "run it by hand: something in that venv prints at start-up "
                          "(a sitecustomize or .pth file)") from exc
    except ToolMissing as exc:
        raise TargetError(f"cannot start {python}", "check that the venv is intact") from exc
    except ToolTimeout as exc:
        raise TargetError(str(exc), "check that the interpreter starts by hand") from exc
    result = answer.result
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or [""])[-1]
        raise TargetError(
            f"{python} failed to report (exit {result.returncode}): {tail}",
            "run it by hand to see the error; recreate the venv if it is broken",
        )
    if answer.text is None:
        noise = answer.noise()
        raise TargetError(
            f"{python} gave no answer: " + (f"it printed only its own output ({noise!r})"
                                            if noise else "it printed nothing"),
            "run it by hand; a sitecustomize or .pth file of that venv may stop scripts "
            "early, or it is not a Python interpreter")
    try:
        data = json.loads(answer.text)
    except (ValueError, RecursionError) as exc:  # ValueError: also ints past the digit limit
        problem = exc if isinstance(exc, ValueError) else "nested too deeply"
        raise TargetError(f"{python} answered with something that is not JSON: {problem}") \
            from None
    try:
        return parse_record(TargetFacts, data, "target", str(python))
    except FactsFileError as exc:
        raise TargetError(f"unexpected answer from {python}: {exc.message}") from exc
