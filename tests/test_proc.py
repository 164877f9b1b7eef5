from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sagedoctor.proc import ToolMissing, ToolTimeout, run_tool


def test_timeout_kills_the_children_that_hold_the_pipes(tmp_path: Path) -> None:
    script = tmp_path / "slow tool"
    script.write_text("#!/bin/sh\nsleep 60 &\nsleep 60\n", encoding="utf-8")
    script.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(ToolTimeout, match=r"within 0\.5 s"):
        run_tool([str(script)], timeout=0.5)
    assert time.monotonic() - started < 5


def test_missing_tool() -> None:
    with pytest.raises(ToolMissing):
        run_tool(["/nonexistent/tool"])


def test_arguments_are_not_shell_parsed(tmp_path: Path) -> None:
    result = run_tool(["/bin/echo", "a; rm -rf $HOME", "*"])
    assert result.stdout == "a; rm -rf $HOME *\n"


# --- an interrupted run_tool leaves no process behind ----------------------------------------

TREE_TOOL = """#!/bin/sh
sleep 300 &
a=$!
"$PY" -c 'import os, sys, time; os.setsid(); open(sys.argv[1], "w").write("x"); time.sleep(300)' \\
    "$PIDS.own" &
b=$!
while [ ! -s "$PIDS.own" ]; do sleep 0.05; done
echo "$$ $a $b" > "$PIDS.tmp" && mv "$PIDS.tmp" "$PIDS"
wait
"""


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _tree_tool(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A tool (path with a space and non-ASCII) with a child in its group and one that left
    the group for a session of its own; it writes the three pids once all run."""
    script = tmp_path / "long tool ü"
    script.write_text(TREE_TOOL, encoding="utf-8")
    script.chmod(0o755)
    pids = tmp_path / "pids"
    return script, pids, dict(os.environ, PY=sys.executable, PIDS=str(pids))


def _wait_for_pids(pids: Path, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while not (pids.is_file() and pids.read_text().strip()):
        assert time.monotonic() < deadline, "the tool did not start its children"
        time.sleep(0.05)
    return [int(p) for p in pids.read_text().split()]


def _none_alive(pids: list[int], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_leftovers(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# (Python's own Ctrl+C handler first: a process started in the background of a shell without
# job control, as a CI runner may start the suite, inherits SIGINT ignored)
DRIVER = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from sagedoctor.proc import run_tool
try:
    run_tool([sys.argv[1]], timeout=120)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(7)
print("FINISHED", flush=True)
"""

posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and /proc")


@posix
def test_ctrl_c_in_another_process_kills_the_whole_tool_tree(tmp_path: Path) -> None:
    script, pids_file, env = _tree_tool(tmp_path)
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(script)], env=env,
                              cwd=Path(__file__).resolve().parents[1],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids: list[int] = []
    try:
        pids = _wait_for_pids(pids_file)
        assert all(_alive(p) for p in pids)
        driver.send_signal(signal.SIGINT)  # what Ctrl+C sends; the tool is in its own session
        out, _ = driver.communicate(timeout=30)
        assert driver.returncode == 7 and "INTERRUPTED" in out, out
        assert _none_alive(pids), [p for p in pids if _alive(p)]
    finally:
        driver.kill()
        _kill_leftovers(pids)


class _Alarm(Exception):
    pass


@posix
@pytest.mark.parametrize("capped", [False, True], ids=["communicate", "capped"])
def test_an_exception_from_a_signal_handler_kills_the_tool_tree(tmp_path: Path,
                                                                capped: bool) -> None:
    script, pids_file, env = _tree_tool(tmp_path)

    def raise_once_the_tree_runs(_signum: int, _frame: object) -> None:
        if pids_file.is_file() and pids_file.read_text().strip():
            raise _Alarm("a signal handler raised")

    old = signal.signal(signal.SIGALRM, raise_once_the_tree_runs)
    pids: list[int] = []
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)  # real SIGALRMs while run_tool waits
        with pytest.raises(_Alarm):
            run_tool([str(script)], timeout=120, env=env,
                     max_output_bytes=1 << 20 if capped else None)
        signal.setitimer(signal.ITIMER_REAL, 0)
        pids = _wait_for_pids(pids_file, timeout=1)  # they were running when it was raised
        assert _none_alive(pids), [p for p in pids if _alive(p)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        _kill_leftovers(pids)


def test_a_ctrl_c_a_reader_thread_receives_stops_the_wait_at_once() -> None:
    """The kernel may hand a Ctrl+C to one of run_tool's reader threads; Python runs its
    handler only in the main thread, which sat in one long wait and so ignored it until the
    tool's timeout (300 s in the install's smoke check: a CI run of faults.py timed out)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    old = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt_a_reader() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            readers = [t for t in threading.enumerate() if "(pump)" in t.name]
            if readers and readers[0].ident is not None:
                time.sleep(0.3)
                signal.pthread_kill(readers[0].ident, signal.SIGINT)
                return
            time.sleep(0.01)

    threading.Thread(target=interrupt_a_reader, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_tool([sys.executable, "-c", "import time; time.sleep(30)"], timeout=30,
                     answer_frame=b"token")
    finally:
        signal.signal(signal.SIGINT, old)
    assert time.monotonic() - started < 10
