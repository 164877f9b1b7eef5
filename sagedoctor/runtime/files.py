"""The names of sagedoctor's files in a venv: the one place `<venv>/sagedoctor/` is spelled.
The runtime (bundled into the venv, standard library only) reads them from here, and the tool
imports these names from the runtime, never the reverse (the runtime imports nothing of it).

No `from __future__ import annotations` here (see hook.py): the start-up hook loads this.
"""

import os

RECORDS_DIR = "sagedoctor"  # <venv>/sagedoctor/: what sagedoctor proved and did there
VERIFIED = "verified.json"  # the hook's arming record (verify, verdict 'routing' only)
CALIBRATION = "calibration.json"  # the router's per-shape decisions (verify writes them)
INSTALLED = "installed.json"  # what install put there and what it replaced (uninstall)
INVOKEAI_EDIT = "invokeai-edit.json"  # what sagedoctor last set in invokeai.yaml
AUTO_REPAIR_MARKER = "auto-repair.started"  # the hook started post-update once
AUTO_REPAIR_LOG = "auto-repair.log"  # that post-update's output
HOOK_FILE = "sagedoctor-runtime.pth"  # the start-up hook, in the venv's site-packages
# This package as install puts it into the venv: its own distribution (install/bundle.py)
RUNTIME_PACKAGE = "sagedoctor_runtime"


def records_dir(prefix: str) -> str:
    """<prefix>/sagedoctor: the folder of every record above (HOOK_FILE lives elsewhere)."""
    return os.path.join(prefix, RECORDS_DIR)


def record_file(prefix: str, name: str) -> str:
    return os.path.join(records_dir(prefix), name)
