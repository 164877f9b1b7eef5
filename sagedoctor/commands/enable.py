"""`sagedoctor enable` / `disable`: the venv-wide start-up hook for apps with no attention
setting of their own (InvokeAI without `attention_backend`, plain scripts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from ..errors import SagedoctorError
from ..facts import TargetFacts

HOOK_FILE = "sagedoctor-runtime.pth"
HOOK_LINE = "import sagedoctor_runtime.start; sagedoctor_runtime.start.install()\n"


class EnableError(SagedoctorError):
    code = "SD930"


def hook_path(target: TargetFacts) -> Path:
    return Path(target.site_packages) / HOOK_FILE


def run_enable(target: TargetFacts, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    venv = target.prefix
    if target.runtime is None:
        raise EnableError(f"the runtime is not installed in {venv}",
                          f"run `sagedoctor install --venv {venv}` first")
    verified = Path(target.prefix) / "sagedoctor" / "verified.json"
    try:
        data = json.loads(verified.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise EnableError(f"{venv} has no passing verification",
                          f"run `sagedoctor verify --venv {venv}`; enable needs a kernel that "
                          "was proven correct and faster") from None
    if not isinstance(data, dict) or data.get("verdict") != "routing":
        raise EnableError(f"{verified} does not record a passing verification",
                          f"run `sagedoctor verify --venv {venv}`")
    path = hook_path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(HOOK_LINE, encoding="utf-8")
    tmp.replace(path)
    stream.write(f"Enabled: {path}\n"
                 "Every Python of this venv now routes attention through SageAttention where "
                 "it was verified faster, while torch, triton and SageAttention stay as "
                 "verified. Turn it off with `sagedoctor disable` or SAGEDOCTOR_RUNTIME=off.\n")
    return 0


def run_disable(target: TargetFacts, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    path = hook_path(target)
    if path.exists():
        path.unlink()
        stream.write(f"Disabled: removed {path}\n")
    else:
        stream.write(f"Nothing to do: {path} does not exist\n")
    return 0
