"""Carry out a Plan as one transaction under the venv's lock.

1. Prepare: every wheel the plan installs is downloaded into the cache (digest-checked), built,
   or taken from the cache, and checked (RECORD, zip paths) before the venv is touched. Where
   an index wheel cannot be had, the fallback source build is prepared instead, still before.
2. Change: the touched distributions are snapshotted and backed up, a journal names them, the
   steps run, the SageAttention kernel is smoke-checked, and nothing outside the plan (torch
   least of all) may have changed.
3. Any failure, signal or exception (the progress callback's included) rolls back and proves
   by sha256 that the venv is as it was. A smoke check that fails on an index wheel rolls back
   and takes the next route: the source build of the pinned commit.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging import tags as packaging_tags
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..apps.invokeai import (
    ConfigEdit,
    apply_settings,
    enable_invokeai,
    load_edit_record,
    refuse_if_running,
    save_edit_record,
    undo_edit,
)
from ..events import (
    DigestChecked,
    DownloadFinished,
    DownloadProgress,
    DownloadStarted,
    Event,
    LogUnwritable,
    Note,
    OnEvent,
    RollbackFinished,
    RollbackStarted,
    SmokeResult,
    SmokeStarted,
    StepFinished,
    StepStarted,
    step_lines,
)
from ..plan import (
    ACTIONS,
    CHANGING_ACTIONS,
    PACKAGE_ACTIONS,
    SAGE_ACTIONS,
    Blocked,
    BuildSettings,
    Plan,
    Step,
)
from ..proc import ToolMissing, ToolTimeout
from ..state import record_install
from ..target_answer import ask_target, with_answer_function
from .bundle import build_runtime_wheel
from .cache import Cache, built_key, default_cache_dir, file_sha256, safe_file_name
from .errors import (
    HostileDownload,
    InstallInterrupted,
    NotInCache,
    PlanOutdated,
    RecoveredInterruptedRun,
    RollbackIncomplete,
    SmokeCheckFailed,
)
from .fetch import LOCAL_HOSTS, download, extract_source, github_asset_digest
from .lock import venv_lock, venv_state_dir
from .runlog import RunLog
from .runner import Installer, InstallError
from .signals import deferred, interrupts_raise
from .simple_index import resolve_from_index
from .smoke import SMOKE_TIMEOUT_S, run_smoke
from .source_build import build_wheel, source_tree_digest
from .transaction import (
    LIGHT,
    Journal,
    back_up,
    journal_entry_for_edit,
    recover_interrupted,
    roll_back,
    snapshot_differences,
    take_snapshot,
    target_state,
)
from .wheelcheck import check_wheel, landing_paths, wheel_in_place

# each event's text (events.step_lines), for a caller that wants lines only (the tests);
# the flows and the TUI take the events themselves (on_event)
Progress = Callable[[str], None]
DEFAULT_INDEX = "https://pypi.org/simple/"
GITHUB_API = "https://api.github.com"
REPORT_EVERY_S = 15.0  # progress on a long download or build, so it never looks hung
_LIST_DISTS = with_answer_function(
    "import importlib.metadata as m\n"
    "_answer({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']})")


def installed_distributions(python: Path) -> dict[str, str]:
    try:
        asked = ask_target([str(python), "-I", "-c", _LIST_DISTS], timeout=120)
        done = asked.result
        data = asked.json() if done.returncode == 0 else None
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


def target_tags(python_version: str) -> list[str]:
    """The target's wheel tags, most preferred first (it runs on this machine: same platform,
    its own Python version)."""
    major, minor = (int(p) for p in python_version.split(".")[:2])
    platforms = list(packaging_tags.platform_tags())
    return ([str(t) for t in packaging_tags.cpython_tags((major, minor), platforms=platforms)]
            + [str(t) for t in packaging_tags.compatible_tags((major, minor),
                                                              platforms=platforms)])


def _local(url: str) -> str | None:
    """http is allowed for a server on this machine only."""
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname
    return host if host in LOCAL_HOSTS else None


def plan_signature(plan: Plan | Blocked) -> list[tuple[Any, ...]]:
    """What a plan does, without what varies from one planning to the next (the build's job
    counts follow free memory): each step's action, distributions, paths and source."""
    if isinstance(plan, Blocked):
        return [("blocked", tuple(f.code for f in plan.findings))]
    return [(s.action, s.distributions, s.paths, s.requirement,
             s.wheel.file if s.wheel else None,
             (s.build.source, s.build.commit) if s.build else None) for s in plan.steps]


