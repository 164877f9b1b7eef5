"""The CLI's output on every saved machine profile, recorded as golden files (issue 33: the
layout refactor must not change a byte of what check, plan and install --dry-run print).

Run as a script in a child process with the test's clean environment: it runs each command
through `sagedoctor.cli.main` in-process (hundreds of interpreter starts would take minutes)
and writes one report per profile to the folder named by its first argument. The test compares
them with tests/golden/ byte for byte; after an intended change of the output, regenerate:

    SAGEDOCTOR_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_golden_output.py
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("check",), ("check", "-v"), ("check", "--json"),
    ("plan",), ("plan", "--json"),
    ("install", "--dry-run"), ("install", "--dry-run", "--json"),
)


def run_one(argv: list[str]) -> tuple[int, str, str]:
    from sagedoctor import cli

    saved = sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    try:
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


def report(profile: Path, scrub: dict[str, str]) -> str:
    parts: list[str] = []
    for command in COMMANDS:
        code, out, err = run_one([*command, "--facts", str(profile)])
        text = f"=== {' '.join(command)} (exit {code})\n--- stdout\n{out}--- stderr\n{err}"
        for real, placeholder in scrub.items():
            text = text.replace(real, placeholder)
        parts.append(text)
    return "".join(parts)


def main(args: list[str]) -> int:
    profiles, out, home = Path(args[0]), Path(args[1]), args[2]
    out.mkdir(parents=True, exist_ok=True)
    import sagedoctor

    # The checkout's own folder (the index's path) differs in every clone.
    package = str(Path(sagedoctor.__file__).resolve().parent)
    scrub = {package: "<PACKAGE>", str(profiles): "<PROFILES>", home: "<HOME>"}
    for profile in sorted(profiles.glob("*.json")):
        (out / f"{profile.stem}.txt").write_bytes(report(profile, scrub).encode("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
