"""Per-shape routing decisions: the calibration file that `sagedoctor verify` seeds and the
router extends with what it measures in the app's own first calls.

Diffusion runs repeat the same few attention shapes thousands of times, and the speed-up is
not monotonic in length, so a decision is kept per shape: (dtype, head size, batch x heads
bucket, query length, key length, causal), per GPU (its UUID, not its architecture: two cards
of one model can differ in clocks and cooling), under the fingerprint of the build that was
measured. Standard library only: the CLI reads and merges this file too.

File form (schema 2), `<venv>/sagedoctor/calibration.json`:
    {"schema_version": 2, "build": {"sageattention": "2.2.0", "torch": "2.11.0+cu130"},
     "gpus": {"GPU-...": {"name": "NVIDIA H200", "arch": "9.0",
                          "decisions": {"bfloat16|128|32|9728|9728|0": {...}}}}}
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .records import MAX_RECORD_BYTES, read_record_bytes

SCHEMA_VERSION = 2
# Which measurement wins when two exist for one shape: a full verify sweep over a quick one,
# and over the few rounds an app's first calls can afford.
SOURCE_RANK = {"verify": 3, "runtime": 2, "verify-quick": 1}
MAX_FILE_BYTES = MAX_RECORD_BYTES
# The self-test's progress lines on stderr start with this (then JSON); the CLI parses them.
PROGRESS_PREFIX = "SAGEDOCTOR_PROGRESS "


def bh_bucket(batch_heads: int) -> int:
    """Batch x heads, rounded up to a power of two: 20 and 24 share a bucket, 40 does not."""
    return 1 << max(0, int(batch_heads) - 1).bit_length()


def shape_key(dtype: str, head_dim: int, batch_heads: int, q_len: int, kv_len: int,
              causal: bool) -> str:
    return f"{dtype}|{int(head_dim)}|{bh_bucket(batch_heads)}|{int(q_len)}|{int(kv_len)}|" \
           f"{int(bool(causal))}"


def parse_shape_key(key: str) -> tuple[str, int, int, int, int, bool] | None:
    parts = key.split("|")
    if len(parts) != 6:
        return None
    try:
        d, bucket, q_len, kv_len, causal = (int(p) for p in parts[1:])
    except ValueError:
        return None
    return parts[0], d, bucket, q_len, kv_len, bool(causal)


@dataclass(frozen=True)
class Decision:
    route: bool
    kernel: str  # the kernel measured (the one the check chose for this dtype and head size)
    speedup: float
    low: float
    high: float
    rounds: int
    source: str  # a SOURCE_RANK key
    measured_at: str = ""

    def outranks(self, other: Decision) -> bool:
        """Whether this measurement should replace `other` for the same shape."""
        mine, theirs = SOURCE_RANK.get(self.source, 0), SOURCE_RANK.get(other.source, 0)
        if mine != theirs:
            return mine > theirs
        return self.measured_at >= other.measured_at

    @classmethod
    def from_json(cls, data: Any) -> Decision | None:
        if not isinstance(data, dict):
            return None
        try:
            decision = cls(route=data["route"] is True, kernel=str(data["kernel"]),
                           speedup=float(data["speedup"]), low=float(data["low"]),
                           high=float(data["high"]), rounds=int(data["rounds"]),
                           source=str(data["source"]),
                           measured_at=str(data.get("measured_at", "")))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        if decision.source not in SOURCE_RANK or not all(
                math.isfinite(x) for x in (decision.speedup, decision.low, decision.high)):
            return None
        return decision


@dataclass
class GpuDecisions:
    name: str = ""
    arch: str = ""
    decisions: dict[str, Decision] = field(default_factory=dict)


@dataclass
class Calibration:
    build: dict[str, str | None] = field(default_factory=dict)
    gpus: dict[str, GpuDecisions] = field(default_factory=dict)
    # What the kernels' speed depends on beyond the versions in `build`: the installed files
    # of SageAttention and torch (by stat) and the GPU driver. Unchanged, a verify may keep
    # the stored decisions after re-timing a sample of them.
    inputs: dict[str, str | None] = field(default_factory=dict)

    def decision(self, gpu: str, key: str) -> Decision | None:
        entry = self.gpus.get(gpu)
        return entry.decisions.get(key) if entry else None

    def lookup(self, gpu: str, key: str) -> tuple[Decision | None, str]:
        """The decision for a shape and how it was found: 'stored' for the shape itself,
        'interpolated' where the nearest stored lengths below and above it (same dtype, head
        size, batch x heads bucket, self-attention) agree, else (None, 'unknown')."""
        exact = self.decision(gpu, key)
        if exact is not None:
            return exact, "stored"
        pair = self.neighbours(gpu, key)
        if pair is not None and pair[0].route == pair[1].route \
                and pair[0].kernel == pair[1].kernel:
            return pair[0], "interpolated"
        return None, "unknown"

    def neighbours(self, gpu: str, key: str) -> tuple[Decision, Decision] | None:
        """The stored decisions at the nearest lengths below and above `key`'s, where it is a
        self-attention shape with a stored length on each side."""
        parsed = parse_shape_key(key)
        entry = self.gpus.get(gpu)
        if parsed is None or entry is None:
            return None
        dtype, d, bucket, q_len, kv_len, causal = parsed
        if q_len != kv_len:
            return None
        below: tuple[int, Decision] | None = None
        above: tuple[int, Decision] | None = None
        for other, decision in entry.decisions.items():
            theirs = parse_shape_key(other)
            if theirs is None or theirs[:3] != (dtype, d, bucket) or theirs[5] != causal \
                    or theirs[3] != theirs[4]:
                continue
            length = theirs[3]
            if length < q_len and (below is None or length > below[0]):
                below = (length, decision)
            elif length > q_len and (above is None or length < above[0]):
                above = (length, decision)
        return (below[1], above[1]) if below and above else None

    def without_sweep(self, gpu: str, keys: set[tuple[str, int]]) -> Calibration:
        """A copy without the verify-measured decisions of these (dtype, head size) keys on
        this GPU: a new verify of a key replaces its sweep whole, so no point of an older
        sweep lingers between the new one's brackets."""
        out = Calibration(dict(self.build), {}, dict(self.inputs))
        for name, entry in self.gpus.items():
            kept = {}
            for key, decision in entry.decisions.items():
                parsed = parse_shape_key(key)
                if name == gpu and parsed is not None and (parsed[0], parsed[1]) in keys \
                        and decision.source in ("verify", "verify-quick"):
                    continue
                kept[key] = decision
            out.gpus[name] = GpuDecisions(entry.name, entry.arch, kept)
        return out

    def put(self, gpu: str, key: str, decision: Decision, name: str = "",
            arch: str = "") -> bool:
        """Store unless a better measurement of this shape exists; True if stored."""
        entry = self.gpus.setdefault(gpu, GpuDecisions(name, arch))
        entry.name = entry.name or name
        entry.arch = entry.arch or arch
        old = entry.decisions.get(key)
        if old is not None and not decision.outranks(old):
            return False
        entry.decisions[key] = decision
        return True

    def merged_with(self, newer: Calibration) -> Calibration:
        """`newer`'s decisions over these where they outrank them; a different build starts
        afresh, since its measurements say nothing about this one."""
        if self.build and newer.build and self.build != newer.build:
            return newer
        out = Calibration(dict(newer.build or self.build), {}, dict(newer.inputs or self.inputs))
        for source in (self, newer):
            for gpu, entry in source.gpus.items():
                for key, decision in entry.decisions.items():
                    out.put(gpu, key, decision, entry.name, entry.arch)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "build": dict(self.build),
                "inputs": dict(self.inputs),
                "gpus": {gpu: {"name": e.name, "arch": e.arch,
                               "decisions": {k: asdict(d) for k, d in sorted(e.decisions.items())}}
                         for gpu, e in sorted(self.gpus.items())}}

    @classmethod
    def from_json(cls, data: Any) -> Calibration:
        """Whatever of `data` is well formed; anything else is dropped, never raised."""
        out = cls()
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            return out
        for name in ("build", "inputs"):
            raw = data.get(name)
            if isinstance(raw, dict):
                setattr(out, name, {str(k): (str(v) if v is not None else None)
                                    for k, v in raw.items() if v is None or isinstance(v, str)})
        gpus = data.get("gpus")
        if not isinstance(gpus, dict):
            return out
        for gpu, entry in gpus.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("decisions"), dict):
                continue
            decisions = {}
            for key, raw in entry["decisions"].items():
                decision = Decision.from_json(raw)
                if decision is not None and parse_shape_key(str(key)) is not None:
                    decisions[str(key)] = decision
            out.gpus[str(gpu)] = GpuDecisions(str(entry.get("name", "")),
                                              str(entry.get("arch", "")), decisions)
        return out


