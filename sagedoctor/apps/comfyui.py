"""ComfyUI: its three layouts (the Windows portable build, ComfyUI Desktop, a git clone with a
venv), the Python each runs, its version, and its own switch, `--use-sage-attention`.

Read-only, a few stat() calls and small file reads. Every file read here is hostile input:
size-capped, decoded with replacement, parsed without executing anything.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from ..facts import ComfyUIFacts

SAGE_FLAG = "--use-sage-attention"
# Comfy Kitchen's INT8 attention: mutually exclusive with SAGE_FLAG in ComfyUI's arguments.
CK_FLAG = "--use-ck-attention"
PORTABLE_PYTHON = "python_embeded"  # sic: the portable build spells it so
DESKTOP_SETTINGS = ("user", "default", "comfy.settings.json")
DESKTOP_LAUNCH_ARGS = "Comfy.Server.LaunchArgs"
CLONE_VENVS = ("venv", ".venv")
MAX_READ_BYTES = 512 * 1024
# What `enable --comfyui DIR --launch-flag` writes beside run_nvidia_gpu.bat (never over it).
FLAG_LAUNCHER = "run_nvidia_gpu_sageattention.bat"


def read_small(path: Path) -> str | None:
    """A small text file's start, or None where it is absent or unreadable."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as handle:
            return handle.read(MAX_READ_BYTES).decode("utf-8-sig", errors="replace")
    except OSError:
        return None


def read_bytes_as_text(path: Path) -> str | None:
    """A small file's bytes as latin-1 text: every byte kept, so a launcher in the user's
    code page (cp1252, cp932) is written back byte for byte around what is added."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as handle:
            return handle.read(MAX_READ_BYTES).decode("latin-1")
    except OSError:
        return None


def interpreter_in(folder: Path, os_name: str) -> Path:
    """The python executable of an embedded folder (python.exe on Windows)."""
    if os_name == "windows":
        return folder / "python.exe"
    for name in ("python", "python3"):
        if (folder / name).exists():
            return folder / name
    return folder / "python"


def venv_interpreter(venv: Path, os_name: str) -> Path:
    return venv / "Scripts" / "python.exe" if os_name == "windows" else venv / "bin" / "python"


# --- an embedded Python's ._pth ------------------------------------------------------------

def pth_file_for(executable: Path) -> Path | None:
    """The ._pth file that governs this interpreter's sys.path, if any.

    CPython tries the library's first, then the executable's: python312._pth beside
    python312.dll (the embeddable zip's), then python._pth beside python.exe (or a POSIX
    `python`)."""
    folder = executable.parent
    stem = executable.name[:-4] if executable.name.lower().endswith(".exe") else executable.name
    try:
        candidates = sorted(folder.glob("python3*._pth"))
    except OSError:
        return None
    candidates.append(folder / f"{stem}._pth")
    return next((c for c in candidates if c.is_file()), None)


def pth_imports_site(text: str) -> bool:
    """Whether a ._pth file switches `site` on (an `import site` line, not commented out).

    Without it Python never imports site, so no .pth file in site-packages ever runs."""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("import") and line.split()[1:2] == ["site"]:
            return True
    return False


def pth_paths(text: str) -> tuple[str, ...]:
    """The folders a ._pth file puts on sys.path (its lines but comments and imports)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "import ", "import\t")):
            out.append(line[:500])
    return tuple(out[:100])


# --- the launch flag -----------------------------------------------------------------------

def bat_sets_sage_flag(text: str, flag: str = SAGE_FLAG) -> bool:
    """A .bat file passes --use-sage-attention (or ``flag``) on a line that runs (not REM,
    not ::)."""
    for raw in text.splitlines():
        line = raw.strip()
        lowered = line.lower()
        if not line or lowered.startswith(("rem ", "rem\t", "::")) or lowered == "rem":
            continue
        if flag in line.split():
            return True
    return False


def sh_sets_sage_flag(text: str, flag: str = SAGE_FLAG) -> bool:
    """A shell script passes --use-sage-attention (or ``flag``) on a line that is no
    comment."""
    return any(flag in line.split() for line in text.splitlines()
               if not line.strip().startswith("#"))


