"""Real venvs holding stand-in distributions, and a fake nvidia-smi on PATH.

Only the process boundary is faked: the venv is a real `python -m venv`, its dist-infos are real
files that importlib.metadata reads, and nvidia-smi is a real executable that replays output
recorded on real machines (tests/fixtures, copied from the project's shared fixtures).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H200 = FIXTURES / "h200-linux"
EXT = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def make_venv(path: Path) -> Path:
    """A real venv without pip (fast); returns its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    found = list(path.glob("lib/python3*/site-packages"))
    assert found, f"no site-packages under {path}"
    return found[0]


# What the tests install into their venvs themselves: a test interpreter that has them (the
# GPU machine's, with a real SageAttention and the runtime) must not lend them.
NOT_BORROWED = ("sageattention", "triton", "sagedoctor_runtime", "sagedoctor-runtime")


def borrow_host_site(site: Path) -> None:
    """Let a test venv import torch (gigabytes) and its dependencies from the test
    interpreter's site-packages: a path line to a folder of symlinks to every entry there but
    NOT_BORROWED. (A path line's folder has its .pth files ignored, as before; the folder is
    named site-packages, as the runtime's fingerprint looks for dist-infos only there.)"""
    host = Path(sysconfig.get_paths()["purelib"])
    farm = site.parent / "borrowed from tests" / "site-packages"
    farm.mkdir(parents=True)
    for entry in host.iterdir():
        if not entry.name.lower().replace("-", "_").startswith(
                tuple(n.replace("-", "_") for n in NOT_BORROWED)):
            (farm / entry.name).symlink_to(entry)
    (site / "zz-borrowed-from-tests.pth").write_text(f"{farm}\n", encoding="utf-8")


def run_at_start_up(site: Path, code: str) -> Path:
    """Code the venv's interpreter runs at every start, as a sitecustomize.py would; returns
    the module. A module imported by a .pth line, not a sitecustomize.py: Debian's and
    Ubuntu's Python have their own in the standard library, which comes first on sys.path,
    so one in the venv never runs there (a test waiting for it timed out; others proved
    nothing)."""
    module = site / "zz_test_start_up.py"
    module.write_text(code, encoding="utf-8")
    (site / "zz-test-start-up.pth").write_text("import zz_test_start_up\n", encoding="utf-8")
    return module


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def add_dist(site: Path, name: str, version: str, files: dict[str, str] | None = None,
             summary: str = "", requires: tuple[str, ...] = ()) -> None:
    """A dist-info as pip writes it (METADATA, RECORD, INSTALLER) plus the package's files."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires), encoding="utf-8")
    (dist / "INSTALLER").write_text("pip\n", encoding="utf-8")
    record = []
    for rel, text in (files or {}).items():
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        record.append(f"{rel},,")
    (dist / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")


def add_torch(site: Path, version_py: str, dist_version: str = "2.11.0",
              requires: tuple[str, ...] = (), aten_h: str | None = None) -> None:
    files = {"torch/__init__.py": "raise ImportError('sagedoctor must never import torch')\n",
             "torch/version.py": version_py}
    if aten_h is not None:
        files["torch/include/ATen/ATen.h"] = aten_h
    add_dist(site, "torch", dist_version, files, requires=requires)


def add_sageattention(site: Path, version: str, modules: tuple[str, ...]) -> None:
    files = {"sageattention/__init__.py": "raise ImportError('must not be imported')\n",
             "sageattention/core.py": ""}
    for module in modules:
        files[f"sageattention/{module}{EXT}"] = ""
    add_dist(site, "sageattention", version, files)


INVOKEAI_CONFIG_OLD = textwrap.dedent('''\
    from typing import Literal
    from pydantic_settings import BaseSettings
    CONFIG_SCHEMA_VERSION = "4.0.3"
    class InvokeAIAppConfig(BaseSettings):
        attention_type: Literal["auto", "normal", "xformers", "sliced", "torch-sdp"] = "auto"
        precision: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    ''')

INVOKEAI_CONFIG_NEW = INVOKEAI_CONFIG_OLD + (
    '    attention_backend: Literal["auto", "torch-sdp", "sage"] = "auto"\n')


def add_invokeai(site: Path, version: str, config_source: str) -> None:
    add_dist(site, "invokeai", version, {
        "invokeai/__init__.py": "raise ImportError('must not be imported')\n",
        "invokeai/app/services/config/config_default.py": config_source,
    })


def fake_nvidia_smi(bin_dir: Path, mode: str, payload: str = "") -> Path:
    """An executable `nvidia-smi` that behaves like a driver of one kind.

    modes: "replay" prints payload; "r470" rejects compute_cap like 470.x drivers, then answers
    the query without it; "hang" never answers; "fail" exits 9 like a driver/library mismatch.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    data = bin_dir / "nvidia-smi.out"
    data.write_text(payload, encoding="utf-8")
    script = bin_dir / "nvidia-smi"
    if mode == "replay":
        body = f'cat "{data}"\n'
    elif mode == "r470":
        body = textwrap.dedent(f'''\
            case "$*" in
              *compute_cap*) echo 'Field "compute_cap" is not a valid field to query.'; exit 2;;
            esac
            cat "{data}"
            ''')
    elif mode == "hang":
        body = "sleep 60\n"  # a child: the timeout must kill the whole group
    elif mode == "fail":
        body = ("echo 'Failed to initialize NVML: Driver/library version mismatch'\n"
                "exit 9\n")
    else:
        raise ValueError(mode)
    script.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    script.chmod(0o755)
    return script


