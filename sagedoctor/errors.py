"""Errors a user can meet. Each carries what went wrong and how to fix it."""

from __future__ import annotations

from . import exit_codes


class SagedoctorError(Exception):
    """A failure the user can act on; the CLI prints it without a traceback."""

    code = "SD000"
    # Where the CLI's exit code comes from (sagedoctor/exit_codes.py has the table).
    exit_status = exit_codes.TOOL_FAILED

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class FactsFileError(SagedoctorError):
    code = "SD901"

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(
            f"{source}: {problem}",
            "pass a file written by `sagedoctor check --json` of this sagedoctor version",
        )


class TargetError(SagedoctorError):
    """The target cannot be inspected: a fixable problem, as `check`'s SD190 is."""

    code = "SD902"
    exit_status = exit_codes.FIXABLE


class SettingError(SagedoctorError):
    """A SAGEDOCTOR_* environment variable holds a value sagedoctor cannot use."""

    code = "SD905"
    exit_status = exit_codes.USAGE

    def __init__(self, variable: str, value: str, expected: str) -> None:
        super().__init__(
            f"the environment variable {variable}={value!r:.80} is not {expected}",
            f"fix or unset {variable}",
        )
        self.variable = variable
