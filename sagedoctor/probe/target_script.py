"""Runs INSIDE the target interpreter (Python 3.8+, standard library only) and answers JSON.

It is sent on standard input, never imported by sagedoctor itself. It reads metadata and files
only: it never imports torch, triton, sageattention or invokeai. The answer is framed by the
token in SAGEDOCTOR_ANSWER_TOKEN (see sagedoctor/target_answer.py), so what the venv prints
by itself (a sitecustomize) is not mistaken for it.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
import sysconfig
from types import ModuleType
from typing import Any

# `python -` puts the current directory first on sys.path; a folder named like a package
# there must not shadow the real one.
sys.path[:] = [p for p in sys.path if p not in ("", ".")]

try:
    from importlib import metadata as _md
except ImportError:  # Python < 3.8
    _md = None  # type: ignore[assignment]


def dist_version(name: str) -> str | None:
    if _md is None:
        return None
    try:
        return str(_md.version(name))
    except Exception:
        return None


def package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        return location
    return None


def literal_assignments(path: str, names: set[str]) -> dict[str, Any]:
    """Module-level `name = 'literal'` (or annotated) values, read without importing."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in names:
            with contextlib.suppress(ValueError):
                found[target.id] = ast.literal_eval(value)
    return found


def triton_pin(name: str) -> str | None:
    """The specifier of `Requires-Dist: triton...` in a distribution's METADATA ('~=3.8.0'):
    torch names the triton it was built against on every platform, Windows included."""
    if _md is None:
        return None
    try:
        requires = _md.distribution(name).requires or []
    except Exception:
        return None
    for line in requires:
        match = re.match(r"\s*triton\s*\(?\s*((?:[<>=!~]=?|===)\s*[\w.*+!-]+)", line)
        if match:
            return match.group(1).replace(" ", "")[:40]
    return None


