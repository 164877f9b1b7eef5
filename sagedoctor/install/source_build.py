"""Building SageAttention from a source folder with the target venv's own torch.

The build runs the PEP 517 backend in the target interpreter (torch must be importable at
build time: upstream's setup.py imports it, so build isolation cannot work), on a copy of the
source, with the plan's environment. The venv is not touched until a wheel exists.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..events import BuildFinished, BuildHeartbeat, BuildStarted, Note, OnEvent
from ..plan import BuildSettings
from ..proc import run_tool
from .cache import file_sha256
from .runner import Installer, InstallError

_BUILD_SCRIPT = (
    "import sys\n"
    "from setuptools import build_meta\n"
    "print('SAGEDOCTOR_WHEEL=' + build_meta.build_wheel(sys.argv[1]), flush=True)\n"
)
_CHECK_TOOLS = "import setuptools, wheel, packaging\n"
# Inherited values that would change what is built; the plan sets its own.
_SCRUB = ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "EXT_PARALLEL", "NVCC_APPEND_FLAGS",
          "SAGEATTN_SKIP_CUDA_BUILD", "PYTHONPATH")


# A quoted -std= flag in setup.py, as upstream writes its CXX_FLAGS and NVCC_FLAGS.
_STD_FLAG = re.compile(r"""(?P<q>["'])-std=(?P<dialect>c|gnu)\+\+(?P<n>\d\d)(?P=q)""")


def _std_year(two_digits: str) -> int:
    value = int(two_digits)
    return 1900 + value if value >= 90 else 2000 + value  # c++98 < c++03 < c++11 < ... c++20


def cxx_std_flag(standard: int) -> str:
    """The flag the build compiles with for this standard (the patch writes exactly this)."""
    return f"-std=c++{standard}"


def patch_cxx_standard(tree: Path, standard: int) -> list[str]:
    """Raise every quoted `-std=c++NN` in tree/setup.py below `standard` to it; only ever
    called on the build's temporary copy. Returns what changed, for the log and the record.
    Upstream hard-codes -std=c++17 (thu-ml/SageAttention#400), which torch 2.14's ATen.h
    rejects with '#error C++20 or later compatible compiler is required'."""
    setup = tree / "setup.py"
    text = setup.read_text(encoding="utf-8")
    changed: dict[str, int] = {}

    def raise_flag(match: re.Match[str]) -> str:
        if _std_year(match.group("n")) >= _std_year(str(standard)[-2:]):
            return match.group(0)
        old = match.group(0)[1:-1]
        changed[old] = changed.get(old, 0) + 1
        return f"{match.group('q')}{cxx_std_flag(standard)}{match.group('q')}"

    patched = _STD_FLAG.sub(raise_flag, text)
    if not changed:
        return []
    setup.write_text(patched, encoding="utf-8")
    return [f"setup.py: {old} -> {cxx_std_flag(standard)} ({count}x)"
            for old, count in changed.items()]


_NOT_COPIED = ("build", "*.egg-info", ".git")
MAX_DIGESTED_BYTES = 2 << 30  # a source folder larger than this is built, not keyed


def source_tree_digest(source: Path) -> str | None:
    """The sha256 of what the build copies from a source folder (each path, each file's bytes,
    each link's target), for the cache key of a --source DIR build; None where it cannot be
    read or is too large to hash (then it is built every time, as before)."""
    import fnmatch
    import hashlib

    digest = hashlib.sha256()
    total = 0
    try:
        for folder, dirs, files in os.walk(source):  # links to folders are not walked
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs
                             if not any(fnmatch.fnmatch(d, p) for p in _NOT_COPIED))
            for name in sorted(files) + [d for d in dirs if (here / d).is_symlink()]:
                if any(fnmatch.fnmatch(name, p) for p in _NOT_COPIED):
                    continue
                path = here / name
                rel = path.relative_to(source).as_posix().encode("utf-8", "surrogateescape")
                digest.update(len(rel).to_bytes(4, "big") + rel)
                if path.is_symlink():
                    digest.update(b"L" + os.readlink(path).encode("utf-8", "surrogateescape"))
                    continue
                if not path.is_file():
                    return None  # a FIFO or device: nothing to key by
                total += path.stat().st_size
                if total > MAX_DIGESTED_BYTES:
                    return None
                digest.update(b"F" + bytes.fromhex(file_sha256(path)))
    except (OSError, ValueError):
        return None
    return digest.hexdigest()


def prepare_tree(source: Path, work: Path, settings: BuildSettings) -> tuple[Path, list[str]]:
    """The build's own copy of the source (never the user's folder), patched to the plan's
    C++ standard; returns it and the patches made."""
    tree = work / "src"
    try:  # links are copied as links: `loop -> .` or a link to a data folder is not walked
        shutil.copytree(source, tree, symlinks=True,
                        ignore=shutil.ignore_patterns(*_NOT_COPIED))
    except (OSError, RecursionError) as exc:  # shutil.Error lists each file that failed
        detail = str(exc)[:300]
        raise InstallError(f"{source} could not be copied for the build: {detail}",
                           "the venv was not changed; pass a readable SageAttention source "
                           "folder") from exc
    patches = (patch_cxx_standard(tree, settings.cxx_standard)
               if settings.cxx_standard is not None else [])
    return tree, patches


