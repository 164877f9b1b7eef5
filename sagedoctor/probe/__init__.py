"""Read-only detection. Every probe starts at once; each has a timeout; a crash in one
becomes a "could not check" record, never a crash of the tool."""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .. import __version__
from ..apps.comfyui import find_comfyui, locate_comfyui
from ..decide.findings import AREAS
from ..errors import SagedoctorError, TargetError
from ..facts import ComfyUIFacts, Facts, InvokeAIFacts, ProbeFailure
from ..settings import number_from_env
from .gpu import probe_gpu
from .invokeai import choose_root, locate_invokeai, read_config
from .roots import HostRoots
from .system import probe_system
from .target import (
    TARGET_TIMEOUT_S,
    current_os,
    default_interpreter,
    is_own_environment,
    no_target,
    probe_target,
    venv_python,
)
from .toolchain import probe_toolchain

# Which probes each area's findings read.
_PROBES_FOR_AREA = {
    "system": {"system"},
    "gpu": {"system", "gpu"},
    "python": {"system", "target"},
    "torch": {"system", "gpu", "target"},
    "triton": {"system", "gpu", "target"},
    "sageattention": {"system", "gpu", "target"},
    "toolchain": {"system", "gpu", "target", "toolchain"},
    "invokeai": {"system", "target", "invokeai"},
    "comfyui": {"system", "target", "comfyui"},
}


@dataclass(frozen=True)
class ProbeOptions:
    venv: Path | None = None
    python: Path | None = None
    root: Path | None = None
    comfyui: Path | None = None  # --comfyui DIR: that install's Python is the target
    areas: tuple[str, ...] = AREAS
    roots: HostRoots | None = None  # None: this machine's (HostRoots.from_env)


def choose_target(options: ProbeOptions, invokeai_venv: str | None,
                  comfyui: ComfyUIFacts | None = None) -> Path | None:
    """--python, --venv, --comfyui; else the one app found (InvokeAI first where both are);
    else the active venv; never sagedoctor's own environment (None: nothing to inspect)."""
    if options.python is not None:
        return options.python
    if options.venv is not None:
        return Path(venv_python(options.venv, current_os()))
    if comfyui is not None and comfyui.source == "--comfyui" and comfyui.python:
        return Path(comfyui.python)
    if invokeai_venv is not None:
        return Path(venv_python(Path(invokeai_venv), current_os()))
    if comfyui is not None and comfyui.python:
        return Path(comfyui.python)
    active = default_interpreter()
    return None if is_own_environment(active) else active


def _probe_chosen(python: Path | None, venv: Path | None) -> Any:
    if python is None:
        raise no_target()  # its areas say so (SD190 with the three ways to choose)
    return probe_target(python, venv=venv)


def find_comfyui_for(options: ProbeOptions, os_name: str) -> ComfyUIFacts | None:
    """The ComfyUI of --comfyui DIR (an error where DIR holds none), else one found for the
    given target or through Desktop's config."""
    if options.comfyui is None:
        return find_comfyui(options.venv, options.python, os.environ, Path.home(), os_name)
    found = locate_comfyui(options.comfyui, "--comfyui", os_name, os.environ, options.python)
    fix = ("pass the ComfyUI_windows_portable folder, ComfyUI Desktop's base path (the folder "
           "holding its .venv and models) or the git clone (the folder holding main.py)")
    if found is None and not options.comfyui.is_dir():
        what = "does not exist" if not options.comfyui.exists() else "is not a folder"
        raise TargetError(f"--comfyui {options.comfyui} {what}", fix)
    if found is None:
        raise TargetError(f"--comfyui {options.comfyui} is not a ComfyUI install (no "
                          "python_embeded, no main.py with comfy/, no Desktop .venv)", fix)
    if found.python is None and options.python is None and options.venv is None:
        raise TargetError(f"--comfyui {options.comfyui}: {found.problem}",
                          "pass --python EXE as well: the interpreter that starts ComfyUI")
    return found


def _guard_seconds() -> float:
    # Each probe bounds its own tools; this outer guard only catches a probe stuck elsewhere.
    return number_from_env(os.environ, "SAGEDOCTOR_TARGET_TIMEOUT", TARGET_TIMEOUT_S) + 10


# Called once per area, from a probe thread, as soon as every probe the area reads has ended;
# the Facts hold what has been gathered so far (the TUI fills its rows with it).
AreaDone = Callable[[str, Facts], None]


def _failure(name: str, exc: BaseException) -> ProbeFailure:
    if isinstance(exc, SagedoctorError):
        return ProbeFailure(name, f"{exc.message} (fix: {exc.fix})" if exc.fix else exc.message)
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return ProbeFailure(name, f"the {name} probe crashed: {last}")


