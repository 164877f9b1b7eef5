"""Where a self-test started by sagedoctor writes the bytecode of what it imports.

Where bytecode writing is off (PYTHONDONTWRITEBYTECODE: container images set it, and so do the
lent GPU machines) and the venv's torch was installed without bytecode, every process compiles
torch's modules, and the ones it imports lazily once SageAttention registers its kernels, from
source: 1,895 modules, 4.4 s of a 15 s nothing-changed self-test on an H100 (cProfile). Such a
run writes its bytecode under the folder sagedoctor names (its own cache) instead, and the next
run reads it; nothing is written into the venv. A venv with bytecode of its own is left as it
is: with a prefix set, Python would ignore that bytecode and compile everything once more.
Python checks each cached file against its source's size and time: an upgraded torch is
compiled again, never served stale.

Decided in the target, before torch is imported (sys.pycache_prefix and
sys.dont_write_bytecode are read at each import). Standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping

CACHE_ENV = "SAGEDOCTOR_BYTECODE_CACHE"  # the folder, from sagedoctor's verify


def cache_folder(environ: Mapping[str, str], dont_write: bool, prefix: str | None,
                 compiled: bool | None) -> str | None:
    """Pure: the folder to write this process's bytecode into, or None to leave Python as it
    is. Only where sagedoctor named a folder, writing is off, no prefix is set already (the
    user's), and the probed module is known to have no bytecode beside its source."""
    folder = environ.get(CACHE_ENV, "")
    if not folder or not dont_write or prefix or compiled is not False:
        return None
    return folder


# What tells whether the venv's torch has bytecode: its __init__, or a module one folder down
# (a venv that links torch's folders in, as an app's launcher may, has the folders' own).
PROBES = ("__init__.py", os.path.join("nn", "functional.py"))


def has_bytecode(name: str, probes: tuple[str, ...] = PROBES) -> bool | None:
    """Whether the package `name` has bytecode beside its source for any of `probes` (paths
    in it); None where it is not found or has no Python source (an extension, a namespace
    package). Nothing is imported."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not isinstance(origin, str) or not origin.endswith(".py"):
        return None
    folder = os.path.dirname(origin)
    try:
        return any(os.path.exists(importlib.util.cache_from_source(os.path.join(folder, probe)))
                   for probe in probes)
    except (NotImplementedError, ValueError):
        return None


def cache_bytecode(probe: str = "torch") -> str | None:
    """Turn bytecode writing on, into sagedoctor's folder, where cache_folder says so; the
    folder, or None where Python is left as it is."""
    if not os.environ.get(CACHE_ENV) or not sys.dont_write_bytecode or sys.pycache_prefix:
        return None  # (the common case, without looking for the module)
    folder = cache_folder(os.environ, sys.dont_write_bytecode, sys.pycache_prefix,
                          has_bytecode(probe))
    if folder is not None:
        sys.pycache_prefix = folder
        sys.dont_write_bytecode = False
    return folder
