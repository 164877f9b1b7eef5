"""The runtime is copied into target venvs: it may import only the standard library, torch,
sageattention (lazily) and itself (relatively)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

RUNTIME = Path(__file__).parents[1] / "sagedoctor" / "runtime"
ALLOWED_THIRD_PARTY = {"torch", "sageattention"}


def test_runtime_imports_only_stdlib_torch_and_itself() -> None:
    offenders = []
    for path in sorted(RUNTIME.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level > 0:
                    continue  # relative: inside the runtime
                names = [(node.module or "").split(".")[0]]
            else:
                continue
            for name in names:
                if name not in sys.stdlib_module_names and name not in ALLOWED_THIRD_PARTY \
                        and name != "__future__":
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_sageattention_is_imported_lazily() -> None:
    for path in RUNTIME.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in top_level:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                node.module or ""]
            assert not any(n.startswith(("sageattention", "torch")) for n in names), path.name
