"""One router at a time: where the app this interpreter runs has its own SageAttention switch
on, the start-up hook stands aside and says so once (two routers wrapping the same function
would each see what the other left, in an order set by imports).

The app switches (docs/invokeai.md, docs/comfyui.md): InvokeAI's `attention_backend: sage` in
the invokeai.yaml of its root (found as InvokeAI finds it), ComfyUI's --use-sage-attention on
this process's command line, diffusers' DIFFUSERS_ATTN_BACKEND=sage* in the environment.
Standard library only; runs once, when torch.nn.functional is first imported; never raises.

No `from __future__ import annotations` (see start.py): typing-only names are strings.
"""

import os
import sys

MYPY = False
if MYPY:
    from collections.abc import Mapping, Sequence

DIFFUSERS_ENV = "DIFFUSERS_ATTN_BACKEND"
COMFYUI_FLAG = "--use-sage-attention"
MAX_CONFIG_BYTES = 1_000_000


def _invokeai_root(argv: "Sequence[str]", env: "Mapping[str, str]", prefix: str,
                   home: str) -> "str | None":
    """InvokeAI's own order: --root, INVOKEAI_ROOT, the venv's parent, ~/invokeai; only in a
    venv that holds the invokeai package (its other interpreters have no such scope)."""
    for i, arg in enumerate(argv):
        if arg == "--root" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--root="):
            return arg[len("--root="):]
    if env.get("INVOKEAI_ROOT"):
        return env["INVOKEAI_ROOT"]
    parent = os.path.dirname(os.path.abspath(prefix))
    if os.path.isfile(os.path.join(parent, "invokeai.yaml")):
        return parent
    default = os.path.join(home, "invokeai")
    return default if os.path.isfile(os.path.join(default, "invokeai.yaml")) else None


def configured_backend(path: str) -> "str | None":
    """The top-level attention_backend value of an invokeai.yaml, read line by line (no YAML
    library at start-up); the last one wins, as PyYAML keeps it. None where unreadable."""
    import stat

    try:
        found = os.stat(path)
        if not stat.S_ISREG(found.st_mode) or found.st_size > MAX_CONFIG_BYTES:
            return None  # a FIFO would block; a folder or a huge file is no config
        with open(path, "rb") as handle:
            text = handle.read(MAX_CONFIG_BYTES).decode("utf-8-sig", errors="replace")
    except OSError:
        return None
    value = None
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key.rstrip() == "attention_backend":  # column 0: a top-level key
            rest = rest.split("#", 1)[0].strip().strip("'\"").strip()
            value = rest or None
    return value


def _invokeai_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("invokeai") is not None  # found, never imported
    except (ImportError, ValueError):
        return False


def app_switch_on(argv: "Sequence[str] | None" = None, env: "Mapping[str, str] | None" = None,
                  prefix: "str | None" = None, home: "str | None" = None) -> "str | None":
    """Which app's own SageAttention switch is on for this process, said; None where none."""
    argv = sys.argv if argv is None else argv
    env = os.environ if env is None else env
    backend = env.get(DIFFUSERS_ENV, "").strip()
    if backend.lstrip("_").lower().startswith("sage"):
        return f"diffusers' {DIFFUSERS_ENV}={backend}"
    if COMFYUI_FLAG in argv:
        return f"ComfyUI's {COMFYUI_FLAG}"
    prefix = prefix or sys.prefix
    if not _invokeai_installed():
        return None
    root = _invokeai_root(argv, env, prefix, home or os.path.expanduser("~"))
    if root is None:
        return None
    path = os.path.join(root, "invokeai.yaml")
    value = configured_backend(path)
    if value is not None and "sage" in value.lower():
        return f"InvokeAI's attention_backend: {value} ({path})"
    return None


def stands_aside() -> bool:
    """Called once, before the hook arms: True (and one line on stderr) where an app's own
    switch is on. Any failure here is no reason to stand aside."""
    try:
        reason = app_switch_on()
    except Exception:
        return False
    if reason is None:
        return False
    sys.stderr.write(f"sagedoctor: {reason} is on, so sagedoctor's start-up hook stands "
                     "aside (one router at a time; `sagedoctor check` shows the pair)\n")
    return True
