"""Errors a user can meet. Each carries what went wrong and how to fix it."""

from __future__ import annotations


class SagedoctorError(Exception):
    """A failure the user can act on; the CLI prints it without a traceback."""

    code = "SD000"

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
    code = "SD902"


class SettingError(SagedoctorError):
    """A SAGEDOCTOR_* environment variable holds a value sagedoctor cannot use."""

    code = "SD905"

    def __init__(self, variable: str, value: str, expected: str) -> None:
        super().__init__(
            f"the environment variable {variable}={value!r:.80} is not {expected}",
            f"fix or unset {variable}",
        )
        self.variable = variable
