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


def invokeai_facts() -> dict[str, Any] | None:
    version = dist_version("invokeai")
    if version is None:
        return None
    supported: bool | None = None
    choices: list[str] = []
    pkg = package_dir("invokeai")
    config = os.path.join(pkg, "app", "services", "config", "config_default.py") if pkg else None
    tree = None
    if config and os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
        except (OSError, SyntaxError, ValueError):
            tree = None
    if tree is not None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "InvokeAIAppConfig":
                supported = False
                for item in node.body:
                    if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                            and item.target.id == "attention_backend"):
                        supported = True
                        for sub in ast.walk(item.annotation):
                            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                                choices.append(sub.value)
    return {"version": version, "attention_backend_supported": supported,
            "attention_backend_choices": choices}


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
