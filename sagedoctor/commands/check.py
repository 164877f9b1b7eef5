"""`sagedoctor check [AREA]`: detect, diagnose, report."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..areas import AREAS
from ..diagnose import diagnose, exit_code, findings_for_areas
from ..facts import load_facts_file
from ..probe import ProbeOptions, collect_facts
from ..render import can_encode_marks, render_json, render_text, use_color


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
    findings = findings_for_areas(diagnose(facts), options.areas)
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