def header_cxx_standard(pkg: str) -> int | None:
    """The standard ATen.h's guard demands: `__cplusplus < 202002L` ... `#error` -> 20."""
    try:
        with open(os.path.join(pkg, "include", "ATen", "ATen.h"), encoding="utf-8",
                  errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    match = re.search(r"__cplusplus\s*<\s*(\d{4})(\d{2})L\s*\n\s*#\s*error", head)
    if match is None:
        return None
    return {"1997": 98, "2011": 11, "2014": 14, "2017": 17, "2020": 20, "2023": 23}.get(
        match.group(1))


def torch_facts() -> dict[str, Any] | None:
    version = dist_version("torch")
    if version is None:
        return None
    result: dict[str, Any] = {"version": version, "full_version": None, "cuda": None, "hip": None,
                              "triton_pin": triton_pin("torch"), "cxx_standard": None}
    pkg = package_dir("torch")
    if pkg:
        wanted = {"__version__", "cuda", "hip"}
        values = literal_assignments(os.path.join(pkg, "version.py"), wanted)
        for key, dest in (("__version__", "full_version"), ("cuda", "cuda"), ("hip", "hip")):
            if isinstance(values.get(key), str):
                result[dest] = values[key]
        result["cxx_standard"] = header_cxx_standard(pkg)
    return result


COMPILED = ("_fused", "_qattn_sm80", "_qattn_sm89", "_qattn_sm90")


def sage_facts(site_dirs: list[str]) -> dict[str, Any] | None:
    version = dist_version("sageattention")
    leftovers: list[str] = []
    for site in site_dirs:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            if entry.lower().startswith("sageattention-") and entry.lower().endswith(".egg"):
                leftovers.append(os.path.join(site, entry))
        pth = os.path.join(site, "easy-install.pth")
        if os.path.isfile(pth):
            try:
                with open(pth, encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        if "sageattention" in line.lower():
                            leftovers.append(pth + ": " + line.strip())
            except OSError:
                pass
    if version is None:
        return None
    pkg = package_dir("sageattention")
    modules: list[str] = []
    if pkg:
        suffixes = (*tuple(importlib.machinery.EXTENSION_SUFFIXES), ".pyd", ".so")
        try:
            files = os.listdir(pkg)
        except OSError:
            files = []
        for module in COMPILED:
            if any(f.startswith(module + ".") and f.endswith(suffixes) for f in files):
                modules.append(module)
    return {"version": version, "compiled_modules": modules, "package_dir": pkg,
            "leftovers": leftovers}


TYPING_MODULES = ("typing", "typing_extensions")
MAX_ALIAS_DEPTH = 8


class Unreadable(Exception):
    """The setting's choices cannot be read from the source: said, never guessed."""


def typing_names(body: list[ast.stmt]) -> tuple[dict[str, str], set[str], dict[str, ast.expr]]:
    """What the module binds at its top level: local names of typing's special forms
    ({"L": "Literal"}), names of the typing modules themselves ({"t"}), and type aliases
    (`X = Literal[...]`, `X: TypeAlias = ...`, `type X = ...`)."""
    forms: dict[str, str] = {}
    modules: set[str] = set()
    aliases: dict[str, ast.expr] = {}
    type_alias = getattr(ast, "TypeAlias", None)  # the `type X = ...` statement, 3.12+
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module in TYPING_MODULES:
            for alias in node.names:
                forms[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in TYPING_MODULES:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            aliases[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            aliases[node.target.id] = node.value
        elif type_alias is not None and isinstance(node, type_alias):
            aliases[node.name.id] = node.value
    return forms, modules, aliases


def _form(node: ast.expr, forms: dict[str, str], modules: set[str]) -> str | None:
    """Which typing form a subscripted name is: `Literal`, `L` (imported as), `t.Literal`."""
    if isinstance(node, ast.Name):
        return forms.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id in modules:
        return node.attr
    return None


def _elements(node: ast.Subscript) -> list[ast.expr]:
    inner = node.slice
    inner = getattr(inner, "value", inner) if type(inner).__name__ == "Index" else inner  # 3.8
    return list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]


def _shown(node: ast.expr) -> str:
    unparse = getattr(ast, "unparse", None)
    return unparse(node)[:80] if unparse else type(node).__name__


def literal_choices(node: ast.expr, names: tuple[dict[str, str], set[str], dict[str, ast.expr]],
                    depth: int = 0) -> list[str]:
    """The string values an annotation allows, through aliases, `Annotated[...]` (its first
    argument), `Optional`/`Union`/`|`, and Literal under any import name."""
    forms, modules, aliases = names
    if depth > MAX_ALIAS_DEPTH:
        raise Unreadable("its type aliases nest more than %d deep" % MAX_ALIAS_DEPTH)
    if isinstance(node, ast.Constant):
        if node.value is None:
            return []
        if isinstance(node.value, str):  # a string annotation: the type written as text
            try:
                parsed = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                raise Unreadable("its type is the string %r" % node.value[:80]) from None
            return literal_choices(parsed, names, depth + 1)
    if isinstance(node, ast.Name) and node.id in aliases:
        return literal_choices(aliases[node.id], names, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return (literal_choices(node.left, names, depth + 1)
                + literal_choices(node.right, names, depth + 1))
    if isinstance(node, ast.Subscript):
        form = _form(node.value, forms, modules)
        parts = _elements(node)
        if form == "Literal":
            out: list[str] = []
            for part in parts:
                if isinstance(part, ast.Constant):
                    if isinstance(part.value, str):
                        out.append(part.value)
                else:  # Literal[Literal[...]], or an enum member: follow or refuse
                    out += literal_choices(part, names, depth + 1)
            return out
        if form == "Annotated" and parts:
            return literal_choices(parts[0], names, depth + 1)
        if form in ("Union", "Optional"):
            return [c for part in parts for c in literal_choices(part, names, depth + 1)]
    raise Unreadable("its type `%s` names no fixed choices this check can read" % _shown(node))


def invokeai_facts() -> dict[str, Any] | None:
    version = dist_version("invokeai")
    if version is None:
        return None
    supported: bool | None = None
    choices: list[str] = []
    unread: str | None = None
    pkg = package_dir("invokeai")
    config = os.path.join(pkg, "app", "services", "config", "config_default.py") if pkg else None
    tree = None
    if config and os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
        except (OSError, SyntaxError, ValueError, RecursionError):
            tree = None
    if tree is not None:
        names = typing_names(tree.body)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "InvokeAIAppConfig":
                supported = False
                for item in node.body:
                    if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                            and item.target.id == "attention_backend"):
                        supported = True
                        try:
                            found = literal_choices(item.annotation, names)
                        except Unreadable as exc:
                            unread, found = str(exc), []
                        except RecursionError:
                            unread, found = "its type nests too deeply to read", []
                        choices = list(dict.fromkeys(found))
    return {"version": version, "attention_backend_supported": supported,
            "attention_backend_choices": choices, "attention_backend_unread": unread}


def pip_importable() -> bool:
    """Whether `python -m pip` would start: found on the path, not imported (uv and launcher
    venvs have none, and a stale pip dist-info can outlive its package)."""
    try:
        return importlib.util.find_spec("pip") is not None
    except Exception:
        return False


def wheel_tags(fallback_dir: str) -> list[str]:
    tags_module: ModuleType | None = None
    try:
        from packaging import tags as tags_module
    except Exception:
        try:
            from pip._vendor.packaging import tags as tags_module
        except Exception:
            if fallback_dir:
                # sagedoctor's own packaging, last on the path and removed again at once, so
                # the rest of its environment never shows up as the target's.
                sys.path.append(fallback_dir)
                try:
                    from packaging import tags as tags_module
                except Exception:
                    tags_module = None
                finally:
                    sys.path.remove(fallback_dir)
    if tags_module is None:
        return []
    return [str(t) for t in tags_module.sys_tags()]


def main() -> None:
    paths = sysconfig.get_paths()
    site_dirs: list[str] = []
    for key in ("purelib", "platlib"):
        if paths.get(key) and paths[key] not in site_dirs:
            site_dirs.append(paths[key])
    include = paths.get("include", "")
    libs_dir = None
    has_lib = None
    if os.name == "nt":
        libs_dir = os.path.join(sys.base_prefix, "libs")
        lib_name = "python%d%d.lib" % sys.version_info[:2]
        has_lib = os.path.isfile(os.path.join(libs_dir, lib_name))
    purelib = paths.get("purelib", "")
    report: dict[str, Any] = {
        "executable": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "implementation": sys.implementation.name,
        "is_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "site_packages": purelib,
        "site_packages_writable": bool(purelib) and os.access(purelib, os.W_OK),
        "include_dir": include,
        "has_python_h": os.path.isfile(os.path.join(include, "Python.h")),
        "libs_dir": libs_dir,
        "has_python_lib": has_lib,
        "torch": torch_facts(),
        "triton": dist_version("triton"),
        "triton_windows": dist_version("triton-windows"),
        "sageattention": sage_facts(site_dirs),
        "invokeai": invokeai_facts(),
        "pip": dist_version("pip"),
        "pip_importable": pip_importable(),
        "uv": dist_version("uv"),
        "runtime": dist_version("sagedoctor-runtime"),
    }
    # Last: the fallback import of packaging must not run before the distributions are read.
    report["tags"] = wheel_tags(sys.argv[1] if len(sys.argv) > 1 else "")
    answer(report)


def answer(data: dict[str, Any]) -> None:
    """target_answer.ANSWER_FUNCTION: the frame, written to fd 1 itself."""
    token = os.environ.get("SAGEDOCTOR_ANSWER_TOKEN", "")
    payload = (token + json.dumps(data) + token + "\n").encode("utf-8")
    while payload:
        payload = payload[os.write(1, payload):]


main()
