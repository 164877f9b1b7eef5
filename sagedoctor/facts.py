"""Everything true about one machine and one target environment, as frozen data.

Facts serialise to JSON (``check --json``) and load back strictly (``--facts FILE``), so a
user's report from Windows can be diagnosed here. Loading treats the file as hostile: every
field is type-checked, unknown keys are rejected.
"""

from __future__ import annotations

import dataclasses
import json
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union

from .errors import FactsFileError

FACTS_SCHEMA_VERSION = 2
# Version 1 lacks what version 2 added (torch's triton pin and C++ standard); it still loads.
READABLE_SCHEMA_VERSIONS = (1, 2)


@dataclass(frozen=True)
class SystemFacts:
    os: str  # "linux" | "windows" | "darwin" | other lower-case platform.system()
    os_release: str  # kernel release on Linux, "10"/"11" on Windows
    os_version: str  # full version string, e.g. "10.0.22631"
    windows_build: int | None  # 22631 for Windows 11 23H2; None elsewhere
    machine: str  # normalised: "x86_64" | "arm64" | raw value
    wsl: bool
    cpu_count: int
    memory_gib: float | None
    # DIFFUSERS_ATTN_BACKEND in the environment check ran in (diffusers' own switch; an app
    # started from the same shell inherits it); absent from older reports.
    diffusers_attn_backend: str | None = None


@dataclass(frozen=True)
class Gpu:
    index: int
    vendor: str  # "nvidia" | "amd" | "intel" | "apple"
    name: str
    compute_capability: str | None  # "9.0"; None when unknown
    memory_mib: int | None
    cc_source: str = "driver"  # "driver" | "name-table" | "unknown"


@dataclass(frozen=True)
class GpuFacts:
    gpus: tuple[Gpu, ...]
    driver_version: str | None
    source: str  # "nvml" | "nvidia-smi" | "proc" | "none"
    notes: tuple[str, ...] = ()

    @property
    def nvidia(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.vendor == "nvidia")


@dataclass(frozen=True)
class TorchFacts:
    version: str  # dist version, e.g. "2.11.0" (may lack the local tag)
    full_version: str | None  # torch/version.py __version__, e.g. "2.11.0+cu130"
    cuda: str | None  # "13.0"; None on CPU and ROCm builds
    hip: str | None
    # v2: torch's METADATA `Requires-Dist: triton...` specifier ("~=3.8.0"), on every platform
    triton_pin: str | None = None
    cxx_standard: int | None = None  # v2: the C++ standard ATen.h's #error guard demands


@dataclass(frozen=True)
class SageFacts:
    version: str  # e.g. "2.2.0+cu130torch2.10.0andhigher.post6"
    compiled_modules: tuple[str, ...]  # "_fused", "_qattn_sm80", ...
    package_dir: str | None
    leftovers: tuple[str, ...] = ()  # stale *.egg dirs or easy-install.pth lines


@dataclass(frozen=True)
class InvokeAIPackageFacts:
    version: str
    attention_backend_supported: bool | None  # None: config class not found
    attention_backend_choices: tuple[str, ...] = ()
    # Why the choices could not be read from its source (an enum, a type from another
    # module): the plan then writes nothing, and check says so (SD189).
    attention_backend_unread: str | None = None


@dataclass(frozen=True)
class TargetFacts:
    executable: str
    python_version: str  # "3.12.3"
    implementation: str  # "cpython"
    tags: tuple[str, ...]  # supported wheel tags, most preferred first
    is_venv: bool
    prefix: str
    base_prefix: str
    site_packages: str
    site_packages_writable: bool
    include_dir: str
    has_python_h: bool
    libs_dir: str | None  # Windows: <base>/libs
    has_python_lib: bool | None  # Windows: libs/python3XX.lib exists; None elsewhere
    torch: TorchFacts | None
    triton: str | None
    triton_windows: str | None
    sageattention: SageFacts | None
    invokeai: InvokeAIPackageFacts | None
    pip: str | None
    uv: str | None
    runtime: str | None = None  # the bundled sagedoctor-runtime distribution's version
    # `python -m pip` works in the target; None in facts files written before it was probed.
    pip_importable: bool | None = None