def clean_env(tmp_path: Path, path_prefix: Path | None = None) -> dict[str, str]:
    """The environment a user would have, minus anything of this machine that leaks in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "INVOKEAI_ROOT", "CUDA_HOME", "CUDA_PATH", "NO_COLOR",
                        "FORCE_COLOR", "SAGEDOCTOR_RUNTIME", "SAGEDOCTOR_CALIBRATION")
           and not k.startswith("XDG_")}  # config, state and logs go under HOME
    env["HOME"] = str(tmp_path / "home")
    env["SAGEDOCTOR_SKIP_NVML"] = "1"
    # A target venv that borrows a CUDA torch must not see the host's GPU either: on the GPU
    # machine `verify` would otherwise time the real GPU, and "no GPU" tests would see one.
    env["CUDA_VISIBLE_DEVICES"] = ""
    # An empty host tree: the host's own /proc/driver/nvidia and /usr/local/cuda stay out.
    host = tmp_path / "host root"
    host.mkdir(exist_ok=True)
    env["SAGEDOCTOR_HOST_ROOT"] = str(host)
    # Only the basic tools, never the host's nvidia-smi, nvcc or gcc.
    base_path = str(_basic_tools(tmp_path / "host tools"))
    env["PATH"] = f"{path_prefix}:{base_path}" if path_prefix else base_path
    return env


_BASIC_TOOLS = ("sh", "cat", "sleep", "echo", "env", "uname", "ldconfig", "true")


def _basic_tools(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    for name in _BASIC_TOOLS:
        found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        link = folder / name
        if found and not link.exists():
            link.symlink_to(found)
    return folder


def run_cli(args: list[str], env: dict[str, str], timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sagedoctor", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def local_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving recorded answers; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def record_passing_verify(prefix: Path, fingerprint: dict, home: Path,
                          when: str = "2026-12-01T00:00:00+00:00",
                          python: Path | None = None) -> None:
    """A passing verify's records as `sagedoctor verify` writes them (no GPU here to run one):
    the user-state copy under ``home`` (a CLI run with clean_env's HOME reads it there) and
    the venv's arming copy. ``fingerprint``: the venv's own (runtime hook.live_fingerprint)."""
    from sagedoctor.state import record_verification

    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(home / ".local" / "state")
    try:
        record_verification(prefix, python or venv_python(prefix), "routing", fingerprint, {},
                            when)
    finally:
        if saved is None:
            del os.environ["XDG_STATE_HOME"]
        else:
            os.environ["XDG_STATE_HOME"] = saved


def put_non_file(path: Path, kind: str) -> None:
    """Something at `path` that is no regular file: a folder (with a file in it), a FIFO, a
    socket, a character device (a link to /dev/null), a symlink loop, or a sparse file of
    9 MiB ("huge"). The hostile shapes a record or the start-up hook may meet."""
    import socket

    if kind == "folder":
        path.mkdir()
        (path / "inside.txt").write_text("x", encoding="utf-8")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        here = Path.cwd()
        os.chdir(path.parent)  # a relative name: the full path is over AF_UNIX's 108 bytes
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(path.name)
        finally:
            os.chdir(here)
    elif kind == "device":
        path.symlink_to("/dev/null")  # os.stat follows it: a character device
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "huge":
        with path.open("wb") as handle:
            handle.truncate(9 * 1024 * 1024)
    else:
        raise ValueError(kind)