def _launchers(folder: Path) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(the .bat and .sh files in folder, those passing --use-sage-attention, those passing
    --use-ck-attention)."""
    try:
        scripts = sorted(p for p in folder.iterdir()
                         if p.suffix.lower() in (".bat", ".sh") and p.is_file())
    except OSError:
        return (), (), ()
    names: list[str] = []
    flagged: list[str] = []
    ck: list[str] = []
    for script in scripts[:50]:
        text = read_small(script)
        if text is None:
            continue
        names.append(script.name)
        sets = sh_sets_sage_flag if script.suffix.lower() == ".sh" else bat_sets_sage_flag
        if sets(text):
            flagged.append(script.name)
        if sets(text, CK_FLAG):
            ck.append(script.name)
    return tuple(names), tuple(flagged), tuple(ck)


def desktop_sets_sage_flag(text: str, flag: str = SAGE_FLAG) -> bool | None:
    """Desktop's comfy.settings.json: `Comfy.Server.LaunchArgs` holds `use-sage-attention`.
    None where the file is not the settings object it should be."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    args = data.get(DESKTOP_LAUNCH_ARGS, {})
    if not isinstance(args, dict):
        return None
    return any(isinstance(k, str) and k.lstrip("-") == flag[2:] for k in args)


def with_sage_flag(bat: str) -> str:
    """run_nvidia_gpu.bat's text with --use-sage-attention added to the line starting
    ComfyUI (the one naming main.py); unchanged where no such line is found."""
    lines = bat.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if "main.py" in line and SAGE_FLAG not in line.split():
            body = line.rstrip("\r\n")
            lines[i] = f"{body} {SAGE_FLAG}{line[len(body):]}"
            return "".join(lines)
    return bat


# --- version and flag support --------------------------------------------------------------

def _literal_version(text: str) -> str | None:
    import ast  # only where a comfyui_version.py is read (a few ms of import otherwise)

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "__version__"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value[:40]
    return None


def _pyproject_version(text: str) -> str | None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]
    try:
        data = tomllib.loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        return None
    project = data.get("project")
    version = project.get("version") if isinstance(project, dict) else None
    return version[:40] if isinstance(version, str) else None


def code_version(code_dir: Path) -> tuple[str | None, str | None]:
    """(version, where it was read): comfyui_version.py, else pyproject.toml; a value with
    characters no version has (controls, escapes) counts as none."""
    text = read_small(code_dir / "comfyui_version.py")
    version = _literal_version(text) if text is not None else None
    if version is not None and version.isprintable():
        return version, "comfyui_version.py"
    text = read_small(code_dir / "pyproject.toml")
    version = _pyproject_version(text) if text is not None else None
    if version is not None and version.isprintable():
        return version, "pyproject.toml"
    return None, None


def sage_flag_supported(code_dir: Path) -> bool | None:
    """Whether this ComfyUI's comfy/cli_args.py declares --use-sage-attention (an older one
    stops at start with 'unrecognized arguments'); None where the file cannot be read."""
    text = read_small(code_dir / "comfy" / "cli_args.py")
    if text is None:
        return None
    return f'"{SAGE_FLAG}"' in text or f"'{SAGE_FLAG}'" in text


def is_code_dir(folder: Path) -> bool:
    return (folder / "main.py").is_file() and (folder / "comfy").is_dir()


# --- the three layouts ---------------------------------------------------------------------

def desktop_config_files(os_name: str, env: Mapping[str, str], home: Path) -> list[Path]:
    """Where ComfyUI Desktop (Electron, productName ComfyUI) keeps config.json."""
    if os_name == "windows":
        return [Path(env["APPDATA"]) / "ComfyUI" / "config.json"] if env.get("APPDATA") else []
    if os_name == "darwin":
        return [home / "Library" / "Application Support" / "ComfyUI" / "config.json"]
    config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return [config / "ComfyUI" / "config.json"]


def desktop_code_dirs(os_name: str, env: Mapping[str, str]) -> list[Path]:
    """Where Desktop keeps ComfyUI's own code (its app resources), newest installer first."""
    if os_name == "windows" and env.get("LOCALAPPDATA"):
        return [Path(env["LOCALAPPDATA"]) / "Programs" / "@comfyorgcomfyui-electron"
                / "resources" / "ComfyUI"]
    if os_name == "darwin":
        return [Path("/Applications/ComfyUI.app/Contents/Resources/ComfyUI")]
    return []


