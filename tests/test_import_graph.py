"""The import graph between sagedoctor's packages, read from the source with ast (imports
inside functions included): the boundaries ARCHITECTURE.md draws, checked on every run.

The rules are made from the design's "never" list (a copy in tests/fixtures/, so the suite
runs without ../shared): each clause of it is parsed into the edges it forbids, and a clause
no rule understands fails the suite rather than go unchecked."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sagedoctor"
NEVER = Path(__file__).parent / "fixtures" / "architecture-never.md"


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


# --- the rules, made from the "never" list ------------------------------------------------

# What the list's words name. A folder or file of the tool ("install/", "plan.py",
# "decide/resolve") is its dotted module; the rest are named here.
STATE_WRITERS = ("record_", "save_", "write_", "forget_")  # state.py's writing functions
IO_MODULES = ("subprocess", "socket", "http", "urllib", "httpx", "shutil", "tempfile",
              "sagedoctor.proc", "sagedoctor.file_meta", "sagedoctor.install",
              "sagedoctor.probe", "sagedoctor.apps", "sagedoctor.hook")


@dataclass(frozen=True)
class Rule:
    clause: str  # the words of the list it comes from
    source: str  # the package it constrains
    forbidden: tuple[str, ...] = ()  # modules it may not import
    writers: bool = False  # nor state.py's writers
    outside: bool = False  # nor anything of the tool outside itself

    def broken_by(self, edge: Edge) -> bool:
        if not inside(edge.source, self.source):
            return False
        if self.outside:
            return (inside(edge.target, "sagedoctor")
                    and not inside(edge.target, self.source))
        if self.writers and edge.target == "sagedoctor.state" and any(
                n.startswith(STATE_WRITERS) for n in edge.names):
            return True
        return any(inside(edge.target, f) for f in self.forbidden)


def _module(word: str) -> str:
    word = word.strip().rstrip("/").removesuffix(".py")
    return "sagedoctor." + word.replace("/", ".")


def rules_of(clause: str) -> list[Rule]:
    """The rules one clause of the list states; [] where it states none we can check."""
    text = " ".join(clause.replace("*", "").split())
    if found := re.fullmatch(r"(?:Never backwards: )?(\S+) imports no I/O \(.*\)", text):
        return [Rule(text, _module(found[1]), IO_MODULES, writers=True)]
    if found := re.fullmatch(r"(?:Never backwards: )?(\S+) imports no (.+)", text):
        words = [w.strip() for w in found[2].split(",")]
        return [Rule(text, _module(found[1]),
                     tuple(_module(w) for w in words if w != "state writers"),
                     writers="state writers" in words)]
    if found := re.fullmatch(r"(\S+) imports \S+, not (\S+)", text):
        return [Rule(text, _module(found[1]), (_module(found[2]),))]
    if found := re.fullmatch(r"(\S+) and (\S+) import \S+, never each other", text):
        a, b = _module(found[1]), _module(found[2])
        return [Rule(text, a, (b,)), Rule(text, b, (a,))]
    if found := re.fullmatch(r"(\S+) imports nothing of the tool\.?", text):
        return [Rule(text, _module(found[1]), outside=True)]
    raise AssertionError(f"a clause of the never list no rule understands: {text!r}")


def never_clauses() -> list[str]:
    """The "Never backwards" bullet, one clause per `;`."""
    text = NEVER.read_text(encoding="utf-8")
    bullet = text.split("- **Never backwards:**", 1)[1].split("\n- ", 1)[0]
    return [c.strip() for c in bullet.split(";") if c.strip()]


RULES = [rule for clause in never_clauses() for rule in rules_of(clause)]


def test_every_clause_of_the_never_list_is_a_rule() -> None:
    assert [r.source for r in RULES] == [
        "sagedoctor.probe", "sagedoctor.decide", "sagedoctor.install", "sagedoctor.tui",
        "sagedoctor.commands", "sagedoctor.runtime"]
    with pytest.raises(AssertionError, match="no rule understands"):
        rules_of("probe sometimes imports install/")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.source}: {r.clause[:40]}")
def test_never(rule: Rule) -> None:
    bad = [str(e) for e in all_edges() if rule.broken_by(e)]
    assert bad == [], f"{rule.clause}: {bad}"


def test_a_rule_catches_the_edge_it_forbids() -> None:
    probe = next(r for r in RULES if r.source == "sagedoctor.probe")
    assert probe.broken_by(Edge("sagedoctor.probe", "sagedoctor.install.pending", ("x",), 1))
    assert probe.broken_by(Edge("sagedoctor.probe.x", "sagedoctor.state", ("record_install",),
                                1))
    assert not probe.broken_by(Edge("sagedoctor.probe", "sagedoctor.state", ("load_status",),
                                    1))
    runtime = next(r for r in RULES if r.source == "sagedoctor.runtime")
    assert runtime.broken_by(Edge("sagedoctor.runtime.hook", "sagedoctor.state", (), 1))
    assert not runtime.broken_by(Edge("sagedoctor.runtime.hook", "sagedoctor.runtime.files",
                                      (), 1))


def test_the_tools_process_never_imports_torch() -> None:
    """"The tool's process never imports torch": only the runtime (in the target) does."""
    bad = [f"{path}:{node.lineno}" for path in sorted(PACKAGE.rglob("*.py"))
           if "runtime" not in path.relative_to(PACKAGE).parts
           for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
           if (isinstance(node, ast.Import) and any(
               a.name.split(".")[0] == "torch" for a in node.names))
           or (isinstance(node, ast.ImportFrom) and node.level == 0
               and (node.module or "").split(".")[0] == "torch")]
    assert bad == []


@pytest.mark.skipif(sys.version_info < (3, 10), reason="sys.stdlib_module_names")
def test_the_runtime_imports_only_the_standard_library_torch_and_sageattention() -> None:
    """"imports only the standard library, torch and (lazily) sageattention, with relative
    imports only": it is copied into the target venv as its own distribution."""
    allowed = set(sys.stdlib_module_names) | {"torch", "sageattention", "__future__"}
    bad = []
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom)
                     and node.level == 0 else [])
            bad += [f"{path.name}:{getattr(node, 'lineno', 0)} {n}" for n in names
                    if n.split(".")[0] not in allowed]
    assert bad == []


