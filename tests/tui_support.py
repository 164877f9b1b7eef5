"""Helpers for the TUI tests: settle an app, read its screen as text, compare screenshots."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot

SNAPSHOTS = Path(__file__).parent / "snapshots"
DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
UPDATE = os.environ.get("SAGEDOCTOR_UPDATE_SNAPSHOTS") == "1"


async def settle(pilot: Pilot[Any]) -> None:
    """Wait until every worker has finished and the screen has caught up."""
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def screen_text(app: App[Any]) -> str:
    """The screen as plain text, the way export_screenshot() sees it."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system=None, record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text()