def desktop_base_path(os_name: str, env: Mapping[str, str], home: Path) -> Path | None:
    """Desktop's base path (its .venv, models and user settings) from its config.json."""
    for config in desktop_config_files(os_name, env, home):
        text = read_small(config)
        if text is None:
            continue
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            continue
        base = data.get("basePath") if isinstance(data, dict) else None
        if isinstance(base, str) and base:
            return Path(base)
    return None


def _portable_root(folder: Path) -> Path | None:
    """The portable build's top folder, given it, its python_embeded or its ComfyUI."""
    for candidate in (folder, folder.parent):
        if (candidate / PORTABLE_PYTHON).is_dir():
            return candidate
    return None


def _portable(root: Path, source: str, os_name: str) -> ComfyUIFacts:
    embedded = root / PORTABLE_PYTHON
    python = interpreter_in(embedded, os_name)
    code = root / "ComfyUI"
    pth = pth_file_for(python)
    pth_text = read_small(pth) if pth is not None else None
    launchers, flagged, ck = _launchers(root)
    version, where = code_version(code) if code.is_dir() else (None, None)
    problem = None
    if not python.is_file():
        problem = f"{embedded} has no {python.name}"
    elif pth is None:
        problem = f"{embedded} has no ._pth file: not the embedded Python the build ships"
    return ComfyUIFacts(
        layout="portable", root=str(root), source=source,
        python=str(python) if python.is_file() else None,
        code_dir=str(code) if code.is_dir() else None, version=version, version_source=where,
        sage_flag_supported=sage_flag_supported(code) if code.is_dir() else None,
        sage_flag_in=flagged, ck_flag_in=ck, launchers=launchers,
        pth_file=str(pth) if pth is not None else None,
        pth_imports_site=pth_imports_site(pth_text) if pth_text is not None else None,
        pth_paths=pth_paths(pth_text) if pth_text is not None else (), problem=problem)


def _clone(root: Path, source: str, os_name: str, python: Path | None) -> ComfyUIFacts:
    if python is None:
        venvs = [root / name for name in CLONE_VENVS]
        found = [venv_interpreter(v, os_name) for v in venvs
                 if venv_interpreter(v, os_name).is_file()]
        python = found[0] if found else None
    version, where = code_version(root)
    problem = None if python is not None else (
        f"no venv in {root} (looked for venv and .venv): pass the Python that starts ComfyUI "
        "with --python EXE")
    launchers, flagged, ck = _launchers(root)  # a start script of the user's own, if any
    return ComfyUIFacts(
        layout="clone", root=str(root), source=source,
        python=str(python) if python is not None else None, code_dir=str(root),
        version=version, version_source=where, sage_flag_supported=sage_flag_supported(root),
        sage_flag_in=flagged, ck_flag_in=ck, launchers=launchers, problem=problem)


def _desktop(base: Path, source: str, os_name: str, env: Mapping[str, str]) -> ComfyUIFacts:
    python = venv_interpreter(base / ".venv", os_name)
    settings = read_small(base.joinpath(*DESKTOP_SETTINGS))
    flagged = ("comfy.settings.json",) if settings and desktop_sets_sage_flag(settings) else ()
    ck = ("comfy.settings.json",) if settings and desktop_sets_sage_flag(settings, CK_FLAG) \
        else ()
    code = next((d for d in desktop_code_dirs(os_name, env) if is_code_dir(d)), None)
    version, where = code_version(code) if code is not None else (None, None)
    return ComfyUIFacts(
        layout="desktop", root=str(base), source=source,
        python=str(python) if python.is_file() else None,
        code_dir=str(code) if code is not None else None, version=version,
        version_source=where,
        sage_flag_supported=sage_flag_supported(code) if code is not None else None,
        sage_flag_in=flagged, ck_flag_in=ck,
        problem=None if python.is_file() else f"{base} has no .venv with a Python yet "
        "(Desktop creates it at its first start)")


def _is_desktop_base(folder: Path) -> bool:
    return (folder / ".venv").is_dir() and (
        folder.joinpath(*DESKTOP_SETTINGS).is_file()
        or ((folder / "models").is_dir() and (folder / "custom_nodes").is_dir()))


def locate_comfyui(folder: Path, source: str, os_name: str, env: Mapping[str, str],
                   python: Path | None = None) -> ComfyUIFacts | None:
    """The ComfyUI install at ``folder`` (any of the three layouts), or None if it is none."""
    portable = _portable_root(folder)
    if portable is not None:
        return _portable(portable, source, os_name)
    if is_code_dir(folder):
        return _clone(folder, source, os_name, python)
    if _is_desktop_base(folder):
        return _desktop(folder, source, os_name, env)
    return None


