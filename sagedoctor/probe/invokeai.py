"""InvokeAI: where its root is (InvokeAI's own order), and what its invokeai.yaml says."""

from __future__ import annotations

import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..facts import InvokeAIFacts
from .target import venv_python

MAX_CONFIG_BYTES = 1_000_000


@dataclass(frozen=True)
class RootChoice:
    root: Path | None
    source: str


def choose_root(
    explicit_root: Path | None,
    env: Mapping[str, str],
    venv: Path | None,
    home: Path,
) -> RootChoice:
    """--root, then INVOKEAI_ROOT, then the venv's parent, then ~/invokeai: as InvokeAI does.

    The first two are taken as given; the last two only where InvokeAI is really there (an
    ``invokeai.yaml``, or a ``.venv`` holding the invokeai package), so the parent of any other
    venv (ComfyUI's, a project's) is not called an InvokeAI root.
    """
    if explicit_root is not None:
        return RootChoice(explicit_root, "--root")
    if env.get("INVOKEAI_ROOT"):
        return RootChoice(Path(env["INVOKEAI_ROOT"]), "INVOKEAI_ROOT")
    active = venv or (Path(env["VIRTUAL_ENV"]) if env.get("VIRTUAL_ENV") else None)
    if active is not None and _looks_like_root(active.parent):
        return RootChoice(active.parent, "venv-parent")
    default = home / "invokeai"
    if _looks_like_root(default):
        return RootChoice(default, "home")
    return RootChoice(None, "none")


def _looks_like_root(path: Path) -> bool:
    # InvokeAI's own marks: its config, its launcher's markers, or its package in .venv.
    return ((path / "invokeai.yaml").is_file() or (path / FIRST_RUN_MARKER).is_file()
            or (path / BOOTSTRAP_DIR).is_dir() or venv_has_invokeai(path / ".venv"))


def venv_has_invokeai(venv: Path) -> bool:
    """An invokeai dist-info in the venv's site-packages (POSIX lib/pythonX.Y or Windows Lib):
    a few directory reads, no interpreter started."""
    if not venv.is_dir():
        return False
    try:
        sites = [*venv.glob("lib/python3*/site-packages"), venv / "Lib" / "site-packages"]
        return any(next(site.glob("invokeai-*.dist-info"), None) is not None
                   for site in sites if site.is_dir())
    except OSError:
        return False


FIRST_RUN_MARKER = ".first_run"
BOOTSTRAP_DIR = ".launcher-bootstrap"


def _mtime_utc(*paths: Path) -> str | None:
    """The newest modification time of these paths as UTC ISO 8601; None where none exists."""
    import datetime

    times = []
    for path in paths:
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    if not times:
        return None
    return datetime.datetime.fromtimestamp(max(times), datetime.timezone.utc).isoformat()


def launcher_markers(root: Path) -> tuple[str | None, str | None]:
    """(when `.first_run` was written, when `.launcher-bootstrap/` last changed)."""
    boot = root / BOOTSTRAP_DIR
    bootstrap = _mtime_utc(boot, boot / "pyproject.toml", boot / "uv.lock") \
        if boot.is_dir() else None
    return _mtime_utc(root / FIRST_RUN_MARKER), bootstrap


def locate_invokeai(choice: RootChoice, os_name: str) -> InvokeAIFacts:
    """Cheap filesystem facts about the chosen root; the config is read by read_config."""
    if choice.root is None:
        return InvokeAIFacts(None, "none", False, None, None, False)
    root = choice.root
    python = Path(venv_python(root / ".venv", os_name))
    config = root / "invokeai.yaml"
    first_run, bootstrap = launcher_markers(root)
    return InvokeAIFacts(
        root=str(root),
        root_source=choice.source,
        installed=python.exists(),
        venv=str(root / ".venv") if python.exists() else None,
        config_path=str(config),
        config_exists=config.exists() or config.is_symlink(),  # a folder or FIFO is said
        first_run_at=first_run,
        bootstrap_changed_at=bootstrap,
        marked=_looks_like_root(root),
    )


def read_config(facts: InvokeAIFacts) -> InvokeAIFacts:
    """Parse invokeai.yaml (hostile input: size-capped, safe_load, every value type-checked)."""
    if not facts.config_exists or facts.config_path is None:
        return facts
    path = Path(facts.config_path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            # A FIFO would block the read; a folder cannot be InvokeAI's config.
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            return replace(facts, config_error=f"{path} is {kind}; InvokeAI cannot read it")
        if info.st_size > MAX_CONFIG_BYTES:
            return replace(facts, config_error=f"{path} is larger than 1 MB; not read")
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)  # it may grow between stat and read
    except OSError as exc:
        return replace(facts, config_error=f"cannot read {path}: {exc.strerror or exc}")
    return parse_config(facts, raw)


class _DuplicateKey(Exception):
    pass


def _strict_loader() -> type:
    """yaml.SafeLoader that refuses a key given twice in one mapping."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode,
                              deep: bool = False) -> dict[object, object]:
            seen: set[object] = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class refuses it
                    break
                if duplicate:
                    raise _DuplicateKey(f"duplicate key {str(key)[:60]!r} (line "
                                        f"{key_node.start_mark.line + 1})")
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def parse_config(facts: InvokeAIFacts, raw: bytes) -> InvokeAIFacts:
    """The settings sagedoctor reads from invokeai.yaml's bytes; a problem is config_error."""
    path = facts.config_path
    if len(raw) > MAX_CONFIG_BYTES:
        return replace(facts, config_error=f"{path} is larger than 1 MB; not read")
    import yaml  # only here: most runs have no invokeai.yaml to read

    # InvokeAI reads it in the locale's encoding; UTF-8 covers what it writes on every OS
    # we meet, and undecodable bytes must not stop the check.
    text = raw.decode("utf-8-sig", errors="replace")
    try:
        data = yaml.load(text, Loader=_strict_loader())  # a SafeLoader subclass
    except _DuplicateKey as exc:
        # PyYAML keeps the last value; the install's round-trip editor (ruamel) refuses the
        # file: said by check, so the plan's edit step is blocked before any download.
        return replace(facts, config_error=f"{path} is not valid YAML for the edit: {exc}")
    except yaml.YAMLError as exc:
        first = (str(exc).strip().splitlines() or ["a syntax error"])[0]
        return replace(facts, config_error=f"{path} is not valid YAML: {first}")
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # PyYAML's constructors raise these for values such as a date with month 13.
        why = "nested too deeply" if isinstance(exc, RecursionError) else f"{exc}"[:120]
        return replace(facts, config_error=f"{path} is not valid YAML: {why}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return replace(facts, config_error=f"{path} must hold a mapping at the top level")

    def text_value(key: str) -> str | None:
        value = data.get(key)
        return str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) \
            else None

    return replace(
        facts,
        schema_version=text_value("schema_version"),
        attention_type=text_value("attention_type"),
        attention_backend=text_value("attention_backend"),
    )
