"""The import graph between sagedoctor's packages, read from the source with ast (imports
inside functions included): the boundaries ARCHITECTURE.md draws, checked on every run."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sagedoctor"


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module, dotted: sagedoctor.install.execute
    target: str  # the imported module, dotted: sagedoctor.resolve
    names: tuple[str, ...]  # the names taken from it (from X import a, b); () for `import X`
    line: int

    def __str__(self) -> str:
        taken = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.source}:{self.line} -> {self.target}{taken}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The dotted module a `from ... import` names, relative levels resolved."""
    if node.level == 0:
        return node.module or ""
    base = source.split(".") if is_package else source.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def edges_of(path: Path) -> list[Edge]:
    source = module_name(path)
    is_package = path.name == "__init__.py"
    out: list[Edge] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [Edge(source, a.name, (), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = absolute(source, is_package, node)
            names = tuple(a.name for a in node.names)
            # `from . import x` / `from .pkg import mod`: a name may be a submodule
            subs = [f"{target}.{n}" for n in names
                    if (PACKAGE.parent / Path(*f"{target}.{n}".split("."))).with_suffix(
                        ".py").is_file()
                    or (PACKAGE.parent / Path(*f"{target}.{n}".split("."))).is_dir()]
            out.append(Edge(source, target, names, node.lineno))
            out += [Edge(source, s, (), node.lineno) for s in subs]
    return out


def all_edges() -> list[Edge]:
    return [e for path in sorted(PACKAGE.rglob("*.py")) for e in edges_of(path)
            if e.target == "sagedoctor" or e.target.startswith("sagedoctor.")]


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_walker_sees_relative_and_function_level_imports() -> None:
    edges = {(e.source, e.target) for e in all_edges()}
    # cli.py imports its commands inside main(); decide/resolve imports plan at the top
    assert ("sagedoctor.cli", "sagedoctor.commands.uninstall") in edges
    assert ("sagedoctor.decide.resolve", "sagedoctor.plan") in edges
    assert ("sagedoctor.install.execute", "sagedoctor.plan") in edges


def test_install_imports_plan_never_resolve() -> None:
    bad = [str(e) for e in all_edges()
           if inside(e.source, "sagedoctor.install")
           and inside(e.target, "sagedoctor.decide.resolve")]
    assert bad == []


def test_tui_imports_no_command() -> None:
    bad = [str(e) for e in all_edges()
           if inside(e.source, "sagedoctor.tui") and inside(e.target, "sagedoctor.commands")]
    assert bad == []


def test_no_command_imports_another_commands_private_name() -> None:
    bad = [str(e) for e in all_edges()
           if inside(e.source, "sagedoctor.commands") and inside(e.target, "sagedoctor.commands")
           and e.target != e.source and any(n.startswith("_") for n in e.names)]
    assert bad == []


def test_runtime_imports_nothing_of_the_tool() -> None:
    bad = [str(e) for e in all_edges()
           if inside(e.source, "sagedoctor.runtime")
           and not inside(e.target, "sagedoctor.runtime")]
    assert bad == []