@dataclass(frozen=True)
class ToolchainFacts:
    cuda_home: str | None
    nvcc_path: str | None
    nvcc_version: str | None  # "13.0.88"
    gcc_version: str | None
    ninja_version: str | None
    # CUDA_HOME candidates passed over, each "PATH (from SOURCE): why"; cuda_home is the first
    # candidate with bin/nvcc and include/cuda_runtime.h, or None.
    cuda_home_rejected: tuple[str, ...] = ()


@dataclass(frozen=True)
class InvokeAIFacts:
    root: str | None  # the chosen root, whether or not it exists
    root_source: str  # "--root" | "INVOKEAI_ROOT" | "venv-parent" | "home" | "none"
    installed: bool  # root holds an InvokeAI venv
    venv: str | None
    config_path: str | None
    config_exists: bool
    schema_version: str | None = None
    attention_type: str | None = None
    attention_backend: str | None = None
    config_error: str | None = None
    # InvokeAI launcher markers (UTC, ISO 8601): `.first_run` is written by every launcher
    # install or update and removed at the first start; `.launcher-bootstrap/` is rewritten by
    # every update of InvokeAI >= 6.14 (its uv.lock drives `uv sync --inexact --frozen`).
    first_run_at: str | None = None
    bootstrap_changed_at: str | None = None
    # The root holds InvokeAI's own marks (invokeai.yaml, a launcher marker, the invokeai
    # package in .venv); None in reports written before it was probed.
    marked: bool | None = None


@dataclass(frozen=True)
class ComfyUIFacts:
    """A ComfyUI install: which of its three layouts, the Python it runs, its launch flag."""

    layout: str  # "portable" (python_embeded) | "desktop" (the app's .venv) | "clone" (+ venv)
    root: str  # the install's folder: ComfyUI_windows_portable, Desktop's base path, the clone
    source: str  # how it was found: "--comfyui" | "--venv" | "--python" | "desktop-config"
    python: str | None  # the interpreter ComfyUI runs; None where none was found
    code_dir: str | None = None  # the folder holding main.py (Desktop: inside the app)
    version: str | None = None
    version_source: str | None = None  # "comfyui_version.py" | "pyproject.toml"
    sage_flag_supported: bool | None = None  # comfy/cli_args.py declares --use-sage-attention
    # Where --use-sage-attention is switched on: a portable .bat file, Desktop's settings.
    sage_flag_in: tuple[str, ...] = ()
    # Where --use-ck-attention (Comfy Kitchen's attention, exclusive with the above) is on.
    ck_flag_in: tuple[str, ...] = ()
    launchers: tuple[str, ...] = ()  # the portable build's run_*.bat files
    pth_file: str | None = None  # an embedded Python's ._pth (it replaces sys.path)
    pth_imports_site: bool | None = None  # the ._pth has an `import site` line
    pth_paths: tuple[str, ...] = ()  # its path lines as written (relative to its folder)
    problem: str | None = None  # what is missing from the layout, said as found


@dataclass(frozen=True)
class ProbeFailure:
    area: str
    message: str

    def detail_and_fix(self) -> tuple[str, str | None]:
        """The message without the fix it carries, and that fix (a probe's SagedoctorError is
        recorded as `message (fix: ...)`); None where it carries none."""
        detail, has_fix, fix = self.message.rpartition(" (fix: ")
        if has_fix and fix.endswith(")") and fix[:-1]:
            return detail, fix[:-1]
        return self.message, None


@dataclass(frozen=True)
class AppShapeSpeed:
    """What verify stored for one app shape on one GPU (calibration.json): the kernel it
    measured there against SDPA, and whether the router sends that shape to it."""

    gpu: str  # the GPU's UUID ("GPU-...") or name|arch|index
    name: str
    arch: str
    shape: str  # "SDXL 1024x1024", as verify names it
    head_dim: int
    tokens: int
    kernel: str
    speedup: float  # kernel time / SDPA time, inverted: above 1 is faster
    route: bool


