"""The check flow: the facts (this machine's, or a saved `check --json` file) and what check
reports about them. The whole check folds the plan's verdict in (decide.assess), so check and
plan always agree; one area gives its own findings only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..decide.checks import diagnose, findings_for_areas
from ..decide.findings import AREAS, Finding, exit_code
from ..facts import Facts, load_facts_file
from ..probe import ProbeOptions, collect_facts


@dataclass(frozen=True)
class CheckOptions:
    areas: tuple[str, ...] = AREAS
    venv: Path | None = None
    python: Path | None = None
    root: Path | None = None
    comfyui: Path | None = None
    facts_file: Path | None = None
    as_json: bool = False
    verbose: bool = False
    use: str | None = None  # --use app|sagedoctor


@dataclass(frozen=True)
class CheckResult:
    facts: Facts
    source: str  # where the facts come from: "this machine" or "facts from FILE"
    findings: tuple[Finding, ...]

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)


def check(options: CheckOptions) -> CheckResult:
    if options.facts_file is not None:
        facts = load_facts_file(options.facts_file)
        source = f"facts from {options.facts_file}"
    else:
        facts = collect_facts(
            ProbeOptions(venv=options.venv, python=options.python, root=options.root,
                         comfyui=options.comfyui, areas=options.areas)
        )
        source = "this machine"
    if set(options.areas) >= set(AREAS):
        # The whole check: the plan's verdict is part of it, so the two always agree.
        from ..decide.assess import assess
        from ..decide.findings import finding
        from ..errors import SagedoctorError
        from ..index import load_index, shipped_index

        try:
            index = load_index(None)
            problem = []
        except SagedoctorError as exc:  # a refreshed index that does not load: say so, go on
            index = shipped_index()
            problem = [finding("SD190", "error", f"{exc.message} (fix: {exc.fix})",
                               area="sageattention", title="Could not read the wheel index")]
        from ..decide.resolve.steps import ResolveOptions

        findings = list(assess(facts, index, ResolveOptions(use=options.use)).findings) \
            + problem
    else:  # one area: its own findings (a blocked install shows in the whole check)
        findings = findings_for_areas(diagnose(facts, use=options.use), options.areas)
    return CheckResult(facts, source, tuple(findings))
