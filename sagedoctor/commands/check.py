"""`sagedoctor check [AREA]`: detect, diagnose, report."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..decide.checks import diagnose, findings_for_areas
from ..decide.findings import AREAS, exit_code
from ..facts import load_facts_file
from ..probe import ProbeOptions, collect_facts
from ..render.findings import can_encode_marks, render_json, render_text, use_color


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


def run_check(options: CheckOptions, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
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
    if options.as_json:
        stream.write(render_json(facts, findings, getattr(stream, "encoding", None)))
    else:
        isatty = getattr(stream, "isatty", lambda: False)()
        stream.write(
            render_text(
                findings,
                options.areas,
                verbose=options.verbose,
                color=use_color(isatty, os.environ),
                unicode=can_encode_marks(getattr(stream, "encoding", None)),
                header=f"sagedoctor {facts.sagedoctor_version or ''} check: {source}".replace(
                    "  ", " "),
            )
        )
    return exit_code(findings)