def _facts(results: dict[str, Any], failures: list[ProbeFailure],
           areas: tuple[str, ...]) -> Facts:
    return Facts(
        system=results.get("system"),
        gpu=results.get("gpu"),
        target=results.get("target"),
        toolchain=results.get("toolchain"),
        invokeai=results.get("invokeai"),
        comfyui=results.get("comfyui"),
        probe_failures=tuple(failures),
        sagedoctor_version=__version__,
        areas=areas,
    )


class _AreaReporter:
    """Tells the caller about each area whose probes have all ended, in finishing order."""

    def __init__(self, areas: tuple[str, ...], on_area_done: AreaDone) -> None:
        self.areas = areas
        self.on_area_done = on_area_done
        self.lock = threading.Lock()
        self.results: dict[str, Any] = {}
        self.failures: list[ProbeFailure] = []
        self.reported: set[str] = set()
        self.handled: set[str] = set()

    def probe_ended(self, name: str, future: Future[Any]) -> None:
        if future.cancelled():
            return
        with self.lock:
            if name in self.handled:  # the done callback and collect_facts may both call
                return
            self.handled.add(name)
            exc = future.exception()
            if exc is None:
                self.results[name] = future.result()
            else:
                self.failures.append(_failure(name, exc))
            ended = set(self.results) | {f.area for f in self.failures}
            ready = [a for a in self.areas
                     if a not in self.reported and _PROBES_FOR_AREA[a] <= ended]
            self.reported.update(ready)
            snapshot = _facts(self.results, self.failures, self.areas)
        for area in ready:
            self.on_area_done(area, snapshot)


def collect_facts(options: ProbeOptions, on_area_done: AreaDone | None = None) -> Facts:
    os_name = current_os()
    wanted: set[str] = set()
    for area in options.areas:
        wanted |= _PROBES_FOR_AREA[area]
    roots = options.roots or HostRoots.from_env(os.environ)
    failures: list[ProbeFailure] = []
    # Root discovery is a few stat() calls and decides the default target: do it first.
    try:
        choice = choose_root(options.root, os.environ, options.venv, Path.home())
        located = locate_invokeai(choice, os_name)
    except OSError as exc:  # e.g. a root inside a folder this user may not read
        where = f" {exc.filename}" if exc.filename else ""
        failures.append(ProbeFailure("invokeai", f"cannot look for InvokeAI:{where}: "
                                     f"{exc.strerror or exc} (fix: pass --root DIR, or give "
                                     "this user read access to that folder)"))
        located = InvokeAIFacts(None, "none", False, None, None, False)
        wanted.discard("invokeai")
    try:
        comfy = find_comfyui_for(options, os_name)
    except OSError as exc:  # a folder this user may not read: said, not a crash
        failures.append(ProbeFailure("comfyui", f"cannot look for ComfyUI: "
                                     f"{exc.strerror or exc}"))
        comfy = None
        wanted.discard("comfyui")
    # A root given by --root or INVOKEAI_ROOT without InvokeAI's marks: its .venv is not
    # InvokeAI's, so it is not the default target (SD186 says why).
    invokeai_venv = located.venv if located.marked is not False else None
    target_python = choose_target(options, invokeai_venv, comfy)

    jobs: dict[str, Callable[[], Any]] = {
        "system": lambda: probe_system(roots),
        "gpu": lambda: probe_gpu(os_name, roots=roots),
        "target": lambda: _probe_chosen(target_python, options.venv),
        "toolchain": lambda: probe_toolchain(os_name, roots),
        "invokeai": lambda: read_config(located),
        "comfyui": lambda: comfy,  # found above: it decides the target
    }
    results: dict[str, Any] = {}
    pool = ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="probe")
    try:
        futures = {name: pool.submit(job) for name, job in jobs.items() if name in wanted}
        if on_area_done is not None:
            reporter = _AreaReporter(tuple(options.areas), on_area_done)
            for name, future in futures.items():
                future.add_done_callback(partial(reporter.probe_ended, name))
        for name, future in futures.items():
            try:
                results[name] = future.result(timeout=_guard_seconds())
            except FutureTimeout:
                failures.append(ProbeFailure(name, f"the {name} probe did not finish in time"))
            except Exception as exc:  # a probe bug must not take the report down
                failures.append(_failure(name, exc))
        if on_area_done is not None:
            # A future wakes result() before it runs its done callbacks: report every probe
            # that ended here too, so no area is told after collect_facts has returned.
            for name, future in futures.items():
                if future.done():
                    reporter.probe_ended(name, future)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)

    facts = _facts(results, failures, tuple(options.areas))
    target = results.get("target")
    if target is not None:
        from dataclasses import replace

        from .verification import read_verification

        try:
            facts = replace(facts, verification=read_verification(Path(target.prefix)))
        except Exception as exc:  # the record is a hint; a bug reading it must not stop check
            facts = replace(facts, probe_failures=(*facts.probe_failures,
                                                   _failure("target", exc)))
        from ..state import pending_install

        # Keyed by the prefix as the install keys it (the target reports it the same way).
        facts = replace(facts, interrupted_install=pending_install(Path(target.prefix)))
    return facts
