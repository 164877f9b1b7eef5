"""Parsing and comparing versions and local labels: PEP 440 versions, CUDA minors, compute
capabilities, torch's `+cu130` and SageAttention's `+cu128torch2.9` labels. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..facts import TorchFacts


def parse_version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(text)
    except (InvalidVersion, ValueError):  # ValueError: a part over int()'s 4300 digits
        return None


def minor_of(text: str | None) -> tuple[int, int] | None:
    version = parse_version(text)
    if version is None or len(version.release) < 2:
        return None
    return version.release[0], version.release[1]


def cc_tuple(cc: str | None) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)", cc or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


# --- torch builds ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TorchBuild:
    kind: str  # "cuda" | "cpu" | "rocm" | "other"
    cuda: str | None  # "13.0"
    label: str  # "2.11.0+cu130"

    @property
    def cuda_major(self) -> int | None:
        release = parse_version(self.cuda)
        return release.release[0] if release else None

    @property
    def cuda_label(self) -> str | None:
        """PyTorch's name for the CUDA build: "13.0" -> "cu130"."""
        release = parse_version(self.cuda)
        return (f"cu{release.release[0]}{release.release[1]}"
                if release and len(release.release) > 1 else None)


def torch_build(
    version: str, full_version: str | None, cuda: str | None, hip: str | None
) -> TorchBuild:
    """What torch was built for, from torch/version.py (the dist version may lack the tag)."""
    label = full_version or version
    parsed = parse_version(label)
    local = (parsed.local or "") if parsed else ""
    if hip or local.startswith("rocm"):
        return TorchBuild("rocm", None, label)
    if cuda:
        return TorchBuild("cuda", cuda, label)
    if local.startswith("cu"):
        digits = local[2:]
        cuda_text = f"{digits[:-1]}.{digits[-1]}" if digits.isdigit() and len(digits) >= 2 else None
        return TorchBuild("cuda", cuda_text, label)
    if local in ("", "cpu") or local.startswith("cpu"):
        return TorchBuild("cpu", None, label)
    return TorchBuild("other", None, label)


# --- SageAttention -----------------------------------------------------------------------

@dataclass(frozen=True)
class SageBuild:
    cuda_major: int
    cuda_label: str  # "cu130"
    torch: tuple[int, int, int]
    and_higher: bool
    post: int | None


# The fork's "cu130torch2.10.0andhigher.post6", Astral's older "cu12.8torch2.10.0cxx11abitrue"
# and its current "cu.12.8.torch.2.10" (patch-local-version.patch since 2026-01-23).
_SAGE_LOCAL = re.compile(
    r"cu\.?(?P<maj>\d{2})\.?(?P<min>\d)\.?torch\.?(?P<torch>\d+\.\d+(?:\.\d+)?)"
    r"(?P<andhigher>andhigher)?"
)


def parse_sage_local(version: str) -> SageBuild | None:
    """'2.2.0+cu130torch2.10.0andhigher.post6' -> CUDA 13, torch >= 2.10.0, post6.

    The label is parsed, never ordered: PEP 440 compares local labels segment by segment.
    """
    parsed = parse_version(version)
    if parsed is None or not parsed.local:
        return None
    local = parsed.local
    match = _SAGE_LOCAL.search(local)
    if match is None:
        return None
    parts = [int(p) for p in match.group("torch").split(".")] + [0]
    post = re.search(r"post(\d+)", local[match.end():])
    return SageBuild(
        cuda_major=int(match.group("maj")),
        cuda_label=f"cu{match.group('maj')}{match.group('min')}",
        torch=(parts[0], parts[1], parts[2]),
        and_higher=bool(match.group("andhigher")),
        post=int(post.group(1)) if post else None,
    )


def sage_serves_torch(build: SageBuild, torch_version: str) -> bool:
    """Exact torch minor for plain wheels; at least the named torch for `andhigher` ones."""
    version = parse_version(torch_version)
    if version is None:
        return False
    have = ((*version.release, 0, 0))[:3]
    if build.and_higher:
        return have >= build.torch
    return have[:2] == build.torch[:2]


def public_version(version: str | None) -> str | None:
    return version.split("+", 1)[0] if version else None


def torch_build_of(torch: TorchFacts) -> TorchBuild:
    return torch_build(torch.version, torch.full_version, torch.cuda, torch.hip)
