"""One router at a time: where the app this interpreter runs has its own SageAttention switch
on, the start-up hook stands aside and says so once (two routers wrapping the same function
would each see what the other left, in an order set by imports).

The app switches (docs/invokeai.md, docs/comfyui.md): InvokeAI's `attention_backend: sage` in
the config file InvokeAI itself reads (its root found as InvokeAI finds it, `--config` where
given, INVOKEAI_ATTENTION_BACKEND over the file), only in a process that runs InvokeAI (its
`invokeai-web` entry point or `-m invokeai...`: a script or notebook in the same venv has no
InvokeAI scope, so the hook serves it); ComfyUI's --use-sage-attention on this process's
command line; diffusers' DIFFUSERS_ATTN_BACKEND=sage* in the environment.
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


INVOKEAI_ENTRY = "invokeai-web"
INVOKEAI_ENV = "INVOKEAI_ATTENTION_BACKEND"


def _option(argv: "Sequence[str]", name: str) -> "str | None":
    """The value of `--name VALUE` or `--name=VALUE` in argv, as argparse takes it (the last
    one wins); None where absent."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def runs_invokeai(argv: "Sequence[str]", orig_argv: "Sequence[str]" = (),
                  package_dirs: "Sequence[str]" = ()) -> bool:
    """This process is InvokeAI itself: its `invokeai-web` entry point (bin/invokeai-web,
    Scripts\\invokeai-web.exe), or `python -m invokeai...` (orig_argv holds the -m; argv[0]
    is then the module's file inside the invokeai package, one of package_dirs)."""
    if argv:
        name = argv[0].replace("\\", "/").rsplit("/", 1)[-1].lower()
        for suffix in (".exe", "-script.pyw", "-script.py"):
            if name.endswith(suffix):
                name = name[:-len(suffix)]
                break
        if name == INVOKEAI_ENTRY:
            return True
    options = iter(orig_argv[1:])  # the interpreter's own options, up to -m, -c or a script
    for arg in options:
        if arg in ("-X", "-W", "--check-hash-based-pycs"):
            next(options, None)  # its value
            continue
        if arg == "-m" or (arg.startswith("-m") and len(arg) > 2):
            module = next(options, "") if arg == "-m" else arg[2:]
            return module == "invokeai" or module.startswith("invokeai.")
        if arg in ("-c", "-", "--") or not arg.startswith("-"):
            break
    if argv and argv[0] not in ("", "-c", "-m") and package_dirs:
        try:
            here = os.path.realpath(argv[0])
            return any(os.path.commonpath([here, os.path.realpath(d)]) == os.path.realpath(d)
                       for d in package_dirs)
        except ValueError:  # another drive (Windows)
            return False
    return False


def _invokeai_package_dirs() -> "list[str]":
    """Where this interpreter's invokeai package lies; empty where it has none."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("invokeai")  # found, never imported
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def _invokeai_root(argv: "Sequence[str]", env: "Mapping[str, str]", prefix: str,
                   home: str) -> "str | None":
    """InvokeAI's own order: --root, INVOKEAI_ROOT, the venv's parent, ~/invokeai; only in a
    venv that holds the invokeai package (its other interpreters have no such scope)."""
    root = _option(argv, "--root")
    if root:
        return root
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


def app_switch_on(argv: "Sequence[str] | None" = None, env: "Mapping[str, str] | None" = None,
                  prefix: "str | None" = None, home: "str | None" = None,
                  orig_argv: "Sequence[str] | None" = None) -> "str | None":
    """Which app's own SageAttention switch is on for this process, said; None where none."""
    argv = sys.argv if argv is None else argv
    env = os.environ if env is None else env
    backend = env.get(DIFFUSERS_ENV, "").strip()
    if backend.lstrip("_").lower().startswith("sage"):
        return f"diffusers' {DIFFUSERS_ENV}={backend}"
    if COMFYUI_FLAG in argv:
        return f"ComfyUI's {COMFYUI_FLAG}"
    prefix = prefix or sys.prefix
    package = _invokeai_package_dirs()
    if not package or not runs_invokeai(
            argv, getattr(sys, "orig_argv", ()) if orig_argv is None else orig_argv, package):
        return None
    # A known INVOKEAI_ setting beats the file (pydantic-settings; an empty one is ignored).
    value = env.get(INVOKEAI_ENV, "").strip()
    if value:
        where = f"{INVOKEAI_ENV} in the environment"
    else:
        config = _option(argv, "--config")
        root = _invokeai_root(argv, env, prefix, home or os.path.expanduser("~"))
        if root is None and not (config and os.path.isabs(config)):
            return None
        # InvokeAI reads root / (--config or "invokeai.yaml"): an absolute --config wins.
        where = os.path.join(root or "", config or "invokeai.yaml")
        value = configured_backend(where) or ""
    if "sage" in value.lower():
        return f"InvokeAI's attention_backend: {value} ({where})"
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
