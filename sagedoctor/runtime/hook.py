"""The start-up hook: `sagedoctor enable` puts one line in a .pth file of the venv that
imports this module and calls `install()`. At interpreter start that only registers an import
watcher; when `torch.nn.functional` is first imported it checks that the venv still matches what
`sagedoctor verify` proved (Python, torch, triton, SageAttention) and, if so, puts a
trampoline in place of `scaled_dot_product_attention` that switches the router on in global
mode at the first call. Standard library only until then; never raises into the app.
"""

from __future__ import annotations

import os
import sys

MYPY = False  # typing.TYPE_CHECKING without importing typing: this runs at every start
if MYPY:
    from collections.abc import Callable, Mapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

TARGET = "torch.nn.functional"
FINGERPRINT_DISTS = ("torch", "triton", "triton-windows", "sageattention")
OFF_ENV = "SAGEDOCTOR_RUNTIME"


def verified_path(prefix: str | None = None) -> str:
    return os.path.join(prefix or sys.prefix, "sagedoctor", "verified.json")


def live_fingerprint() -> dict[str, Any]:
    from importlib import metadata

    dists: dict[str, str | None] = {}
    for name in FINGERPRINT_DISTS:
        try:
            dists[name] = metadata.version(name)
        except Exception:
            dists[name] = None
    return {"python": ".".join(str(p) for p in sys.version_info[:3]), "dists": dists}


def fingerprint_differences(saved: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """What changed since the verified state, as 'torch 2.11.0 -> 2.12.0'."""
    out = []
    if saved.get("python") != live.get("python"):
        out.append(f"python {saved.get('python')} -> {live.get('python')}")
    old = saved.get("dists") or {}
    new = live.get("dists") or {}
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            out.append(f"{name} {old.get(name) or '(none)'} -> {new.get(name) or '(none)'}")
    return out


def _warn(message: str) -> None:
    sys.stderr.write(f"sagedoctor: {message}\n")


def runtime_switched_off() -> bool:
    """SAGEDOCTOR_RUNTIME=off (or 0, false, no, sdpa): scope, global mode and hook stay off."""
    return os.environ.get(OFF_ENV, "").strip().lower() in ("off", "0", "false", "no", "sdpa")


def should_arm(prefix: str | None = None) -> bool:
    import json

    path = verified_path(prefix)
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        _warn(f"{path} is missing or unreadable; SageAttention stays off "
              "(run `sagedoctor verify`)")
        return False
    changed = fingerprint_differences(saved.get("fingerprint", {}), live_fingerprint())
    if changed:
        _warn("this venv changed since it was verified (" + "; ".join(changed) + "); "
              "SageAttention stays off until `sagedoctor verify` runs again")
        return False
    return True


def arm(functional: Any, enable: Callable[[], Any] | None = None) -> None:
    """Replace SDPA with a trampoline: modules that bind the name at import get it too."""
    real = functional.scaled_dot_product_attention
    state: dict[str, Any] = {}

    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
        router = state.get("router")
        if router is None:
            try:
                functional.scaled_dot_product_attention = real  # the router keeps the real one
                router = (enable or _enable_global)()
            except Exception as exc:  # never break the app: plain SDPA from here on
                _warn(f"the SageAttention router did not start ({exc}); using SDPA")
                state["router"] = False
                return real(*args, **kwargs)
            state["router"] = router
        if router is False:
            return real(*args, **kwargs)
        return router.patched(*args, **kwargs)

    scaled_dot_product_attention.__doc__ = real.__doc__
    scaled_dot_product_attention.__wrapped__ = real  # type: ignore[attr-defined]
    functional.scaled_dot_product_attention = scaled_dot_product_attention


def _enable_global() -> Any:
    from .router import enable_global

    return enable_global()


class _WrapLoader:
    def __init__(self, inner: Any, after: Callable[[ModuleType], None]) -> None:
        self.inner = inner
        self.after = after

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self.inner, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)  # an import error propagates, as without the hook
        try:
            self.after(module)
        except Exception as exc:
            _warn(f"start-up hook failed ({exc}); SageAttention stays off")


class FunctionalWatcher:
    """Sees the first import of torch.nn.functional, then steps aside."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
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


def _on_functional_loaded(module: ModuleType) -> None:
    if should_arm():
        arm(module)


def install() -> None:
    if runtime_switched_off():
        return
    loaded = sys.modules.get(TARGET)
    if loaded is not None:
        _on_functional_loaded(loaded)
    elif not any(isinstance(f, FunctionalWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, FunctionalWatcher())