def route_floor(calibration: Calibration, min_seq_len: int) -> int:
    """The shortest query length at which a call may be routed or timed, by the stored
    decisions: below it, for every GPU and self-attention family stored, the router would find
    SDPA faster by a stored or interpolated decision, so the hot path need not look further.
    A family's floor is one past its longest stored length below its first routed one (or
    below a change of kernel, where interpolation stops). What no stored point brackets is
    assumed to follow the measured ones, as the kernel's edge grows with the length: calls
    shorter than a family's shortest stored length (verify's starts at 1024 tokens) and shapes
    of no stored family (another head size or batch x heads, a cross-attention), which the
    router would otherwise time live, stay on SDPA below every family's crossover."""
    floor: int | None = None
    for entry in calibration.gpus.values():
        families: dict[tuple[str, int, int, bool], list[tuple[int, Decision]]] = {}
        for key, decision in entry.decisions.items():
            parsed = parse_shape_key(key)
            if parsed is None:
                return min_seq_len
            dtype, d, bucket, q_len, kv_len, causal = parsed
            if q_len == kv_len:
                families.setdefault((dtype, d, bucket, causal), []).append((q_len, decision))
        for points in families.values():
            points.sort(key=lambda point: point[0])
            family = points[-1][0] + 1
            for i, (_length, decision) in enumerate(points):
                if decision.route or (i and decision.kernel != points[i - 1][1].kernel):
                    family = points[i - 1][0] + 1 if i else min_seq_len
                    break
            floor = family if floor is None else min(floor, family)
    return max(min_seq_len, floor if floor is not None else min_seq_len)


