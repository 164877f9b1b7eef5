from __future__ import annotations

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
