"""What runs at every interpreter start of an enabled venv: the .pth line imports this module
and calls `install()`, which registers an import watcher and nothing else. The checks and the
trampoline (.hook) load when `torch.nn.functional` is first imported. Standard library only,
kept small (every start unmarshals it); never raises into the app.

No `from __future__ import annotations` here or in the package's __init__ (importing
__future__ is 0.1 ms of every start): annotations that name typing-only types are strings.
"""

import os
import sys

MYPY = False  # typing.TYPE_CHECKING without importing typing: this runs at every start
if MYPY:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

TARGET = "torch.nn.functional"
OFF_ENV = "SAGEDOCTOR_RUNTIME"


def _warn(message: str) -> None:
    sys.stderr.write(f"sagedoctor: {message}\n")


def runtime_switched_off() -> bool:
    """SAGEDOCTOR_RUNTIME=off (or 0, false, no, sdpa): scope, global mode and hook stay off."""
    return os.environ.get(OFF_ENV, "").strip().lower() in ("off", "0", "false", "no", "sdpa")


class _WrapLoader:
    def __init__(self, inner: "Any", after: "Callable[[ModuleType], None]") -> None:
        self.inner = inner
        self.after = after

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        create = getattr(self.inner, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module: "ModuleType") -> None:
        self.inner.exec_module(module)  # an import error propagates, as without the hook
        try:
            self.after(module)
        except Exception as exc:
            _warn(f"start-up hook failed ({exc}); SageAttention stays off")


class FunctionalWatcher:
    """Sees the first import of torch.nn.functional, then steps aside."""

    def find_spec(self, fullname: str, path: "Sequence[str] | None",
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname != TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None and spec.loader is not None:
                spec.loader = _WrapLoader(spec.loader, _on_functional_loaded)
                found: ModuleSpec = spec
                return found
        return None


def _on_functional_loaded(module: "ModuleType") -> None:
    from . import app_switch, hook

    # One router at a time: an app's own SageAttention switch that is on goes first.
    if hook.should_arm() and not app_switch.stands_aside():
        hook.arm(module)


def find_functional(fullname: str, path: "Sequence[str] | None",
                    target: "ModuleType | None" = None) -> "ModuleSpec | None":
    """What the .pth line's inline finder (commands/enable.py) calls on the first import of
    torch.nn.functional: until then nothing of the runtime is imported at start."""
    if runtime_switched_off():
        return None
    return FunctionalWatcher().find_spec(fullname, path, target)


def install() -> None:
    if runtime_switched_off():
        return
    loaded = sys.modules.get(TARGET)
    if loaded is not None:
        _on_functional_loaded(loaded)
    elif not any(isinstance(f, FunctionalWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, FunctionalWatcher())

