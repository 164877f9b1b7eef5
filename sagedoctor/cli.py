"""Argument parsing and exit codes only; each command lives in sagedoctor/commands/."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .areas import AREAS
from .errors import SagedoctorError

EXIT_TOOL_FAILED = 3


def _target_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--venv", type=Path, metavar="DIR",
                       help="the target virtual environment (default: InvokeAI's, else the "
                            "active one, else this interpreter)")
    group.add_argument("--python", type=Path, metavar="EXE", help="the target interpreter")
    parser.add_argument("--root", type=Path, metavar="DIR", help="the InvokeAI root folder")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sagedoctor",
        description="Install SageAttention correctly, and prove it works.",
    )
    parser.add_argument("--version", action="version", version=f"sagedoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser(
        "check",
        help="diagnose this machine and the target environment",
        description="Detect the machine and the target environment, say what is wrong and "
                    "how to fix it. Exit codes: 0 ready, 1 fixable problems, 2 cannot work "
                    "on this machine, 3 sagedoctor itself failed.",
    )
    check.add_argument("area", nargs="?", choices=AREAS, help="check one area only")
    _target_options(check)
    check.add_argument("--json", action="store_true", help="write facts and findings as JSON")
    check.add_argument("--facts", type=Path, metavar="FILE",
                       help="diagnose a saved `check --json` file instead of this machine")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="show every detail (and tracebacks of sagedoctor's own errors)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "check":
            from .commands.check import CheckOptions, run_check

            return run_check(
                CheckOptions(
                    areas=(args.area,) if args.area else AREAS,
                    venv=args.venv,
                    python=args.python,
                    root=args.root,
                    facts_file=args.facts,
                    as_json=args.json,
                    verbose=args.verbose,
                )
            )
    except SagedoctorError as exc:
        print(f"sagedoctor: error {exc.code}: {exc.message}", file=sys.stderr)
        if exc.fix:
            print(f"  fix: {exc.fix}", file=sys.stderr)
        return EXIT_TOOL_FAILED
    except KeyboardInterrupt:
        print("sagedoctor: interrupted", file=sys.stderr)
        return 130
    except Exception:
        if getattr(args, "verbose", False):
            traceback.print_exc()
        else:
            print("sagedoctor: internal error (run with -v for the traceback)", file=sys.stderr)
        return EXIT_TOOL_FAILED
    parser.error(f"unknown command {args.command}")  # pragma: no cover
    return EXIT_TOOL_FAILED  # pragma: no cover