def test_no_command_imports_another_commands_private_name() -> None:
    bad = [str(e) for e in all_edges()
           if inside(e.source, "sagedoctor.commands") and inside(e.target, "sagedoctor.commands")
           and e.target != e.source and any(n.startswith("_") for n in e.names)]
    assert bad == []


def _top(module: str) -> str:
    """The package or top-level module an import lands in: sagedoctor.install.execute ->
    sagedoctor.install; sagedoctor.hook -> sagedoctor.hook."""
    return ".".join(module.split(".")[:2])


def reaches(edges: list[Edge], start: str) -> set[str]:
    graph: dict[str, set[str]] = {}
    for e in edges:
        a, b = _top(e.source), _top(e.target)
        if a != b and b != "sagedoctor":
            graph.setdefault(a, set()).add(b)
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("package", ["sagedoctor.install", "sagedoctor.verify"])
def test_no_import_path_leads_back_into_the_install(package: str) -> None:
    """install -> apps.invokeai -> hook -> install.pending was a package cycle (and verify ->
    install.bundle, probe.verification -> verify another): what both need sits below them
    (hook.refuse_if_pending, runtime.files.RUNTIME_PACKAGE, decide/app_shapes)."""
    edges = all_edges()
    back = [str(e) for e in edges if _top(e.target) == package and _top(e.source) != package
            and _top(e.source) in reaches(edges, package)]
    assert back == []


def test_the_cycle_walk_finds_a_cycle() -> None:
    edges = [Edge("sagedoctor.install.execute", "sagedoctor.apps.invokeai", (), 1),
             Edge("sagedoctor.apps.invokeai", "sagedoctor.hook", (), 1),
             Edge("sagedoctor.hook", "sagedoctor.install.pending", (), 1)]
    assert "sagedoctor.install" in reaches(edges, "sagedoctor.install")
    assert "sagedoctor.install" not in reaches(edges[:2], "sagedoctor.install")
