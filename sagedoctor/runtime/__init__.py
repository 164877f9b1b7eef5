"""SDPA routing to SageAttention, bundled into the target venv.

Imports only the standard library, torch and (lazily) sageattention, with relative imports,
so that `install` can copy this folder into a venv as its own distribution.
"""

from .accuracy import Thresholds
from .registry import KernelRegistry, KernelSpec, default_registry
from .router import Router, disable_global, enable_global, get_router, sage_scope, stats

__all__ = [
    "KernelRegistry",
    "KernelSpec",
    "Router",
    "Thresholds",
    "default_registry",
    "disable_global",
    "enable_global",
    "get_router",
    "sage_scope",
    "stats",
]
