"""Package operations in the target venv: uv where it exists, else the venv's own pip
(never for uninstall: uv-made venvs have no pip, and removal must not depend on one).

Every call installs with --no-deps, so nothing but the named distributions changes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import SagedoctorError
from ..proc import run_tool


class InstallError(SagedoctorError):
    code = "SD910"


def _uv() -> str | None:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except Exception:
        return shutil.which("uv")


@dataclass(frozen=True)
class Installer:
    python: Path
    uv: str | None
    cache_dir: Path | None = None  # uv's cache, inside sagedoctor's (so --offline works)
    offline: bool = False
    allow_pip: bool = True  # False: uv or an error, never the target's own pip

    @classmethod
    def for_target(cls, python: Path, cache_dir: Path | None = None,
                   offline: bool = False, allow_pip: bool = True) -> Installer:
        return cls(python, _uv(), cache_dir, offline, allow_pip)

    def _uv_options(self) -> list[str]:
        out = ["--cache-dir", str(self.cache_dir)] if self.cache_dir else []
        return out + (["--offline"] if self.offline else [])

    def _pip(self, *args: str) -> list[str]:
        if self.uv:
            return [self.uv, "pip", *args, "--python", str(self.python), *self._uv_options()]
        if not self.allow_pip:
            raise InstallError(f"uv is not found, and {self.python} is not changed through "
                               "its own pip (a uv-made venv has none)",
                               "install uv beside sagedoctor (`pip install uv`, a dependency "
                               "of sagedoctor) or put it on PATH; nothing was changed")
        return [str(self.python), "-m", "pip", *args, "--disable-pip-version-check"]

    def _run(self, argv: list[str], what: str, timeout: float = 900) -> None:
        result = run_tool(argv, timeout=timeout)
        if result.returncode != 0:
            text = result.stderr or result.stdout or ""
            if "returned an invalid response" in text and "Querying Python" in text:
                # uv reads the interpreter's own stdout: a sitecustomize or .pth line that
                # prints breaks it (sagedoctor's probe ignores such noise, uv cannot).
                raise InstallError(
                    f"{what} failed: uv cannot query {self.python}, which prints something "
                    "of its own at start-up (a sitecustomize.py or a .pth file)",
                    "make that start-up code quiet (print to stderr, or only when asked), "
                    "then run again; nothing was changed by this step")
            tail = text.strip().splitlines()[-8:]
            raise InstallError(f"{what} failed (exit {result.returncode}): " + " | ".join(tail),
                               "the install log has the full output")

    def install(self, requirements: list[str], *, index_url: str | None = None,
                reinstall: bool = False) -> None:
        args = ["install", "--no-deps"]
        if reinstall:
            args.append("--reinstall" if self.uv else "--force-reinstall")
        if index_url:
            args += ["--index-url", index_url]
        self._run(self._pip(*args, *requirements), f"installing {' '.join(requirements)}")

    def uninstall(self, names: list[str]) -> None:
        args = ["uninstall"] if self.uv else ["uninstall", "-y"]
        self._run(self._pip(*args, *names), f"uninstalling {' '.join(names)}")

    def install_into(self, folder: Path, requirements: list[str]) -> None:
        """Build tools into a private folder (on PYTHONPATH for the build), not the venv."""
        if self.uv:
            argv = [self.uv, "pip", "install", "--target", str(folder), "--python",
                    str(self.python), *self._uv_options(), *requirements]
        else:
            argv = [str(self.python), "-m", "pip", "install", "--target", str(folder),
                    "--disable-pip-version-check", *requirements]
        self._run(argv, f"installing build tools {' '.join(requirements)}")
