"""`sagedoctor enable` / `disable`: the venv-wide start-up hook for apps with no attention
setting of their own (InvokeAI without `attention_backend`, plain scripts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from .. import exit_codes
from ..errors import SagedoctorError
from ..facts import TargetFacts
from ..state import HOOK_FILE as HOOK_FILE  # re-exported: where enable writes it

# The .pth line defines a finder inline instead of importing the runtime: an import from
# site-packages at every start was most of the hook's cost in `python -c pass` (about 0.6 ms of
# 10). The finder waits for torch.nn.functional, then hands over to sagedoctor_runtime.start;
# a runtime removed by hand makes it step aside (the import of torch goes on as without it).
# Once only: site reads the .pth twice where lib64 links to lib.
_FINDER = (
    "class _SagedoctorFinder:\n"
    "    @staticmethod\n"
    "    def find_spec(name, path=None, target=None):\n"
    "        if name != 'torch.nn.functional':\n"
    "            return None\n"
    "        if _SagedoctorFinder in sys.meta_path:\n"
    "            sys.meta_path.remove(_SagedoctorFinder)\n"
    "        try:\n"
    "            from sagedoctor_runtime.start import find_functional\n"
    "            return find_functional(name, path, target)\n"
    "        except Exception:\n"
    "            return None\n"
    "sys.meta_path.insert(0, _SagedoctorFinder)\n")
# The guard skips compiling the finder again (0.15 ms) on the .pth's second read.
HOOK_LINE = ("import sys; any(getattr(f, '__name__', '') == '_SagedoctorFinder' for f in "
             f"sys.meta_path) or exec({_FINDER!r}, {{'sys': sys}})\n")


class EnableError(SagedoctorError):
    """enable's precondition (the runtime, a passing verify) is missing: fixable."""

    code = "SD930"
    exit_status = exit_codes.FIXABLE


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