def find_comfyui(venv: Path | None, python: Path | None, env: Mapping[str, str], home: Path,
                 os_name: str) -> ComfyUIFacts | None:
    """A ComfyUI the user's target belongs to, else the one Desktop's config names."""
    if python is not None:
        if python.parent.name.lower() == PORTABLE_PYTHON:
            return locate_comfyui(python.parent.parent, "--python", os_name, env)
        owner = python.parent.parent.parent  # <clone>/venv/bin/python
        if is_code_dir(owner) or _is_desktop_base(owner):
            return locate_comfyui(owner, "--python", os_name, env, python)
        return None
    active = venv or (Path(env["VIRTUAL_ENV"]) if env.get("VIRTUAL_ENV") else None)
    if active is not None:
        if is_code_dir(active.parent) or _is_desktop_base(active.parent):
            return locate_comfyui(active.parent, "--venv", os_name, env,
                                  venv_interpreter(active, os_name))
        return None
    base = desktop_base_path(os_name, env, home)
    if base is not None and _is_desktop_base(base):
        return _desktop(base, "desktop-config", os_name, env)
    return None


# --- what `enable` says: the two ways to switch SageAttention on in ComfyUI ------------------

def _printable(value: object, limit: int = 40) -> str:
    return "".join(c if c.isprintable() else "?" for c in str(value))[:limit]


def sageattn_table(results: Mapping[str, object]) -> str:
    """verify's record of `sageattn()` itself (what the flag calls), a row per GPU, dtype and
    head size; the record is a file on disk, so every value is checked and made printable."""
    gpus = results.get("gpus")
    rows = [("GPU", "dtype", "head", "sageattn() kernel", "result")]
    if isinstance(gpus, Mapping):
        for entry in gpus.values():
            if not isinstance(entry, Mapping) or not isinstance(entry.get("sageattn_auto"),
                                                                Mapping):
                continue
            gpu = f"{_printable(entry.get('name', '?'))} sm" + _printable(
                entry.get("arch", "?")).replace(".", "")
            for key, value in sorted(entry["sageattn_auto"].items()):
                dtype, _, head = str(key).partition("|")
                passed = value.get("passed") if isinstance(value, Mapping) else None
                kernel = value.get("kernel") if isinstance(value, Mapping) else None
                rows.append((gpu, _printable(dtype), _printable(head),
                             _printable(kernel) if isinstance(kernel, str) else "-",
                             "correct" if passed is True else "WRONG" if passed is False
                             else "not run"))
    if len(rows) == 1:
        return "  (no sageattn() results recorded)\n"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                   .rstrip() + "\n" for row in rows)


def comfyui_ways(comfy: ComfyUIFacts, hook_on: bool, table: str) -> str:
    """Which switch this ComfyUI has on, and what each costs, with verify's table."""
    flag_state = (f"on in {', '.join(comfy.sage_flag_in)}" if comfy.sage_flag_in
                  else "not seen in its launchers" if comfy.layout != "clone" or comfy.launchers
                  else "not visible (a clone is started by hand)")
    lines = [
        "ComfyUI has two ways to use SageAttention; use one:",
        f"  the start-up hook ({'on' if hook_on else 'off'}): ComfyUI keeps calling PyTorch's "
        "SDPA and the runtime sends a call to SageAttention only for the GPU, dtype and head "
        "size verify proved correct and faster; everything else stays on SDPA. Cost: a "
        "first-call check of each kernel at each start; torch, triton and SageAttention must "
        "stay as verified, or it stays off.",
        f"  {SAGE_FLAG} ({flag_state}): ComfyUI calls sageattn() itself for every attention "
        "call, whatever verify found; no check and no fallback, so a wrong kernel gives "
        "garbage images and a slower one costs time. With the flag on, the hook sees no SDPA "
        "call and routes nothing.",
    ]
    if hook_on and comfy.sage_flag_in:
        lines.append(f"  Both are on: the flag wins, and the hook stands aside in a ComfyUI "
                     f"started with it (one router at a time). Remove {SAGE_FLAG} from "
                     f"{', '.join(comfy.sage_flag_in)} to let the hook decide.")
    return "\n".join(lines) + "\n" + table
