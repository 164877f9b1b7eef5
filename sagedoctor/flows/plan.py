"""The plan flow: the facts (this machine's, or a saved file), the index, and the Plan (or
what blocks it) that `plan`, `install --dry-run` and `install` all show and carry out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..decide.findings import AREAS
from ..decide.resolve import resolve_plan
from ..decide.resolve.steps import ResolveOptions
from ..facts import Facts, load_facts_file
from ..index import WheelIndex, load_index
from ..plan import Blocked, Plan
from ..probe import ProbeOptions, collect_facts


@dataclass(frozen=True)
class PlanOptions:
    venv: Path | None = None
    python: Path | None = None
    root: Path | None = None
    comfyui: Path | None = None  # --comfyui DIR
    facts_file: Path | None = None
    index_file: Path | None = None
    source_dir: Path | None = None
    use_linux_indexes: bool = True
    as_json: bool = False
    use: str | None = None  # --use app|sagedoctor
    rebuild: bool = False  # post-update: the installed build no longer loads; build anew


def gather(options: PlanOptions) -> tuple[Facts, WheelIndex, Plan | Blocked]:
    index = load_index(options.index_file)
    if options.facts_file is not None:
        facts = load_facts_file(options.facts_file)
    else:
        facts = collect_facts(ProbeOptions(venv=options.venv, python=options.python,
                                           root=options.root, comfyui=options.comfyui,
                                           areas=AREAS))
    return facts, index, plan_for(facts, index, options)


def resolve_options(options: PlanOptions) -> ResolveOptions:
    """What of the options the resolver reads (the plan's, and check's verdict over it)."""
    source = str(options.source_dir.resolve()) if options.source_dir else None
    return ResolveOptions(source_dir=source, use_linux_indexes=options.use_linux_indexes,
                          use=options.use, rebuild=options.rebuild)


def plan_for(facts: Facts, index: WheelIndex, options: PlanOptions) -> Plan | Blocked:
    """The plan over facts already gathered (the TUI's, taken area by area on its check
    screen)."""
    return resolve_plan(facts, index, resolve_options(options))