def _pinned(requirement: str) -> bool:
    spec = list(Requirement(requirement).specifier)
    return len(spec) == 1 and spec[0].operator in ("==", "===") and "*" not in spec[0].version


def _reason(exc: BaseException) -> str:
    """Why a run stops, never blank: Ctrl+C's KeyboardInterrupt carries no text."""
    if isinstance(exc, KeyboardInterrupt):
        return "stopped by Ctrl+C (SIGINT)"
    return str(exc) or type(exc).__name__


def _then(fix: str, more: str) -> str:
    """A fix, then one more sentence: the fix ends as a sentence first (SD910 ran 'the install
    log has the full output The venv was not changed' together)."""
    fix = fix.strip()
    if not fix:
        return more
    return f"{fix}{'' if fix.endswith(('.', '!', '?')) else '.'} {more}"


def _outcome(exc: BaseException) -> str:
    from ..errors import SagedoctorError

    if isinstance(exc, SagedoctorError):
        return (f"stopped: error {exc.code}: {exc.message}"
                + (f"; fix: {exc.fix}" if exc.fix else ""))
    if isinstance(exc, KeyboardInterrupt):
        return "stopped: interrupted (Ctrl+C); the venv was rolled back first where it changed"
    return f"stopped: {type(exc).__name__}: {exc}"


