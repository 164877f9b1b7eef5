"""Carry out a Plan step by step, proving afterwards that nothing outside the plan changed.

Downloads and source builds all happen before the venv is touched, so a failed download,
digest or build leaves the venv as it was; a later failed step stops the run and says what was
already done.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from packaging.utils import canonicalize_name

from ..install_record import record_install
from ..invokeai_config import enable_invokeai
from ..proc import ToolMissing, ToolTimeout, run_tool
from ..resolve import Plan, Step
from .bundle import build_runtime_wheel
from .fetch import download, extract_source
from .runner import Installer, InstallError
from .source_build import build_wheel

Progress = Callable[[str], None]
T = TypeVar("T")
SUPPORTED = frozenset({"uninstall", "remove-leftovers", "install", "install-wheel",
                       "install-from-index", "build-from-source", "bundle-runtime",
                       "enable-invokeai", "verify"})
_LIST_DISTS = ("import json, importlib.metadata as m\n"
               "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() "
               "if d.metadata['Name']}))")


def installed_distributions(python: Path) -> dict[str, str]:
    try:
        done = run_tool([str(python), "-I", "-c", _LIST_DISTS], timeout=120)
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (ToolMissing, ToolTimeout, ValueError) as exc:
        raise InstallError(f"could not list the distributions of {python}: {exc}", "") from exc
    if data is None:
        raise InstallError(f"could not list the distributions of {python}",
                           done.stderr.strip()[-300:])
    if not isinstance(data, dict):
        raise InstallError(f"{python} listed its distributions in an unexpected form", "")
    return {str(canonicalize_name(str(k))): str(v) for k, v in data.items()}


def unexpected_changes(before: dict[str, str], after: dict[str, str],
                       allowed: frozenset[str]) -> list[str]:
    names = {str(canonicalize_name(n)) for n in allowed}
    out = []
    for name in sorted(set(before) | set(after)):
        if name in names or before.get(name) == after.get(name):
            continue
        out.append(f"{name} {before.get(name, '(absent)')} -> {after.get(name, '(removed)')}")
    return out


class Executor:
    def __init__(self, plan: Plan, progress: Progress, work: Path, log_dir: Path) -> None:
        self.plan = plan
        self.python = Path(plan.python)
        self.progress = progress
        self.work = work
        self.log_dir = log_dir
        self.installer = Installer.for_target(self.python)
        self.done: list[str] = []
        work.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)

    def run(self, runtime_version: str) -> None:
        unsupported = [s.action for s in self.plan.steps if s.action not in SUPPORTED]
        if unsupported:
            raise InstallError(f"this sagedoctor cannot yet carry out: {', '.join(unsupported)}",
                               "nothing was changed; do that step by hand (see `sagedoctor "
                               "plan`)")
        before = installed_distributions(self.python)
        total = len(self.plan.steps)
        # Downloads and builds first: the venv changes only once every wheel exists.
        prepared: dict[int, Path] = {}
        for number, step in enumerate(self.plan.steps, 1):
            if step.action in ("install-wheel", "build-from-source"):
                self.progress(f"[{number}/{total}] preparing: {step.title}")
                prepared[number] = self._guarded(number, step, partial(self._prepare, step))
        for number, step in enumerate(self.plan.steps, 1):
            if step.action == "verify":
                continue  # the caller verifies, after the proof below
            self.progress(f"[{number}/{total}] {step.title}")
            wheel = prepared.get(number)
            self._guarded(number, step, partial(self._step, step, runtime_version, wheel))
            self.done.append(step.title)
        after = installed_distributions(self.python)
        record_install(self.plan.prefix, before, after, self.plan.changed_distributions)
        changed = unexpected_changes(before, after, self.plan.changed_distributions)
        if changed:
            raise InstallError("distributions outside the plan changed: " + "; ".join(changed),
                               "restore them with the venv's installer; please report this")

    def _guarded(self, number: int, step: Step, action: Callable[[], T]) -> T:
        try:
            return action()
        except InstallError as exc:
            done = "; ".join(self.done) or "nothing"
            raise InstallError(f"step {number} ({step.title}) failed: {exc.message}",
                               f"{exc.fix} Already done: {done}.") from exc

    def _prepare(self, step: Step) -> Path:
        """A wheel on disk for this step, downloaded and checked, or built."""
        if step.wheel is not None:
            path = self.work / step.wheel.file
            self.progress(f"downloading {step.wheel.url}")
            got = download(step.wheel.url, path, step.wheel.sha256)
            self.progress(f"sha256 {got}" + (" (matches the index)" if step.wheel.sha256 else
                                             " (not in the index; recorded)"))
            return path
        return self._build_wheel(step)

    def _step(self, step: Step, runtime_version: str, wheel: Path | None) -> None:
        if step.action == "uninstall":
            self.installer.uninstall(list(step.distributions))
        elif step.action == "remove-leftovers":
            backup = self.log_dir / "leftovers"  # kept: nothing of the user's is deleted
            backup.mkdir(exist_ok=True)
            for path in map(Path, step.paths):
                if path.exists():
                    shutil.move(str(path), str(backup / path.name))
                    self.progress(f"moved {path} to {backup}")
        elif step.action == "install":
            assert step.requirement is not None
            self.installer.install([step.requirement], reinstall=True)
        elif step.action in ("install-wheel", "build-from-source"):
            assert wheel is not None
            self.installer.install([str(wheel)], reinstall=True)
        elif step.action == "install-from-index":
            assert step.requirement is not None
            try:
                self.installer.install([step.requirement], index_url=step.index_url,
                                       reinstall=True)
            except InstallError as exc:
                if step.build is None:
                    raise
                self.progress(f"{step.index_url} did not serve it ({exc.message[:120]}); "
                              "building from source")
                self.installer.install([str(self._build_wheel(step))], reinstall=True)
        elif step.action == "enable-invokeai":  # undone by invokeai_config.undo_edit
            enable_invokeai(step.config, next(iter(step.paths), None), self.python, self.progress)
        elif step.action == "bundle-runtime":
            wheel = build_runtime_wheel(self.work / "runtime", runtime_version)
            self.installer.install([str(wheel)], reinstall=True)

    def _build_wheel(self, step: Step) -> Path:
        settings = step.build
        assert settings is not None
        source = Path(settings.source)
        if settings.source.startswith("https://"):
            archive = self.work / "source.tar.gz"
            self.progress(f"downloading {settings.source}")
            got = download(settings.source, archive, settings.source_sha256)
            self.progress(f"sha256 {got}" + (" (matches the index)" if settings.source_sha256
                                             else " (the index has none; recorded here)"))
            source = extract_source(archive, self.work / "archive")
        log_path = self.log_dir / "sageattention-build.log"
        return build_wheel(self.python, settings, source, self.work, log_path, self.progress,
                           self.installer)


def execute_plan(plan: Plan, progress: Progress, log_dir: Path, runtime_version: str) -> None:
    with tempfile.TemporaryDirectory(prefix="sagedoctor-") as tmp:
        Executor(plan, progress, Path(tmp), log_dir).run(runtime_version)