def build_environment(base: Mapping[str, str], settings: BuildSettings,
                      tools_dir: Path | None) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _SCRUB}
    env.update(dict(settings.env))
    cuda_bin = str(Path(settings.cuda_home) / "bin")
    env["PATH"] = cuda_bin + os.pathsep + env.get("PATH", "")
    if tools_dir is not None:
        env["PYTHONPATH"] = str(tools_dir)
    return env


def _tools_present(python: Path) -> bool:
    return run_tool([str(python), "-c", _CHECK_TOOLS], timeout=60).returncode == 0


def build_wheel(python: Path, settings: BuildSettings, source: Path, work: Path,
                log_path: Path, emit: OnEvent, installer: Installer,
                started: Callable[[int], None] | None = None,
                report_every: float = 15.0,
                cancel: threading.Event | None = None,
                patched: list[str] | None = None) -> Path:
    """Build a wheel from `source` into `work`; returns its path. Raises InstallError.

    The build's output is appended to `log_path` (the run's one log); `started` gets the
    build's process group id, so a journal can name it for a later run to kill. Every
    `report_every` seconds the time so far and the build's latest output line are said.
    Setting `cancel` stops the build: its whole process group is killed, and
    InstallInterrupted says so (nothing of the venv was changed by a build)."""
    if not (source / "setup.py").is_file():
        raise InstallError(f"{source} has no setup.py", "pass a SageAttention source folder")
    tree, patches = prepare_tree(source, work, settings)
    if patched is not None:
        patched += patches  # for the install record
    if patches:
        emit(Note(f"C++{settings.cxx_standard}, as torch's headers demand: patched the "
                  f"build's copy ({'; '.join(patches)}); {source} is unchanged"))
    tools_dir = None
    if not _tools_present(python):
        tools_dir = work / "build-tools"
        emit(Note(f"installing build tools into {tools_dir} (not into the venv)"))
        installer.install_into(tools_dir, list(settings.build_requires))
    out_dir = work / "wheel"
    out_dir.mkdir()
    env = build_environment(os.environ, settings, tools_dir)
    emit(BuildStarted(tuple(settings.env), settings.cxx_standard, str(log_path)))
    began = time.monotonic()
    with log_path.open("a", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [str(python), "-c", _BUILD_SCRIPT, str(out_dir)], cwd=tree, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=sys.platform != "win32")
        assert proc.stdout is not None
        if started is not None:
            started(proc.pid)
        wheel_name = None
        stop = threading.Event()
        latest = [""]  # the build's last output line, for the heartbeat

        def heartbeat() -> None:
            while not stop.wait(report_every):
                emit(BuildHeartbeat(time.monotonic() - began, latest[0]))

        ticker = threading.Thread(target=heartbeat, daemon=True)
        ticker.start()
        if cancel is not None:
            def watch() -> None:
                while not stop.is_set():
                    if cancel.wait(0.2):
                        _signal_group(proc)
                        return

            threading.Thread(target=watch, daemon=True).start()
        try:
            for raw in proc.stdout:
                line = raw.decode("utf-8", errors="replace")
                log.write(line)
                if line.strip():
                    latest[0] = line.strip()
                if line.startswith("SAGEDOCTOR_WHEEL="):
                    wheel_name = line.split("=", 1)[1].strip()
            code = proc.wait()
        except BaseException:
            _kill(proc)
            raise
        finally:
            stop.set()
    elapsed = time.monotonic() - began
    if cancel is not None and cancel.is_set():
        from .errors import InstallInterrupted

        raise InstallInterrupted(f"the build was cancelled after {elapsed:.0f} s and stopped",
                                 f"nothing was installed from it; its log is {log_path}")
    if code != 0 or wheel_name is None:
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-6:]
        raise InstallError(f"the build failed after {elapsed:.0f} s (exit {code}): "
                           + " | ".join(tail),
                           f"read {log_path}; the venv was not changed")
    emit(BuildFinished(wheel_name, elapsed, _peak_rss()))
    return out_dir / wheel_name


def _peak_rss() -> str:
    """The largest resident size of any finished child (the build's nvcc, mostly)."""
    try:
        import resource
    except ImportError:  # Windows
        return ""
    kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return f"; peak RSS of one build process {kib / 1024:.0f} MiB" if kib > 0 else ""


def _kill(proc: subprocess.Popen[bytes]) -> None:
    _signal_group(proc)
    proc.wait()


def _signal_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the build's process group (nvcc children too); no wait, any thread."""
    try:
        if sys.platform == "win32":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
