"""Screenshots of each screen at 80x24 (the app's own SVG export), compared with the files in
tests/snapshots/. After an intended change of the look, regenerate them (and the copies shown
in docs/img/) with:

    SAGEDOCTOR_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/test_tui_snapshots.py

The SVG depends on textual's version: the one they were made with is in
tests/snapshots/TEXTUAL_VERSION, and another version skips these tests with that advice."""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path

import pytest

from sagedoctor.plan import Plan, Step
from sagedoctor.tui.app import SagedoctorApp
from sagedoctor.tui.screens.install import InstallScreen
from sagedoctor.tui.session import TuiOptions
from tests.standins import make_venv, venv_python
from tests.tui_support import DOCS_IMG, SNAPSHOTS, UPDATE, settle

PROFILES = Path(__file__).parent / "profiles"
FIXTURES = Path(__file__).parent / "fixtures"
SAGE1 = PROFILES / "windows-sageattention1.json"
RECORDED = (SNAPSHOTS / "TEXTUAL_VERSION").read_text().strip() \
    if (SNAPSHOTS / "TEXTUAL_VERSION").exists() else None
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not UPDATE and version("textual") != RECORDED,
                       reason=f"snapshots were made with textual {RECORDED}; this is "
                              f"{version('textual')}: regenerate them (see this file)"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _plain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def compare(name: str, svg: str) -> None:
    path = SNAPSHOTS / f"{name}.svg"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        (DOCS_IMG / f"tui-{name}.svg").write_text(svg, encoding="utf-8")
        (SNAPSHOTS / "TEXTUAL_VERSION").write_text(version("textual") + "\n")
        return
    assert path.exists(), f"no snapshot {path}: regenerate (see this file's docstring)"
    assert svg == path.read_text(encoding="utf-8"), (
        f"the {name} screen looks different from {path}; if that is intended, regenerate")


def app_for(**options: object) -> SagedoctorApp:
    return SagedoctorApp(TuiOptions(**options), clock=lambda: 100.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "keys"), [
    ("check", ("down", "down", "down", "down", "down")),
    ("plan", ("p",)),
    ("verify", ("v",)),
    ("actions", ("a",)),
    ("help", ("question_mark",)),
])
async def test_screen_looks_as_recorded(name: str, keys: tuple[str, ...]) -> None:
    app = app_for(facts_file=SAGE1, selftest_report=FIXTURES / "selftest-h200-main.json")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        compare(name, app.export_screenshot(title=f"sagedoctor: {name}"))


@pytest.mark.skipif(os.name != "posix", reason="paths under HOME are shown as ~/ on POSIX")
async def test_install_screen_looks_as_recorded(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Every path it shows is under a HOME of the test's (shown as ~), the run's log file has a
    # fixed name, and the app's clock stands still: nothing in the picture varies.
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    venv = home / "invokeai" / ".venv"
    make_venv(venv)
    egg = venv / "sageattention-1.0.6-py3.12.egg"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Name: sageattention\n", encoding="utf-8")
    plan = Plan(python=str(venv_python(venv)), prefix=str(venv), os="linux",
                steps=(Step("remove-leftovers", "Move stale SageAttention eggs aside",
                            "they shadow the new install", paths=(str(egg),)),
                       Step("verify", "Verify in the target venv", "prove it on the GPU")))
    app = app_for(facts_file=SAGE1, log_dir=home / ".local" / "state" / "sagedoctor" / "log")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await app.push_screen(InstallScreen(plan, log_name="install-snapshot.log"))
        await settle(pilot)
        assert isinstance(app.screen, InstallScreen) and app.screen.state == "done"
        assert not egg.exists()  # moved to the log folder, kept
        screen = app.screen
        compare("install", app.export_screenshot(title="sagedoctor: install"))
        # the question a cancel asks while a build runs, over the install screen
        await app.push_screen(screen.stop_build_question())
        await settle(pilot)
        compare("confirm", app.export_screenshot(title="sagedoctor: stop the build?"))


def test_every_screen_has_a_snapshot_shown_on_the_docs_page() -> None:
    screens = {p.stem for p in (Path(__file__).resolve().parents[1] / "sagedoctor" / "tui"
                                / "screens").glob("*.py") if p.stem != "__init__"}
    shots = {p.stem for p in SNAPSHOTS.glob("*.svg")}
    assert screens and screens <= shots, f"screens without a snapshot: {screens - shots}"
    page = (DOCS_IMG.parent / "tui.md").read_text(encoding="utf-8")
    for name in shots:
        assert f"(img/tui-{name}.svg)" in page, f"docs/tui.md does not show tui-{name}.svg"
        assert (DOCS_IMG / f"tui-{name}.svg").read_text(encoding="utf-8") == \
            (SNAPSHOTS / f"{name}.svg").read_text(encoding="utf-8"), f"docs/img/tui-{name}.svg"
