"""The one exit-code table: every command, and every error it can end with, exits by it.

The same broken target reads the same everywhere: `check`, `plan`, `install`, `verify`,
`enable`, `disable`, `uninstall` and `post-update` all exit 1 when the target cannot be
inspected, and 64 for an option they refuse.
"""

from __future__ import annotations

READY = 0
FIXABLE = 1  # at least one error, each with its fix (or a plan blocked by one)
CANNOT_WORK = 2  # SageAttention cannot work on this machine at all
TOOL_FAILED = 3  # sagedoctor, or a tool it ran, failed; `-v` shows the traceback
USAGE = 64  # BSD's EX_USAGE: argparse's own 2 would read as "cannot work on this machine"
INTERRUPTED = 130  # 128 + SIGINT: Ctrl+C (an install: SIGTERM, SIGHUP too), rolled back first

TABLE: tuple[tuple[int, str], ...] = (
    (READY, "ready: nothing to fix (warnings may be printed); `plan`: nothing to do, or a plan"),
    (FIXABLE, "fixable problems: at least one error, each with its fix; the target cannot be "
              "inspected; `install` refused before changing anything (the preflight); "
              "`verify`: no kernel is used"),
    (CANNOT_WORK, "SageAttention cannot work on this machine (no NVIDIA GPU, unsupported OS or "
                  "GPU)"),
    (TOOL_FAILED, "sagedoctor or a tool it ran failed (a bad `--facts` file, a failed download "
                  "or build, already rolled back; an internal error)"),
    (USAGE, "a usage error: an unknown option, a bad argument or a bad SAGEDOCTOR_* setting"),
    (INTERRUPTED, "interrupted: Ctrl+C, or SIGTERM or SIGHUP during an install; an install in "
                  "progress was rolled back first"),
)
