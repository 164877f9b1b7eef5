"""The state one TUI run carries between its screens, and the calls into the stages.

No textual here: each method is the same call the CLI makes (collect_facts, assess,
flows.plan, execute_plan, flows.verify), run by the screens in worker threads."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..decide.assess import assess
from ..decide.findings import AREAS, Finding
from ..facts import Facts, TargetFacts, load_facts_file
from ..flows import verify as verify_flow
from ..flows.plan import PlanOptions, plan_for, resolve_options
from ..index import WheelIndex, load_index
from ..install.runlog import default_log_dir
from ..plan import Blocked, Plan
from ..probe import AreaDone, ProbeOptions, collect_facts
from ..render.findings import render_json
from ..verify import KeyResult, VerifyError, key_results


@dataclass(frozen=True)
class TuiOptions:
    venv: Path | None = None
    python: Path | None = None
    root: Path | None = None
    facts_file: Path | None = None  # a saved `check --json`: check and plan only (a preview)
    index_file: Path | None = None
    source_dir: Path | None = None
    use_linux_indexes: bool = True
    selftest_report: Path | None = None  # a saved self-test report for the verify screen
    log_dir: Path | None = None
    quick_verify: bool = False
    # --use app|sagedoctor: which switch routes an app with its own (None: the better one)
    use: str | None = None


@dataclass
class Session:
    options: TuiOptions
    facts: Facts | None = None
    findings: list[Finding] = field(default_factory=list)
    plan: Plan | Blocked | None = None
    index: WheelIndex | None = None
    cached: dict[str, int] = field(default_factory=dict)  # url -> size, in the download cache

    @property
    def preview_only(self) -> bool:
        """Facts from a file describe another machine: nothing may be changed from them."""
        return self.options.facts_file is not None

    @property
    def source(self) -> str:
        return (f"facts from {self.options.facts_file.name}" if self.options.facts_file
                else "this machine")

    @property
    def log_dir(self) -> Path:
        return self.options.log_dir or default_log_dir()

    @property
    def target(self) -> TargetFacts | None:
        return None if self.preview_only or self.facts is None else self.facts.target

    def check(self, on_area_done: AreaDone | None = None) -> list[Finding]:
        if self.options.facts_file is not None:
            facts = load_facts_file(self.options.facts_file)
            if on_area_done is not None:
                for area in AREAS:
                    on_area_done(area, facts)
        else:
            facts = collect_facts(ProbeOptions(venv=self.options.venv,
                                               python=self.options.python,
                                               root=self.options.root), on_area_done)
        self.facts = facts
        # the CLI's verdict: check's findings with the plan's blockers (one diagnosis)
        self.index = self.index or load_index(self.options.index_file)
        self.findings = list(assess(facts, self.index,
                                    resolve_options(self._plan_options())).findings)
        self.plan = None
        return self.findings

    def _plan_options(self) -> PlanOptions:
        o = self.options
        return PlanOptions(venv=o.venv, python=o.python, root=o.root, facts_file=o.facts_file,
                           index_file=o.index_file, source_dir=o.source_dir,
                           use_linux_indexes=o.use_linux_indexes, use=o.use)

    def resolve(self) -> Plan | Blocked:
        assert self.facts is not None, "check first"
        self.index = self.index or load_index(self.options.index_file)
        self.plan = plan_for(self.facts, self.index, self._plan_options())
        self.cached = {} if self.preview_only or not isinstance(self.plan, Plan) \
            else cached_sizes(self.plan)
        return self.plan

    def switch_invokeai(self, on: bool) -> str:
        """SageAttention on or off for the target's InvokeAI; says which route was taken."""
        from ..apps.invokeai import (
            InvokeAISwitchError,
            disable_in_invokeai,
            enable_in_invokeai,
            reread,
        )

        target = self.target
        if target is None or self.facts is None:
            raise InvokeAISwitchError("there is no venv of this machine to change",
                                      "run `sagedoctor tui` without --facts")
        said = (enable_in_invokeai if on else disable_in_invokeai)(
            target, self.facts.invokeai, facts=self.facts, use=self.options.use)
        if self.facts.invokeai is not None:
            self.facts = replace(self.facts, invokeai=reread(self.facts.invokeai))
        return said

    def report_json(self) -> str:
        """What `check --json` writes: facts and findings, for a bug report."""
        assert self.facts is not None, "check first"
        return render_json(self.facts, self.findings)

    def verify_target(self) -> tuple[Path, Path] | None:
        """(python, prefix) to verify: the venv just installed into, else the checked one."""
        if isinstance(self.plan, Plan) and not self.preview_only:
            return Path(self.plan.python), Path(self.plan.prefix)
        target = self.target
        return (Path(target.executable), Path(target.prefix)) if target else None

    def verify(self, progress: Callable[[dict[str, Any]], None] | None = None,
               ) -> VerifyShown:
        """What the verify screen shows: a verify of the target (recorded as the CLI's), or
        the saved report; `progress` gets the self-test's progress per measured shape."""
        if self.options.selftest_report is not None:
            return load_selftest_report(self.options.selftest_report)
        where = self.verify_target()
        if where is None:
            raise VerifyError("there is no venv of this machine to verify",
                              "run `sagedoctor tui` without --facts, or pass --report FILE")
        outcome = verify_flow.verify(
            verify_flow.VerifyOptions(where[0], where[1], self.options.quick_verify),
            progress=progress or (lambda _data: None))
        return VerifyShown(outcome.verdict, outcome.report, outcome.results,
                           outcome.calibration_path)


@dataclass(frozen=True)
class VerifyShown:
    """A verify's verdict and results for the screen: run now, or read from a saved report."""

    verdict: str
    report: dict[str, Any]
    results: tuple[KeyResult, ...]
    calibration_path: Path | None = None  # None: nothing was written (a saved report)
    source: str | None = None  # the saved report's file name


def load_selftest_report(path: Path) -> VerifyShown:
    """A saved self-test report, or the `verify --json` output that wraps one."""
    from ..verify import parse_report, verdict

    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise VerifyError(f"{path}: cannot read a report from it ({exc})",
                          "pass a file written by `sagedoctor verify --json`") from None
    inner = data.get("report") if isinstance(data, dict) and "report" in data else data
    report = parse_report(json.dumps(inner))
    results = tuple(key_results(report))
    return VerifyShown(verdict(report, list(results)), report, results, source=path.name)


def cached_sizes(plan: Plan) -> dict[str, int]:
    """url -> size of the plan's files already in the download cache (sha256 re-checked, as
    the executor does before it uses them)."""
    from ..install.cache import Cache, default_cache_dir
    from ..install.errors import HostileDownload

    cache = Cache(default_cache_dir())
    wanted = [(s.wheel.file, s.wheel.sha256, s.wheel.url) for s in plan.steps if s.wheel]
    wanted += [(f"SageAttention-{s.build.commit}.tar.gz", s.build.source_sha256,
                s.build.source) for s in plan.steps
               if s.build is not None and s.build.commit and s.build.source.startswith("https")]
    out = {}
    for name, sha256, url in wanted:
        try:
            hit = cache.lookup(name, sha256, url)
            if hit is not None:
                out[url] = hit.stat().st_size
        except (OSError, HostileDownload):
            continue  # a bad name or an unreadable cache: shown as a download
    return out