def load_calibration(path: str) -> Calibration:
    """The file's decisions; a missing, huge or corrupt file gives none (never raises)."""
    try:  # only a regular file, opened without blocking: a FIFO there must not hang the app
        return Calibration.from_json(json.loads(
            read_record_bytes(path, MAX_FILE_BYTES).decode("utf-8")))
    except (OSError, ValueError, RecursionError):
        return Calibration()


def save_calibration(path: str, calibration: Calibration) -> None:
    """Atomically: a reader never sees half a file."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(calibration.to_json(), handle, indent=1)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException as exc:  # a folder at `path`, a full disk: no .tmp left per run
        try:  # noqa: SIM105 (the router loads this module; contextlib is not needed)
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:  # a write names no file
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def merge_into_file(path: str, update: Calibration) -> Calibration:
    """Read what is there, merge `update` over it, write it back; the result."""
    merged = load_calibration(path).merged_with(update)
    save_calibration(path, merged)
    return merged


def build_fingerprint(versions: Mapping[str, str | None]) -> dict[str, str | None]:
    """The part of a fingerprint that decides whether old measurements still hold."""
    return {name: versions.get(name) for name in ("sageattention", "torch", "triton",
                                                   "triton-windows")}


def gpu_identity(uuid: str | None, name: str, arch: str, index: int) -> str:
    """A GPU's key: its UUID as nvidia-smi prints it ("GPU-..."), else name, arch and index."""
    if uuid:
        text = str(uuid)
        return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
    return f"{name}|{arch}|{index}"