class Executor:
    def __init__(self, plan: Plan, progress: Progress | None, work: Path, log_dir: Path, *,
                 cache_dir: Path | None = None, offline: bool = False,
                 state_root: Path | None = None, source_url: str | None = None,
                 github_api: str = GITHUB_API, smoke_timeout: float = SMOKE_TIMEOUT_S,
                 report_every: float = REPORT_EVERY_S,
                 on_event: OnEvent | None = None,
                 cancel: threading.Event | None = None, log_name: str | None = None,
                 replan: Callable[[], Plan | Blocked] | None = None) -> None:
        self.plan = plan
        self.replan = replan  # the plan made anew from the venv as it is under the lock
        self.python = Path(plan.python)
        self.prefix = Path(plan.prefix)
        self.progress = progress
        self.work = work
        self.log_dir = log_dir
        self.cache = Cache(cache_dir or default_cache_dir())
        self.offline = offline
        self.state_root = state_root
        self.source_url = source_url
        self.github_api = github_api
        self.smoke_timeout = smoke_timeout
        self.report_every = report_every
        self.on_event = on_event  # every event as data (the flows', the TUI's), after its text
        self.cancel = cancel  # set: a running build is stopped (see build_wheel)
        self.log_name = log_name  # None: install-<time>-<pid>.log
        # uninstall changes packages through uv only: a uv-made venv has no pip
        self.installer = Installer.for_target(self.python, self.cache.uv_dir, offline,
                                              allow_pip=plan.purpose != "uninstall")
        self.done: list[str] = []
        self.downloaded_bytes = 0
        self.log: RunLog | None = None
        self.journal: Journal | None = None
        self.target: dict[str, Any] = {}
        self.fallback_reasons: list[str] = []
        self.build_patches: list[str] = []  # what a source build patched in its copy
        self.edits: list[ConfigEdit] = []  # the invokeai.yaml edits of this run
        work.mkdir(parents=True, exist_ok=True)

    # --- the run ----------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """An event: its text to the log, then to `progress` and the event to `on_event`."""
        for line in step_lines(event):
            if self.log is not None and self.log.failure is None:
                self.log.write(line)
                if self.log.failure is not None:
                    reason = self.log.failure.strerror or self.log.failure
                    self._tell(LogUnwritable(str(self.log.path), str(reason)))
        self._tell(event)

    def _tell(self, event: Event) -> None:
        if self.progress is not None:
            for line in step_lines(event):
                self.progress(line)
        if self.on_event is not None:
            self.on_event(event)

    def say(self, message: str) -> None:
        self.emit(Note(message))

    def run(self, runtime_version: str) -> None:
        unsupported = [s.action for s in self.plan.steps if s.action not in ACTIONS]
        if unsupported:
            raise InstallError(f"this sagedoctor cannot yet carry out: {', '.join(unsupported)}",
                               "nothing was changed; do that step by hand (see `sagedoctor "
                               "plan`)")
        from .preflight import run_preflight

        # Everything the commit phase will touch, before the first download or build.
        run_preflight(self.plan, self.work, venv_state_dir(self.prefix, self.state_root))
        self.log = RunLog(self.log_dir, self.log_name)
        try:
            self.say(f"log: {self.log.path}")
            folder = venv_state_dir(self.prefix, self.state_root)
            with venv_lock(folder, self.prefix, self.emit):
                if recover_interrupted(folder, self.emit):
                    if self.plan.purpose == "uninstall":
                        # what sagedoctor left is read anew after the rollback, not from facts
                        # taken before it
                        raise RecoveredInterruptedRun(
                            "an interrupted install was rolled back first; nothing else was "
                            "removed", "run `sagedoctor uninstall` again to remove what "
                            "sagedoctor left")
                    if all(s.action == "recover" for s in self.plan.steps):
                        return  # the plan was that rollback and nothing else
                    raise RecoveredInterruptedRun(
                        "an interrupted install was rolled back first; this plan was made "
                        "before that", "run `sagedoctor install` again: it plans afresh")
                self._refuse_if_outdated()
                self.journal = Journal(folder)
                self.journal.begin(self.python, self.prefix, self.work, self.log.path)
                keep_journal = False
                try:
                    with interrupts_raise():
                        self._run_routes(runtime_version)
                except RollbackIncomplete:
                    keep_journal = True  # the next run tries again; the backups stay
                    raise
                finally:
                    if not keep_journal:
                        self.journal.finish()
        except BaseException as exc:
            # The log ends with how the run ended, not at its last step's first line: the
            # error, its fix (which says what became of the venv) or the interruption.
            self.log.write(_outcome(exc))
            raise
        else:
            self.log.write("finished")
        finally:
            self.log.close()

    def _refuse_if_outdated(self) -> None:
        """Under the lock: the plan was made before it, and another sagedoctor (an uninstall,
        another install) may have changed the venv in between."""
        if self.replan is None:
            return
        now = self.replan()
        if plan_signature(now) == plan_signature(self.plan):
            return
        planned = ("it is blocked now" if isinstance(now, Blocked) else
                   "planned now: " + ("; ".join(s.title for s in now.steps) or "nothing to do"))
        raise PlanOutdated(f"{self.prefix} changed after this plan was made (another sagedoctor "
                           f"command ran in between); {planned}",
                           "nothing was changed; run `sagedoctor install` again: it plans "
                           "afresh")

    def _sage_step(self) -> Step | None:
        return next((s for s in self.plan.steps if s.action in SAGE_ACTIONS), None)

    def _run_routes(self, runtime_version: str) -> None:
        sage = self._sage_step()
        can_fall_back = (sage is not None and sage.action == "install-from-index"
                         and sage.build is not None)
        use_build = False
        self.target = target_state(self.python, LIGHT)
        while True:
            try:
                prepared = self._prepare_all(runtime_version, use_build)
            except KeyboardInterrupt as exc:  # Ctrl+C: SD912 and 130, as SIGTERM's, not a bare
                # "interrupted" that leaves the user to wonder what became of the venv
                raise InstallInterrupted(_reason(exc), "The venv was not changed: nothing is "
                                         "installed before every wheel exists.") from exc
            except InstallError as exc:
                if isinstance(exc, InstallInterrupted) or not can_fall_back or use_build:
                    raise type(exc)(exc.message, _then(
                        exc.fix, "The venv was not changed: nothing is installed before "
                        "every wheel exists.")) from exc
                assert sage is not None
                reason = f"{sage.index_url} did not serve it ({exc.message[:160]})"
                self.fallback_reasons.append(reason)
                self.say(f"{reason}; building from source before changing anything")
                use_build = True
                continue
            if self._all_in_place(prepared):
                return
            try:
                self._transaction(prepared)
                return
            except SmokeCheckFailed as exc:
                self._forget_built(prepared)
                if not can_fall_back or use_build:
                    raise
                assert sage is not None
                reason = f"the wheel from {sage.index_url} failed the smoke check"
                self.fallback_reasons.append(f"{reason}: {exc.message}")
                self.say(f"{reason}, so it was rolled back; taking the next route: the "
                         "source build of the pinned commit")
                use_build = True

    def _all_in_place(self, prepared: dict[int, Path]) -> bool:
        """Every step would reinstall a wheel that is in place already, file for file: the
        venv is not touched (no snapshot, no uv, no smoke check)."""
        changing = [n for n, s in enumerate(self.plan.steps, 1) if s.action in CHANGING_ACTIONS]
        if not changing or any(n not in prepared for n in changing):
            return False
        purelib = Path(self.target["purelib"])
        if not all(wheel_in_place(prepared[n], purelib) for n in changing):
            return False
        for n in changing:
            self.say(f"{prepared[n].name} is installed already, every file as in the wheel: "
                     "nothing to change")
        dists = {str(k): str(v) for k, v in (self.target.get("all") or {}).items()}
        self._write_records(dists, dists)  # how it was built, as a commit would say it
        return True

    def _forget_built(self, prepared: dict[int, Path]) -> None:
        """A built wheel whose kernel failed the smoke check leaves the cache: the next run
        builds again instead of reinstalling it "from the cache"."""
        built = self.cache.root / "built"
        for wheel in prepared.values():
            if built in wheel.parents:
                shutil.rmtree(wheel.parent, ignore_errors=True)
                self.say(f"{wheel.name} removed from the cache: it failed the smoke check")

    # --- preparing (the venv is not touched) -------------------------------------------------

    def _prepare_all(self, runtime_version: str, use_build: bool) -> dict[int, Path]:
        prepared: dict[int, Path] = {}
        total = len(self.plan.steps)
        for number, step in enumerate(self.plan.steps, 1):
            if step.action not in PACKAGE_ACTIONS:
                continue
            self.emit(StepStarted(number, total, step.title, preparing=True))
            try:
                wheel = self._prepare(step, runtime_version, use_build)
                check_wheel(wheel)
            except InstallError as exc:
                raise type(exc)(f"step {number} ({step.title}): {exc.message}", exc.fix) \
                    from exc
            prepared[number] = wheel
        return prepared

    def _prepare(self, step: Step, runtime_version: str, use_build: bool) -> Path:
        if step.action == "install-wheel":
            assert step.wheel is not None
            return self._fetch(step.wheel.file, step.wheel.url, step.wheel.sha256,
                               step.wheel.sha256_source)
        if step.action == "bundle-runtime":
            return build_runtime_wheel(self.work / "runtime", runtime_version)
        if step.action == "build-from-source" or (step.action == "install-from-index"
                                                  and use_build):
            assert step.build is not None
            return self._build(step.build)
        assert step.requirement is not None
        return self._from_index(step.index_url or DEFAULT_INDEX, step.requirement)

    def _fetch(self, name: str, url: str, sha256: str | None, source: str | None) -> Path:
        safe_file_name(name, url)
        hit = self.cache.lookup(name, sha256, url, on_damaged=self.emit)
        if hit is not None:
            self.say(f"{name}: from the cache, sha256 and archive checked (no download)")
            return hit
        if self.offline:
            raise NotInCache(f"{name} is not in the cache, and --offline forbids downloading",
                             "run once without --offline to fill the cache")
        expected, how = sha256, "matches the index"
        if sha256 is None or source == "third-party":
            github, why = github_asset_digest(url, self.github_api, _local(self.github_api))
            if github is not None:
                if sha256 is not None and github != sha256:
                    raise HostileDownload(f"{name}: the index's sha256 {sha256} differs from "
                                          f"GitHub's asset digest {github}",
                                          "refused; run `sagedoctor index refresh`")
                expected, how = github, "matches GitHub's asset digest"
            elif why != "not a GitHub release asset":
                self.say(f"{name}: {why}")
        folder = self.work / "downloads"
        folder.mkdir(parents=True, exist_ok=True)
        self.emit(DownloadStarted(name, url))
        began = time.monotonic()

        def report(done: int, total: int | None) -> None:
            self.emit(DownloadProgress(name, done, total, time.monotonic() - began, report=True))

        def on_bytes(received: int, size: int | None) -> None:
            self.emit(DownloadProgress(name, received, size, time.monotonic() - began))

        got = download(url, folder / name, expected, allow_http_host=_local(url),
                       report=report, report_every=self.report_every,
                       on_bytes=None if self.on_event is None else on_bytes)
        size = (folder / name).stat().st_size
        self.downloaded_bytes += size
        self.emit(DownloadFinished(name, size, time.monotonic() - began))
        path = self.cache.store(folder / name, name, got, url)
        self.emit(DigestChecked(got, how if expected else "measured on first download"))
        return path

    def _from_index(self, index_url: str, requirement: str) -> Path:
        tags = target_tags(self.target["python"])
        key = json.dumps([index_url, requirement, tags[0]])
        remembered = self.cache.resolution(key) if (_pinned(requirement) or self.offline) \
            else None
        if remembered is not None:
            hit = self.cache.lookup(remembered["name"], remembered["sha256"], remembered["url"],
                                    on_damaged=self.emit)
            if hit is not None:
                self.say(f"{requirement}: {hit.name} from the cache (no index request)")
                return hit
        if self.offline:
            raise NotInCache(f"{requirement} from {index_url} is not in the cache, and "
                             "--offline forbids asking the index", "run once without --offline")
        self.say(f"asking {index_url} for {requirement}")
        chosen = resolve_from_index(index_url, requirement, tags, _local(index_url))
        path = self._fetch(chosen.name, chosen.url, chosen.sha256,
                           "index" if chosen.sha256 else None)
        self.cache.remember_resolution(key, {"name": chosen.name, "url": chosen.url,
                                             "sha256": file_sha256(path)})
        return path

    def _build(self, settings: BuildSettings) -> Path:
        torch_dist = (self.target["dists"].get("torch") or [{}])[0]
        torch = torch_dist.get("version", "none")  # the cache key's, as it always was
        shown = torch_dist.get("declared") or torch  # as check shows it: 2.11.0+cu130
        python_tag = "cp" + self.target["python"].replace(".", "")
        url = self.source_url or settings.source

        def key_for(digest: str | None) -> str | None:
            if digest is None:
                return None
            return built_key(settings.commit or "folder", torch, python_tag,
                             settings.arch_list, settings.cxx_standard, digest)

        # The source's digest is part of the key: for the pinned archive the index's pin,
        # else the one measured for this URL (a wheel built from one archive is not one the
        # index pins another for); for a folder (--source DIR) its files' digest.
        if settings.commit is not None:
            key = key_for(settings.source_sha256 or self.cache.measured(url))
        else:
            key = key_for(source_tree_digest(Path(settings.source)))
        if key is not None:
            hit = self.cache.built_wheel(key)
            if hit is not None:
                self.build_patches += self.cache.built_patches(key)
                built_from = (settings.commit[:7] if settings.commit is not None
                              else f"{settings.source} (its files unchanged)")
                self.say(f"{hit.name}: built before from {built_from} for torch "
                         f"{shown}, {python_tag}, {settings.label} (from the cache)")
                return hit
        source = Path(settings.source)
        if settings.commit is not None:  # the pinned archive (or a local copy of it)
            name = f"SageAttention-{settings.commit}.tar.gz"
            archive = self._fetch(name, url, settings.source_sha256, None)
            key = key_for(file_sha256(archive))  # what is built from, by its sha256
            unpacked = self.work / "archive"
            if unpacked.exists():
                shutil.rmtree(unpacked)
            try:
                source = extract_source(archive, unpacked)
            except InstallError:
                self.cache.drop(archive, url)  # the next run fetches it again
                raise
        assert self.log is not None and self.journal is not None
        build_dir = Path(tempfile.mkdtemp(prefix="build-", dir=self.work))
        journal = self.journal
        wheel = build_wheel(self.python, settings, source, build_dir, self.log.path, self.emit,
                            self.installer, started=lambda pid: journal.write(build_pgid=pid),
                            report_every=self.report_every, cancel=self.cancel,
                            patched=self.build_patches)
        journal.write(build_pgid=None)
        return (self.cache.store_built(key, wheel, self.build_patches) if key is not None
                else wheel)

    # --- changing the venv --------------------------------------------------------------------

    def _moves(self) -> list[tuple[str, str]]:
        backup = self.log_dir / "leftovers"  # kept: nothing of the user's is deleted
        moves = [(path, str(backup / Path(path).name)) for step in self.plan.steps
                 if step.action == "remove-leftovers" for path in step.paths
                 if Path(path).exists()]
        # The hook and the records go into the journal's backup: a rollback moves them back,
        # the commit deletes them with the journal.
        assert self.journal is not None
        removed = self.journal.backup / "removed"
        moves += [(path, str(removed / f"{number}-{Path(path).name}"))
                  for number, step in enumerate(self.plan.steps, 1)
                  if step.action in ("remove-hook", "remove-records") for path in step.paths
                  if Path(path).exists() or Path(path).is_symlink()]
        return moves

    def _transaction(self, prepared: dict[int, Path]) -> None:
        assert self.journal is not None
        names = set(self.plan.changed_distributions)
        before = take_snapshot(self.python, names)
        purelib, scripts = Path(before["purelib"]), Path(before["scripts"])
        landing = {p for wheel in prepared.values()
                   for p in landing_paths(check_wheel(wheel), purelib, scripts)}
        # Paths the new wheels write that exist already: owned files are backed up with their
        # distribution; stray files are backed up too; anything else (a folder) is left be.
        additions = sorted(str(p) for p in landing if not (p.exists() or p.is_symlink()))
        strays = sorted(p for p in landing if p.is_file())
        moves = self._moves()
        backups = back_up(before, self.journal.backup, extra=strays)
        self.journal.write(phase="changing", names=sorted(names), snapshot=before,
                           backups=backups, additions=additions, moved=moves,
                           backup_dir=str(self.journal.backup), edited_files=[])
        dists_before: dict[str, str] = before["all"]
        self.done = []
        self.edits = []
        try:
            self._apply(prepared, moves)
            self._smoke()
            now = take_snapshot(self.python, ())
            changed = unexpected_changes(dists_before, now["all"],
                                         self.plan.changed_distributions)
            light_before = {"dists": {n: before["dists"].get(n, []) for n in LIGHT}}
            light_after = {"dists": {n: now["dists"].get(n, []) for n in LIGHT}}
            changed += snapshot_differences(light_before, light_after)
            if changed:
                raise InstallError("distributions outside the plan changed: "
                                   + "; ".join(changed), "please report this")
        except BaseException as exc:
            self._roll_back_and_raise(exc)
        self.journal.write(phase="committed")
        if self.plan.purpose == "uninstall":  # its last step removed the records
            self.say("committed: " + "; ".join(self.done))
            return
        self._write_records(dists_before, now["all"])
        self.say("committed: " + "; ".join(self.done))
        for reason in self.fallback_reasons:  # said again at the end: the build log is long
            self.say(f"installed by the source build of the pinned commit, because {reason}")

    def _write_records(self, dists_before: dict[str, str], dists_after: dict[str, str]) -> None:
        """What sagedoctor installed and replaced, for `sagedoctor uninstall`."""
        built = ({"sageattention": "source build, C++ standard of torch's headers: "
                                   + "; ".join(self.build_patches)}
                 if self.build_patches else None)
        try:
            record_install(self.plan.prefix, dists_before, dists_after,
                           self.plan.changed_distributions, built)
            for edit in self.edits:  # the invokeai.yaml edit: for uninstall --all, disable
                save_edit_record(self.plan.prefix, edit)
        except OSError as exc:  # a folder put where the record goes since the preflight
            where = exc.filename2 or exc.filename or f"{self.prefix}/sagedoctor"
            raise InstallError(
                f"the install was committed ({'; '.join(self.done) or 'nothing to change'}), "
                f"but its record {where} "
                f"could not be written: {exc.strerror or exc}",
                f"move {where} away and run `sagedoctor install` again to write it; until "
                "then `sagedoctor uninstall` does not know what this install put in") from exc

    def _roll_back_and_raise(self, exc: BaseException) -> None:
        assert self.journal is not None
        self.emit(RollbackStarted(_reason(exc)))
        try:  # invokeai.yaml too: it is in the journal, as it is for a killed run's recovery
            state = roll_back(self.journal.data, self.emit)
        except RollbackIncomplete as failed:
            raise failed from exc
        self.emit(RollbackFinished(state))
        undone = (f"Rolled back ({'; '.join(self.done)} undone)" if self.done
                  else "Rolled back what the failed step had changed")
        if isinstance(exc, InstallError):
            try:
                wrapped = type(exc)(exc.message, f"{undone}: {state}. {exc.fix}".strip())
            except TypeError:
                wrapped = InstallError(exc.message, f"Rolled back: {state}. {exc.fix}")
            raise wrapped from exc
        if isinstance(exc, KeyboardInterrupt):
            raise InstallInterrupted("stopped by Ctrl+C (SIGINT)", f"Rolled back: {state}.") \
                from exc
        raise exc

    def _apply(self, prepared: dict[int, Path], moves: list[tuple[str, str]]) -> None:
        total = len(self.plan.steps)
        for number, step in enumerate(self.plan.steps, 1):
            if step.action in ("verify", "recover"):
                continue  # the caller verifies, after the proof; the recovery ran on entry
            self.emit(StepStarted(number, total, step.title))
            try:
                self._step(step, prepared.get(number), moves)
            except InstallError as exc:
                raise type(exc)(f"step {number} ({step.title}) failed: {exc.message}",
                                exc.fix) from exc
            self.done.append(step.title)
            self.emit(StepFinished(number, total, step.title))

    def _step(self, step: Step, wheel: Path | None, moves: list[tuple[str, str]]) -> None:
        with deferred():  # a signal waits for uv to finish; the rollback follows at once
            self._change(step, wheel, moves)

    def _change(self, step: Step, wheel: Path | None, moves: list[tuple[str, str]]) -> None:
        if step.action == "uninstall":
            self.installer.uninstall(list(step.distributions))
        elif step.action in ("remove-leftovers", "remove-hook", "remove-records"):
            for original, target in moves:
                if original in step.paths:
                    Path(target).parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(original, target)
                    self.say(f"moved {original} to {target}" if step.action ==
                             "remove-leftovers" else f"removed {original}")
        elif step.action == "put-back":  # uv resolves it, as the user's own install did
            assert step.requirement is not None
            self.installer.install([step.requirement], reinstall=True)
        elif step.action == "restore-invokeai":
            self._restore_config(Path(step.paths[0]))
        elif step.action == "unset-invokeai-key":
            apply_settings(Path(step.paths[0]), {}, self.python, self.prefix,
                           remove=tuple(k for k, _v in step.config),
                           before_write=self._journal_edit)
        elif step.action in PACKAGE_ACTIONS:
            assert wheel is not None
            self.installer.install([str(wheel)], reinstall=True)
        elif step.action == "enable-invokeai":  # undone on rollback, from its backup
            self.edits.append(enable_invokeai(step.config, next(iter(step.paths), None),
                                              self.python, self.emit,
                                              before_write=self._journal_edit))

    def _restore_config(self, path: Path) -> None:
        """invokeai.yaml back from the backup sagedoctor's edit made. The file as it is now
        and that backup (which the undo deletes) are journaled first: a rollback brings both
        back."""
        assert self.journal is not None
        loaded = load_edit_record(self.prefix)
        if loaded is None or Path(loaded[0].path) != path:
            raise InstallError(f"the record of sagedoctor's edit of {path} is gone",
                               "run `sagedoctor uninstall` again: it plans afresh")
        edit = loaded[0]
        refuse_if_running(path, self.prefix)
        earlier = list(self.journal.data.get("edited_files", []))
        for file in [path] + ([Path(edit.backup)] if edit.backup else []):
            entry = journal_entry_for_edit(file, file if file.is_file() else None,
                                           self.journal.backup / f"edited-{len(earlier)}")
            entry.pop("beside", None)  # the copy is the file itself, not one beside it
            earlier.append(entry)
        self.journal.write(edited_files=earlier)
        self.say(undo_edit(edit))

    def _journal_edit(self, edit: ConfigEdit) -> None:
        """Named in the journal before the file changes: a run killed right after the write
        is undone by the next run's recovery, like the venv's files."""
        assert self.journal is not None
        earlier = self.journal.data.get("edited_files", [])
        entry = journal_entry_for_edit(Path(edit.path),
                                       Path(edit.backup) if edit.backup else None,
                                       self.journal.backup / f"edited-{len(earlier)}")
        self.journal.write(edited_files=[*earlier, entry])

    def _smoke(self) -> None:
        if self._sage_step() is None:
            return
        self.emit(SmokeStarted())
        result = run_smoke(self.python, self.smoke_timeout)
        self.emit(SmokeResult(result.ok, result.summary))
        if not result.ok:
            raise SmokeCheckFailed(f"the smoke check found the installed sageattn() wrong: "
                                   f"{result.summary}", "its wheel is not used")


def execute_plan(plan: Plan, progress: Progress | None, log_dir: Path, runtime_version: str, *,
                 cache_dir: Path | None = None, offline: bool = False,
                 source_url: str | None = None, state_root: Path | None = None,
                 on_event: OnEvent | None = None,
                 cancel: threading.Event | None = None, log_name: str | None = None,
                 replan: Callable[[], Plan | Blocked] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="sagedoctor-") as tmp:
        Executor(plan, progress, Path(tmp), log_dir, cache_dir=cache_dir, offline=offline,
                 source_url=source_url, state_root=state_root, on_event=on_event,
                 cancel=cancel, log_name=log_name, replan=replan).run(runtime_version)
