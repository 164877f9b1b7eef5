"""Shared pieces of the install tests (no tests here): real venvs that see this machine's CPU
torch, stand-in SageAttention wheels and sources (a real dist with a correct or garbage
`sageattn`), and a real local HTTP server that counts requests and can misbehave."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from sagedoctor.plan import BuildSettings, Plan, Step
from tests.standins import add_dist, borrow_host_site, local_server, make_venv, venv_python

# sageattn stand-ins, run by the smoke check on the CPU (SAGEDOCTOR_SMOKE_DEVICE=cpu).
SAGE_GOOD = (
    "import os, time\n"
    "def sageattn(q, k, v, tensor_layout='HND', is_causal=False, **kw):\n"
    "    import torch.nn.functional as F\n"
    "    hang = os.environ.get('SMOKE_HANG_FILE')\n"
    "    while hang and os.path.exists(hang):\n"
    "        time.sleep(0.1)\n"
    "    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)\n")
# Like v2.2.0's sm90 path: an uninitialised buffer, no error.
SAGE_GARBAGE = (
    "def sageattn(q, k, v, tensor_layout='HND', is_causal=False, **kw):\n"
    "    import torch\n"
    "    return torch.randn_like(q)\n")


def record_digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def make_wheel(out: Path, name: str, version: str, files: dict[str, str],
               *, lie_about: str | None = None, extra: dict[str, str] | None = None) -> Path:
    """A real wheel with a RECORD. lie_about: a file whose RECORD digest is wrong; extra:
    zip entries written without a RECORD line (e.g. '../escape.py')."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    content = {k: v.encode() for k, v in files.items()}
    content[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                   f"Version: {version}\n").encode()
    content[f"{dist}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                b"Tag: py3-none-any\n")
    rows = [f"{k},{record_digest(b'lie' if k == lie_about else v)},{len(v)}"
            for k, v in content.items()]
    rows.append(f"{dist}/RECORD,,")
    content[f"{dist}/RECORD"] = ("\n".join(rows) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for key, data in content.items():
            archive.writestr(key, data)
        for key, text in (extra or {}).items():
            archive.writestr(key, text)
    return wheel


def sage_wheel(out: Path, version: str = "2.2.0", kernel: str = SAGE_GOOD, **kw: Any) -> Path:
    return make_wheel(out, "sageattention", version,
                      {"sageattention/__init__.py": kernel,
                       "sageattention/core.py": f"VERSION = {version!r}\n"}, **kw)


FAKE_SETUP = '''
import json, os, subprocess, sys, time
from setuptools import setup
if os.environ.get("FAIL_BUILD_MARKER") or os.path.exists("FAIL"):
    raise SystemExit("nvcc fatal: simulated compiler failure")
if os.path.exists("SLOW"):  # a long compile with a child of its own, like ninja -> nvcc
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(os.environ["BUILD_PIDS"], "w").write(f"{os.getpid()} {child.pid}")
    time.sleep(600)
if os.path.exists("PAUSE"):  # a build that takes a while and says what it does
    print("[1/2] compiling the stand-in kernel", flush=True)
    time.sleep(float(open("PAUSE").read()))
keys = ["TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "EXT_PARALLEL", "NVCC_APPEND_FLAGS", "CUDA_HOME"]
with open("sageattention/build_env.json", "w") as f:
    json.dump({k: os.environ.get(k) for k in keys}, f)
setup(name="sageattention", version="2.2.0", packages=["sageattention"],
      package_data={"sageattention": ["build_env.json"]})
'''


def fake_source(folder: Path, fail: bool = False, slow: bool = False,
                kernel: str = SAGE_GOOD, pause: float | None = None) -> Path:
    """A stand-in SageAttention source tree: real setup.py, no CUDA, a CPU `sageattn`.
    slow: the build never ends; pause: it takes that many seconds."""
    folder.mkdir(parents=True)
    (folder / "setup.py").write_text(FAKE_SETUP, encoding="utf-8")
    (folder / "sageattention").mkdir()
    (folder / "sageattention" / "__init__.py").write_text(kernel, encoding="utf-8")
    if fail:
        (folder / "FAIL").write_text("", encoding="utf-8")
    if slow:
        (folder / "SLOW").write_text("", encoding="utf-8")
    if pause is not None:
        (folder / "PAUSE").write_text(str(pause), encoding="utf-8")
    return folder


def settings_for(source: str, commit: str | None = None,
                 sha256: str | None = None) -> BuildSettings:
    return BuildSettings(source=source, commit=commit, arch_list="8.6;8.9",
                         cuda_home="/usr/local/cuda", max_jobs=2, ext_parallel=2,
                         nvcc_threads=2, build_requires=("setuptools>=62,<75", "wheel",
                                                         "packaging"),
                         source_sha256=sha256)


def plan(python: Path, *steps: Step) -> Plan:
    return Plan(python=str(python), prefix=str(python.parent.parent), os="linux", steps=steps)


def torch_venv(root: Path) -> tuple[Path, Path]:
    """A real venv whose Python sees this machine's CPU torch through a path line."""
    pytest.importorskip("torch")
    site = make_venv(root)
    borrow_host_site(site)
    return venv_python(root), site


def tree_hashes(site: Path) -> dict[str, str]:
    """Every file under site-packages by sha256 (caches of compiled bytecode aside)."""
    out = {}
    for path in sorted(site.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            out[str(path.relative_to(site))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def add_installed_sage(site: Path, version: str = "2.1.1") -> None:
    add_dist(site, "sageattention", version, {"sageattention/__init__.py": SAGE_GOOD,
                                              "sageattention/core.py": "OLD = True\n"})


# --- a local server that records requests and misbehaves on demand ---------------------------

@dataclass
class Site:
    routes: dict[str, Any] = field(default_factory=dict)  # path -> bytes | (kind, arg)
    requests: list[str] = field(default_factory=list)
    base: str = ""

    def url(self, path: str) -> str:
        return self.base + path


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            site.requests.append(self.path)
            route = site.routes.get(self.path.split("?")[0])
            if route is None:
                self.send_error(404)
                return
            if isinstance(route, tuple):
                kind, arg = route
                if kind == "redirect":
                    self.send_response(302)
                    self.send_header("Location", arg)
                    self.end_headers()
                elif kind == "drop":  # promises more than it sends, then goes away
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(arg) * 4))
                    self.end_headers()
                    self.wfile.write(arg)
                    self.wfile.flush()
                    self.connection.close()
                elif kind == "endless":
                    self.send_response(200)
                    self.end_headers()
                    try:
                        while True:
                            self.wfile.write(b"x" * 65536)
                    except OSError:
                        pass
                elif kind == "json":
                    self._body(arg, "application/json")
                elif kind == "slow":  # bytes after a pause
                    time.sleep(1.0)
                    self._body(arg, "application/octet-stream")
                elif kind == "trickle":  # a slow link: eight pieces, 0.15 s apart
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(arg)))
                    self.end_headers()
                    piece = -(-len(arg) // 8)
                    for start in range(0, len(arg), piece):
                        self.wfile.write(arg[start:start + piece])
                        self.wfile.flush()
                        time.sleep(0.15)
                return
            self._body(route, "text/html" if self.path.endswith("/")
                       else "application/octet-stream")

        def _body(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serving() -> Iterator[Site]:
    served = Site()
    with local_server(_handler(served)) as url:
        served.base = url
        yield served


def serve_index(site: Site, wheel: Path, project: str, *, sha: bool = True,
                href: str | None = None) -> str:
    """A PEP 503 simple page for `project` linking `wheel`; returns the index URL."""
    data = wheel.read_bytes()
    site.routes[f"/files/{wheel.name}"] = data
    link = href or f"/files/{wheel.name}"
    if sha:
        link += f"#sha256={hashlib.sha256(data).hexdigest()}"
    site.routes[f"/simple/{project}/"] = (f'<html><body><a href="{link}">{wheel.name}</a>'
                                          "</body></html>").encode()
    return site.url("/simple/")