@dataclass(frozen=True)
class WrongKernel:
    """A GPU on which `sagedoctor verify` found `sageattn()` itself returning wrong output."""

    gpu: str  # the GPU's UUID ("GPU-...") or name|arch|index
    name: str
    arch: str
    kernel: str | None  # what `sageattn()` dispatched to, e.g. "sage_fp8_sm90"


# How a change begins where pyvenv.cfg names another Python than the one verify ran, which is
# still the venv's (state.changes_since): another verify would not help, fixing pyvenv.cfg does.
PYVENV_CFG_SAYS = "pyvenv.cfg says"


@dataclass(frozen=True)
class VerificationFacts:
    """What the last `sagedoctor verify` of this venv recorded (the state store)."""

    status: str  # "verified", "unverified" (no record) or "corrupt" (a record that won't parse)
    verdict: str | None = None  # "routing", "sdpa-only" or "broken"
    verified_at: str | None = None
    sageattention: str | None = None  # the versions the verify ran with
    torch: str | None = None
    wrong_sageattn: tuple[WrongKernel, ...] = ()
    # Distributions whose installed files changed since (their dist-info's RECORD, by stat):
    # another build under the same version number, as a by-hand reinstall leaves it.
    changed: tuple[str, ...] = ()
    # The start-up hook (`sagedoctor enable`) is in the venv: a stale record then means the
    # runtime keeps SageAttention off, which is a problem to fix, not a note.
    hooked: bool = False
    # A passing record whose venv copy (what the hook arms from) is missing, unreadable or of
    # another verify: the hook keeps SageAttention off whatever the user-state copy says.
    arming_problem: str | None = None
    # verify's measurements at the apps' shapes (SDXL, FLUX...): what an app's fixed rule
    # would meet here. Absent from older reports.
    app_shapes: tuple[AppShapeSpeed, ...] = ()
    # Something at the start-up hook's path that is no file (a folder, a FIFO): no Python of
    # the venv reads it, so the hook is off though `enable` ran; `disable` removes it.
    hook_problem: str | None = None


@dataclass(frozen=True)
class InterruptedInstall:
    """A journal a killed `sagedoctor install` left for the target venv (SD199)."""

    journal: str  # the journal file, in the user's state folder
    pid: int | None = None  # the install's process, where the journal says
    phase: str | None = None  # "preparing" (nothing changed yet) or "changing"
    running: bool = False  # that process still runs: an install under way, not a dead one


@dataclass(frozen=True)
class Facts:
    system: SystemFacts | None
    gpu: GpuFacts | None
    target: TargetFacts | None
    toolchain: ToolchainFacts | None
    invokeai: InvokeAIFacts | None
    probe_failures: tuple[ProbeFailure, ...] = ()
    sagedoctor_version: str = ""
    schema_version: int = FACTS_SCHEMA_VERSION
    # Areas this run looked at; a check of one area leaves the others None on purpose.
    areas: tuple[str, ...] = field(default_factory=tuple)
    verification: VerificationFacts | None = None
    comfyui: ComfyUIFacts | None = None  # absent from reports written before it was probed
    # A pending install journal for the target venv; absent from older reports.
    interrupted_install: InterruptedInstall | None = None

    def failure_for(self, area: str) -> ProbeFailure | None:
        return next((f for f in self.probe_failures if f.area == area), None)


# --- JSON form -----------------------------------------------------------------------------

def facts_to_dict(facts: Facts) -> dict[str, Any]:
    return _to_jsonable(facts)  # type: ignore[no-any-return]


def _to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_jsonable(v) for v in value]
    return value


T = TypeVar("T")


