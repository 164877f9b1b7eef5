"""The runtime as its own small wheel (`sagedoctor_runtime`), so the target venv gets it with
a RECORD and can uninstall it cleanly."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from ..runtime.files import RUNTIME_PACKAGE

RUNTIME_SOURCE = Path(__file__).resolve().parents[1] / "runtime"
PACKAGE = RUNTIME_PACKAGE


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def build_runtime_wheel(out_dir: Path, version: str) -> Path:
    files: dict[str, bytes] = {}
    for path in sorted(RUNTIME_SOURCE.glob("*.py")):
        files[f"{PACKAGE}/{path.name}"] = path.read_bytes()
    dist_info = f"{PACKAGE}-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: sagedoctor-runtime\nVersion: {version}\n"
        "Summary: SDPA routing to SageAttention, bundled by sagedoctor\n").encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: sagedoctor\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n")
    record = [f"{name},{_digest(data)},{len(data)}" for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{PACKAGE}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel
