"""The Python area: the target interpreter, and an install left half done in it."""

from __future__ import annotations

from ...facts import (
    Facts,
    TargetFacts,
)
from ..findings import Finding, finding
from ..fixes import (
    quoted_prefix,
    recovery_fix,
)
from ..requirements import describe_pending
from ..versions import (
    parse_version,
)


def check_python(target: TargetFacts, os_name: str) -> list[Finding]:
    out: list[Finding] = []
    kind = "venv" if target.is_venv else "not a venv"
    out.append(finding("SD130", "ok", f"Python {target.python_version} "
                       f"({target.implementation}, {kind}) at {target.executable}"))
    version = parse_version(target.python_version)
    if version is None or not (3, 9) <= version.release[:2] <= (3, 14):
        out.append(finding("SD133", "error", f"Python {target.python_version}"))
    if os_name == "windows":
        missing = []
        if not target.has_python_h:
            missing.append(f"{target.include_dir}\\Python.h")
        if target.has_python_lib is False and target.libs_dir:
            major_minor = "".join(target.python_version.split(".")[:2])
            missing.append(f"{target.libs_dir}\\python{major_minor}.lib")
        if missing:
            out.append(finding("SD131", "error", "missing: " + ", ".join(missing)))
    if not target.site_packages_writable:
        out.append(finding("SD132", "error", f"{target.site_packages} is not writable"))
    if not target.is_venv:
        out.append(finding("SD134", "info", f"{target.prefix} is a base interpreter"))
    return out


def check_interrupted(facts: Facts, os_name: str) -> list[Finding]:
    """A journal a killed install left: the venv may be half-installed (SD199)."""
    pending, target = facts.interrupted_install, facts.target
    if pending is None or target is None:
        return []
    fix = ("wait for it to finish, then run `sagedoctor check` again" if pending.running
           else recovery_fix(f"--venv {quoted_prefix(target, os_name)}"))
    return [finding("SD199", "error", describe_pending(pending), fix)]