def facts_from_dict(data: object, source: str = "<facts>") -> Facts:
    """Build Facts from parsed JSON, rejecting anything that does not fit the schema."""
    if not isinstance(data, dict):
        raise FactsFileError(source, "the top level must be a JSON object")
    version = data.get("schema_version")
    if isinstance(version, bool) or version not in READABLE_SCHEMA_VERSIONS:
        raise FactsFileError(
            source, f"schema_version {version!r} is not supported (expected "
            f"{' or '.join(map(str, READABLE_SCHEMA_VERSIONS))})")
    facts: Facts = _from_jsonable(Facts, data, "facts", source)
    return facts


MAX_FACTS_BYTES = 32 * 1024 * 1024  # a real report is a few kB


def load_facts_file(path: Path) -> Facts:
    """Load facts written by ``check --json`` (the whole report or its ``facts`` member)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            # A FIFO or device would block or never end; a folder is a wrong argument.
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise FactsFileError(str(path), f"{kind}; pass the saved JSON file")
        if info.st_size > MAX_FACTS_BYTES:
            raise FactsFileError(str(path), f"larger than {MAX_FACTS_BYTES // 2**20} MB; "
                                 "not a report of `check --json`")
        raw = path.read_bytes()
    except OSError as exc:
        raise FactsFileError(str(path), f"cannot read it: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")  # a BOM is what Windows editors add
    except UnicodeDecodeError as exc:
        raise FactsFileError(str(path), f"not UTF-8 text (byte {exc.start}): is it the JSON "
                             "report?") from None
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and ints past Python's digit limit
        raise FactsFileError(str(path), f"not valid JSON: {exc}") from exc
    except RecursionError:
        raise FactsFileError(str(path), "not valid JSON: nested too deeply") from None
    if isinstance(data, dict) and "facts" in data and "findings" in data:
        data = data["facts"]
    return facts_from_dict(data, str(path))


def _from_jsonable(tp: Any, value: Any, where: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _from_jsonable(inner[0], value, where, source)
        raise FactsFileError(source, f"{where}: unsupported union type")  # pragma: no cover
    if origin is tuple:
        if not isinstance(value, list):
            raise FactsFileError(source, f"{where}: expected a list, got {type(value).__name__}")
        (item_tp, _ellipsis) = typing.get_args(tp)
        return tuple(
            _from_jsonable(item_tp, v, f"{where}[{i}]", source) for i, v in enumerate(value)
        )
    if dataclasses.is_dataclass(tp):
        return _dataclass_from_jsonable(tp, value, where, source)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FactsFileError(source, f"{where}: expected a number")
        try:
            return float(value)
        except OverflowError:  # an integer of 400 digits
            raise FactsFileError(source, f"{where}: the number is out of range") from None
    if tp in (str, int, bool):
        # bool is an int in Python; keep them apart so `true` never passes as a count.
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise FactsFileError(source, f"{where}: expected {tp.__name__}, got {value!r:.60}")
        return value
    raise FactsFileError(source, f"{where}: unsupported type {tp!r}")  # pragma: no cover


def _dataclass_from_jsonable(tp: Any, value: Any, where: str, source: str) -> Any:
    """A dataclass from a JSON object: no unknown key, every key without a default present."""
    if not isinstance(value, dict):
        raise FactsFileError(source, f"{where}: expected an object")
    hints = typing.get_type_hints(tp)
    fields = {f.name: f for f in dataclasses.fields(tp)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise FactsFileError(source, f"{where}: unknown key(s) {', '.join(unknown)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in value:
            has_default = (
                f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING
            )
            if has_default:
                continue
            raise FactsFileError(source, f"{where}: missing key {name!r}")
        kwargs[name] = _from_jsonable(hints[name], value[name], f"{where}.{name}", source)
    return tp(**kwargs)


def parse_record(tp: type[T], data: object, where: str, source: str) -> T:
    """Strictly parse one record (e.g. the target interpreter's answer) into ``tp``."""
    return _from_jsonable(tp, data, where, source)  # type: ignore[no-any-return]
