"""SDPA routing to SageAttention, bundled into the target venv.

Imports only the standard library, torch and (lazily) sageattention, with relative imports,
so that `install` can copy this folder into a venv as its own distribution. The names below
load on first use: the start-up hook imports this package in every interpreter of an enabled
venv and must stay cheap.
"""

MYPY = False  # typing.TYPE_CHECKING without importing typing (3 ms at every start)
if MYPY:
    from typing import Any

    from .accuracy import Thresholds as Thresholds
    from .registry import KernelRegistry as KernelRegistry
    from .registry import KernelSpec as KernelSpec
    from .registry import default_registry as default_registry
    from .router import Router as Router
    from .router import disable_global as disable_global
    from .router import enable_global as enable_global
    from .router import get_router as get_router
    from .router import sage_scope as sage_scope
    from .router import stats as stats

_WHERE = {
    "Thresholds": "accuracy", "KernelRegistry": "registry", "KernelSpec": "registry",
    "default_registry": "registry", "Router": "router", "disable_global": "router",
    "enable_global": "router", "get_router": "router", "sage_scope": "router", "stats": "router",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> "Any":
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # here: the start-up hook imports this package at every start

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
