"""The TUI driven by its Pilot at 80x24: each screen, the whole flow from saved `check --json`
profiles and recorded self-test reports, a live check of a real stand-in venv, the actions,
and the CLI's start-up path (which must never import textual)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.resolve import resolve_plan
from sagedoctor.decide.resolve.steps import ResolveOptions
from sagedoctor.facts import load_facts_file
from sagedoctor.index import load_index
from sagedoctor.plan import Plan
from sagedoctor.tui.app import SagedoctorApp
from sagedoctor.tui.model import step_downloads
from sagedoctor.tui.screens.actions import ActionsScreen
from sagedoctor.tui.screens.check import CheckScreen
from sagedoctor.tui.screens.help import HelpScreen
from sagedoctor.tui.screens.plan import PlanScreen
from sagedoctor.tui.screens.verify import VerifyScreen
from sagedoctor.tui.session import Session, TuiOptions
from tests.standins import (
    add_dist,
    add_torch,
    clean_env,
    fake_nvidia_smi,
    make_venv,
    record_passing_verify,
    run_cli,
)
from tests.tui_support import screen_text, settle

PROFILES = Path(__file__).parent / "profiles"
FIXTURES = Path(__file__).parent / "fixtures"
SAGE1 = PROFILES / "windows-sageattention1.json"
SIZE = (80, 24)
pytestmark = pytest.mark.anyio  # anyio's pytest plugin (anyio comes with httpx)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def static(app: SagedoctorApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("NO_COLOR", "VIRTUAL_ENV", "INVOKEAI_ROOT", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)


# --- the check screen ------------------------------------------------------------------------

async def test_check_screen_fills_a_row_per_area_from_a_profile() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CheckScreen)
        assert {r.state for r in screen.rows.values()}.isdisjoint({"pending"})
        assert screen.rows["sageattention"].state == "error"
        assert screen.rows["sageattention"].line == "SageAttention 1 installed"
        assert screen.rows["torch"].state == "ok"
        # SD162 and SD191 (no runtime yet), both in the sageattention area
        assert "2 problems in 1 area" in static(app, "#check-summary")
        assert "facts from windows-sageattention1.json" in static(app, "#check-source")
        # details follow the selected row
        assert static(app, "#detail-text").startswith("System: Windows 11")
        await pilot.press(*["down"] * 5)
        details = static(app, "#detail-text")
        assert details.startswith("SageAttention: SageAttention 1 installed")
        assert "SD162" in details and "fix: " in details


async def test_copy_puts_the_selected_areas_fix_on_the_clipboard() -> None:
    expected = next(f.fix for f in diagnose(load_facts_file(SAGE1)) if f.code == "SD162")
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")  # System is fine: nothing to copy
        assert app.clipboard == ""
        await pilot.press(*["down"] * 5, "c")
        assert app.clipboard == expected != ""


async def test_live_check_fills_each_row_when_its_probes_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "app venv ü"
    site = make_venv(venv)
    add_torch(site, "__version__ = '2.11.0+cu130'\ncuda = '13.0'\nhip = None\n")
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, "hang")  # the GPU probe ends last, at its timeout
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("SAGEDOCTOR_SKIP_NVML", "1")
    monkeypatch.setenv("SAGEDOCTOR_TIMEOUT", "3")
    app = SagedoctorApp(TuiOptions(venv=venv, root=tmp_path / "no invokeai"))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, CheckScreen)
        deadline = time.monotonic() + 20
        while screen.rows["system"].state == "pending" and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert screen.rows["system"].state != "pending"
        assert screen.rows["gpu"].state == "pending"  # still waiting for nvidia-smi
        assert not screen.done
        await settle(pilot)
        assert screen.done
        assert all(r.state != "pending" for r in screen.rows.values())
        assert screen.rows["gpu"].state == "error"
        assert "torch 2.11.0+cu130" in screen.rows["torch"].line
        table = screen.query_one("#areas", DataTable)
        assert "torch 2.11.0+cu130" in str(table.get_cell("torch", "line"))


# --- the plan screen -------------------------------------------------------------------------

async def test_plan_screen_shows_every_step_with_its_reason_and_is_a_preview() -> None:
    facts = load_facts_file(SAGE1)
    plan = resolve_plan(facts, load_index(None), ResolveOptions())
    assert isinstance(plan, Plan)
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        steps = static(app, "#plan-steps")
        for step in plan.steps:
            assert step.title in steps and step.reason in steps
        wheel = next(s.wheel for s in plan.steps if s.wheel)
        assert wheel.url in steps
        assert "size: unknown (the index has no sizes" in steps and "size: size" not in steps
        assert [d.what for s in plan.steps for d in step_downloads(s)] == [wheel.file]
        assert "venv: removes sageattention" in steps
        changes = static(app, "#plan-changes")
        assert "installs or replaces sageattention, sagedoctor-runtime" in changes
        assert "Downloads: 1 file, total size unknown (the index has no sizes)." in changes
        assert "Preview only" in changes
        await pilot.press("i")  # facts of another machine: never carried out
        await pilot.pause()
        assert isinstance(app.screen, PlanScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, CheckScreen)


async def test_blocked_plan_names_what_to_fix() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=PROFILES / "macos-apple.json"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert static(app, "#plan-head") == "No plan: SageAttention cannot work on this machine."
        assert "SD101" in static(app, "#plan-steps")
        assert "Nothing will be changed" in static(app, "#plan-changes")


# --- the verify screen -----------------------------------------------------------------------

async def test_verify_screen_tables_a_recorded_h200_report() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1,
                                   selftest_report=FIXTURES / "selftest-h200-main.json"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        assert isinstance(app.screen, VerifyScreen)
        assert static(app, "#verdict") == (
            "SageAttention serves sequences above 12k tokens (24k for some dtypes and head "
            "sizes) on this H200; shorter ones stay on PyTorch, which is faster there.")
        assert "GPU 0 NVIDIA H200 (sm90)" in static(app, ".gpu-label")
        table = app.screen.query_one(".gpu-table", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert ["bfloat16", "128", "sage_fp8_sm90", "0.99926", "0.0384", "1.05x", "12k"] in rows
        assert len(rows) == 4


async def test_verify_screen_says_when_sdpa_stays() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1,
                                   selftest_report=FIXTURES / "selftest-h200-v2.2.0.json"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        assert static(app, "#verdict").startswith("No SageAttention kernel is both correct")
        table = app.screen.query_one(".gpu-table", DataTable)
        assert {str(table.get_row_at(i)[-1]) for i in range(table.row_count)} == {"never"}


async def test_verify_without_a_venv_of_this_machine_says_why() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        assert static(app, "#verdict").startswith("Could not verify: there is no venv")
        assert "--report FILE" in static(app, "#verify-notes")


@pytest.mark.skipif(sys.platform == "win32", reason="a shebang stand-in")
async def test_verify_screen_shows_the_verdict_of_the_self_test_it_ran(tmp_path: Path) -> None:
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / "python"
    # The target's self-test: it prints the recorded H200 report, as the runtime would.
    python.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"assert sys.argv[1:4] == ['-m', 'sagedoctor_runtime.selftest', '--json']\n"
                      f"print(open({str(FIXTURES / 'selftest-h200-main.json')!r}).read()"
                      ".replace('\\n', ' '))\n", encoding="utf-8")
    python.chmod(0o755)
    app = SagedoctorApp(TuiOptions(venv=tmp_path / "none", root=tmp_path / "none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.session.plan = Plan(python=str(python), prefix=str(prefix), os="linux", steps=())
        await app.push_screen(VerifyScreen())
        await settle(pilot)
        assert static(app, "#verdict") == (
            "SageAttention serves sequences above 12k tokens (24k for some dtypes and head "
            "sizes) on this H200; shorter ones stay on PyTorch, which is faster there.")
        notes = static(app, "#verify-notes")
        assert "calibration written to" in notes and "a: actions switches" in notes
        table = app.screen.query_one(".gpu-table", DataTable)
        assert table.row_count == 4
    assert (prefix / "sagedoctor" / "calibration.json").is_file()
    assert (prefix / "sagedoctor" / "verified.json").is_file()  # recorded as the CLI's verify


# --- help, actions, the whole flow -----------------------------------------------------------

async def test_help_overlay_opens_on_question_mark_and_closes_on_escape() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "copy the selected area's fix" in static(app, "#help-text")
        await pilot.press("escape")
        assert isinstance(app.screen, CheckScreen)


async def test_saved_report_is_what_check_json_writes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        assert isinstance(app.screen, ActionsScreen)
        assert "only the report can be saved" in static(app, "#actions-target")
        await pilot.press("enter")  # InvokeAI: there is no venv of this machine to change
        assert "no venv of this machine" in static(app, "#action-result")
        await pilot.press(*["down"] * 4, "enter")
        assert "Logs are kept in" in static(app, "#action-result")
        await pilot.press("down", "enter")
        assert app.screen.focused is app.screen.query_one("#report-path", Input)
        await pilot.press("enter")
        saved = tmp_path / "sagedoctor-report.json"
        assert f"Saved the report to {saved}" in static(app, "#action-result")
    done = run_cli(["check", "--json", "--facts", str(SAGE1)], clean_env(tmp_path))
    assert json.loads(saved.read_text(encoding="utf-8")) == json.loads(done.stdout)


async def test_enable_and_disable_switch_the_start_up_hook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagedoctor.runtime.hook import dist_stats
    from sagedoctor.state import venv_python_version, venv_site_dirs

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "home" / ".local" / "state"))
    venv = tmp_path / "venv"
    site = make_venv(venv)
    add_dist(site, "sagedoctor-runtime", "0.1.0")
    hook = site / "sagedoctor-runtime.pth"
    app = SagedoctorApp(TuiOptions(venv=venv, root=tmp_path / "none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        assert "(start-up hook: off)" in static(app, "#actions-target")
        assert "InvokeAI: not installed in this venv" in static(app, "#actions-target")
        await pilot.press("enter")  # InvokeAI on, where there is no InvokeAI: said
        await settle(pilot)
        assert "SD971" in static(app, "#action-result") and not hook.exists()
        await pilot.press("down", "down", "enter")  # enable, without a passing verify: refused
        await settle(pilot)
        assert "SD930" in static(app, "#action-result") and not hook.exists()
        # A passing verify of this venv as it is now (no GPU here to run one): enable arms.
        record_passing_verify(venv, {"python": venv_python_version(venv), "dists": {},
                                     "stat": dist_stats(venv_site_dirs(venv))}, tmp_path / "home")
        await pilot.press("enter")
        await settle(pilot)
        assert hook.is_file() and "(start-up hook: on)" in static(app, "#actions-target")
        await pilot.press("down", "enter")
        await settle(pilot)
        assert not hook.exists() and "Disabled" in static(app, "#action-result")


async def test_whole_flow_by_keyboard_from_a_profile() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=PROFILES / "windows-rtx5090-torch213-ready.json",
                                   selftest_report=FIXTURES / "selftest-h200-main.json"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        seen = [type(app.screen).__name__]
        for key in ("p", "escape", "v", "escape", "a", "escape", "question_mark", "escape"):
            await pilot.press(key)
            await settle(pilot)
            seen.append(type(app.screen).__name__)
        assert seen == ["CheckScreen", "PlanScreen", "CheckScreen", "VerifyScreen",
                        "CheckScreen", "ActionsScreen", "CheckScreen", "HelpScreen",
                        "CheckScreen"]
        await pilot.press("q")
    assert app.return_code == 0


async def test_ctrl_c_quits_as_in_any_terminal_program() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        await pilot.press("ctrl+c")  # not Textual's "press ctrl+q to quit" pop-up
        await settle(pilot)
    assert app.return_code == 0 and not app.is_running


async def test_every_screen_lists_its_keys_in_the_footer_at_80x24() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1,
                                   selftest_report=FIXTURES / "selftest-h200-main.json"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        footers = {"check": screen_text(app).splitlines()[-1]}
        for name, key in (("plan", "p"), ("verify", "v"), ("actions", "a")):
            await pilot.press(key)
            await settle(pilot)
            footers[name] = screen_text(app).splitlines()[-1]
            await pilot.press("escape")
        assert all("? Help" in line and "q Quit" in line for line in footers.values())
        assert "c Copy fix" in footers["check"] and "p Plan" in footers["check"]
        assert "esc Back" in footers["plan"]
        assert "Install" not in footers["plan"]  # a preview of another machine: nothing to run
        assert "esc Back" in footers["verify"] and "esc Back" in footers["actions"]


async def test_the_check_footer_names_tab_and_where_it_goes_at_80x24() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        footer = screen_text(app).splitlines()[-1]
        assert footer.startswith(" tab Details ") and footer.rstrip().endswith("q Quit"), footer
        assert app.focused is screen.query_one("#areas")
        await pilot.press("tab")  # to the details pane, where Up/Down scroll a long fix
        await settle(pilot)
        assert app.focused is screen.query_one("#details")
        footer = screen_text(app).splitlines()[-1]
        assert footer.startswith(" tab Areas ") and footer.rstrip().endswith("q Quit"), footer
        assert "Details" not in footer
        await pilot.press("tab")
        await settle(pilot)
        assert app.focused is screen.query_one("#areas")
        assert screen_text(app).splitlines()[-1].startswith(" tab Details ")
        await pilot.press("question_mark")
        await settle(pilot)
        assert "Tab      to the details" in screen_text(app)


def _colours(svg: str) -> set[str]:
    # c5c8c6 is rich's default SVG foreground, not a colour of the app
    return {c.lower() for c in re.findall(r"fill: ?(#[0-9a-fA-F]{6})", svg)} - {"#c5c8c6"}


def _grey(colour: str) -> bool:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return r == g == b


async def test_no_color_turns_the_app_monochrome(monkeypatch: pytest.MonkeyPatch) -> None:
    shots = {}
    for no_color in (False, True):
        if no_color:
            monkeypatch.setenv("NO_COLOR", "1")
        app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            shots[no_color] = app.export_screenshot()
    assert not all(_grey(c) for c in _colours(shots[False]))
    assert _colours(shots[True]) and all(_grey(c) for c in _colours(shots[True]))


# --- the CLI's way in ------------------------------------------------------------------------

def test_cli_start_up_never_imports_textual(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "sagedoctor", "check",
                           "--json", "--facts", str(SAGE1)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert json.loads(done.stdout)["status"] == "fixable"
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "sagedoctor.cli" in imported
    assert not {m for m in imported if m.split(".")[0] in ("textual", "rich")}
    probe = subprocess.run([sys.executable, "-c", "import sys, sagedoctor.tui, sagedoctor.cli; "
                            "print(sorted(m for m in sys.modules if m.startswith('textual')))"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "[]", probe.stderr


def test_no_arguments_without_a_terminal_prints_help(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "sagedoctor"], env=clean_env(tmp_path),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: sagedoctor") and " tui " in done.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="uses a POSIX pseudo-terminal")
def test_no_arguments_on_a_terminal_opens_the_tui(tmp_path: Path) -> None:
    import pty
    import select

    env = clean_env(tmp_path)
    env.update(TERM="xterm-256color", COLUMNS="80", LINES="24")
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sagedoctor"], env=env, stdin=child,
                            stdout=child, stderr=child, close_fds=True)
    os.close(child)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"sagedoctor" not in seen and time.monotonic() < deadline:
            if select.select([main], [], [], 0.5)[0]:
                seen += os.read(main, 65536)
        assert b"\x1b[?1049h" in seen  # the alternate screen: a full-screen app started
        assert b"sagedoctor" in seen
        os.write(main, b"q")
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([main], [], [], 0.2)[0]:
                try:
                    os.read(main, 65536)
                except OSError:
                    break
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)


def test_tui_check_gives_the_clis_verdict_with_the_plans_blockers(tmp_path: Path) -> None:
    # check --facts: SD204 (no toolkit to build with) comes from the plan, not from diagnose
    profile = PROFILES / "linux-wrapper-nvcc-no-toolkit.json"
    session = Session(TuiOptions(facts_file=profile))
    tui_codes = {f.code for f in session.check() if f.severity == "error"}
    cli = json.loads(run_cli(["check", "--json", "--facts", str(profile)],
                             clean_env(tmp_path)).stdout)
    cli_codes = {f["code"] for f in cli["findings"] if f["severity"] == "error"}
    assert "SD204" in tui_codes and "SD204" not in {f.code for f in diagnose(
        load_facts_file(profile))}
    assert tui_codes == cli_codes


async def test_r_in_facts_mode_says_there_is_nothing_to_check_again() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        said = [n.message for n in app._notifications]
        assert any("nothing on this machine to check again" in m for m in said), said


async def test_a_blocked_plan_does_not_offer_install() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=PROFILES / "macos-apple.json"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert "Install" not in screen_text(app).splitlines()[-1]
        assert not app.screen.check_action("install", ())


async def test_the_help_overlay_wraps_its_sentences_whole_at_80x24() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        lines = [line.strip(" │█╭╮╰╯─") for line in screen_text(app).splitlines()]
        text = " ".join(line for line in lines if line)
        assert "Enter selects, Esc goes back" in text and "q or Ctrl+C quits" in text
        assert "selects," not in [line.strip() for line in lines]  # never a lone fragment


async def test_every_fix_of_the_selected_area_is_on_screen_at_80x24() -> None:
    app = SagedoctorApp(TuiOptions(facts_file=SAGE1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for _ in range(5):  # down to SageAttention: SD162 and SD191, each with a fix
            await pilot.press("down")
        await settle(pilot)
        shown = screen_text(app)
        assert "SD162" in shown and "SD191" in shown
        assert shown.count("fix: sagedoctor install --venv") == 2, shown
