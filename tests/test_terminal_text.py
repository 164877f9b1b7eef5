"""Text from outside reaches the terminal without escape sequences or control characters:
the renderers, the CLI's streams and the TUI; JSON keeps the data, escaped."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from sagedoctor.render.terminal_text import SafeTextStream, one_line, printable, safe_json
from tests.standins import clean_env, fake_nvidia_smi, make_venv, run_cli

PROFILES = Path(__file__).parent / "profiles"
# A GPU name as someone's `--facts` file (or a patched driver) could carry it: a window
# title and a clipboard write (OSC), a screen clear and a cursor move (CSI), an 8-bit CSI,
# a carriage return and a newline forging a line, a right-to-left override, a bell.
HOSTILE = ("NVIDIA H200\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x1b\\\x1b[2J\x1b[1;1H"
           "\x9b31m\r\n[✓] All fine\u202eX\x07")
FORBIDDEN = ("\x1b", "\x07", "\x9b", "\r", "\u202e", "]0;", "]52;", "[2J")


def assert_clean(text: str) -> None:
    for bad in FORBIDDEN:
        assert bad not in text, (bad, text)


def assert_no_raw_controls(text: str) -> None:
    """JSON: the sequences' printable rest stays as data; no raw control character does."""
    for bad in FORBIDDEN[:5]:
        assert bad not in text, (bad, text)


@pytest.mark.parametrize(("raw", "shown"), [
    ("NVIDIA H200", "NVIDIA H200"),
    ("a\x1b[31mred\x1b[0m", "ared"),
    ("title\x1b]0;evil\x07after", "titleafter"),
    ("osc\x1b]8;;https://evil\x1b\\link\x1b]8;;\x1b\\", "osclink"),
    ("dcs\x1bPq#0;2;0;0;0\x1b\\x", "dcsx"),
    ("c1\x9b2Jx\x9d0;t\x9cy", "c1xy"),
    ("cr\roverwrite", "croverwrite"),
    ("bidi\u202eevil\u2066x\u2069", "bidievilx"),
    ("tab\tand\nnewline", "tab\tand\nnewline"),
    ("del\x7f and nul\x00", "del and nul"),
    ("lone escape at the end\x1b", "lone escape at the end"),
    ("Ünïcödé ✓ 日本", "Ünïcödé ✓ 日本"),
])
def test_printable_drops_sequences_and_controls(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_one_line_turns_every_break_into_a_space() -> None:
    assert one_line("a\nb\r\nc\td\u2028e") == "a b c d e"


def test_safe_json_keeps_the_data_and_escapes_it() -> None:
    data = {"name": HOSTILE + "\x85\u2028"}
    text = safe_json(data)
    assert json.loads(text) == data
    assert_no_raw_controls(text)
    assert "\x85" not in text and "\u2028" not in text and "Ünï" in safe_json({"n": "Ünï"})


def test_the_stream_keeps_colours_and_drops_the_rest() -> None:
    inner = io.StringIO()
    stream: Any = SafeTextStream(inner)
    assert stream.write("\x1b[32m✓\x1b[0m ok " + HOSTILE) == len("\x1b[32m✓\x1b[0m ok " + HOSTILE)
    out = inner.getvalue()
    assert out.startswith("\x1b[32m✓\x1b[0m ok NVIDIA H200")
    assert "]0;" not in out and "\x07" not in out and "\r" not in out and "\x1b[2J" not in out


def hostile_facts(tmp_path: Path, name: str = HOSTILE) -> Path:
    facts = json.loads((PROFILES / "linux-h200-ready.json").read_text(encoding="utf-8"))
    facts["gpu"]["gpus"][0]["name"] = name
    facts["target"]["prefix"] = "/venvs/app\x1b[2J\x1b]0;pwned\x07"
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    return path


def test_check_and_plan_text_from_hostile_facts_hold_no_escapes(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    facts = hostile_facts(tmp_path)
    for args in (["check", "-v", "--facts", str(facts)], ["plan", "--facts", str(facts)],
                 ["install", "--dry-run", "--facts", str(facts)]):
        done = run_cli(args, env)
        assert done.returncode in (0, 1, 2), done.stderr
        assert_clean(done.stdout + done.stderr)
    check = run_cli(["check", "gpu", "--facts", str(facts)], env).stdout
    assert "NVIDIA H200" in check and "All fine" in check  # shown, defused
    assert "\n[✓] All fine" not in check  # the newline cannot forge a line


def test_check_json_keeps_the_hostile_name_escaped(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    done = run_cli(["check", "--json", "--facts", str(hostile_facts(tmp_path))], env)
    assert_no_raw_controls(done.stdout)
    assert json.loads(done.stdout)["facts"]["gpu"]["gpus"][0]["name"] == HOSTILE
    plan = run_cli(["plan", "--json", "--facts", str(hostile_facts(tmp_path))], env)
    assert_no_raw_controls(plan.stdout)
    assert json.loads(plan.stdout)["exit_code"] in (0, 1, 2)


def test_a_gpu_name_from_nvidia_smi_is_defused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    make_venv(venv)
    fake_nvidia_smi(tmp_path / "bin", "replay",
                    "0, NVIDIA H200\x1b]0;pwned\x07 \u202eX, 9.0, 580.159.04, 143771 MiB\n")
    env = clean_env(tmp_path, tmp_path / "bin")
    done = run_cli(["check", "gpu", "-v", "--venv", str(venv)], env)
    assert_clean(done.stdout + done.stderr)
    assert "GPU 0 NVIDIA H200 X (sm90)" in done.stdout  # the OSC went whole, its text too
    report = json.loads(run_cli(["check", "--json", "--venv", str(venv)], env).stdout)
    assert report["facts"]["gpu"]["gpus"][0]["name"] == "NVIDIA H200\x1b]0;pwned\x07 \u202eX"


def test_an_error_naming_a_hostile_path_holds_no_escapes(tmp_path: Path) -> None:
    missing = tmp_path / "facts\x1b]0;pwned\x07\x1b[2J.json"
    done = run_cli(["check", "--facts", str(missing)], clean_env(tmp_path))
    assert done.returncode == 3 and "SD901" in done.stderr
    assert_clean(done.stderr)


def terminal_bytes(app: Any) -> str:
    """What the app would write to the terminal for its current screen (its own escapes
    included): the compositor's full update, as the driver renders it."""
    from rich.console import Console

    buffer = io.StringIO()
    width, height = app.size
    console = Console(file=buffer, force_terminal=True, color_system="truecolor", width=width,
                      height=height, legacy_windows=False)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens), end="")
    return buffer.getvalue()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_tui_shows_a_hostile_gpu_name_defused(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        anyio_backend: str) -> None:
    from sagedoctor.tui.app import SagedoctorApp
    from sagedoctor.tui.session import TuiOptions
    from tests.tui_support import screen_text, settle

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    app = SagedoctorApp(TuiOptions(facts_file=hostile_facts(tmp_path)), clock=lambda: 0.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        for _ in range(2):  # the GPU row: its details name the GPU
            await pilot.press("down")
        await settle(pilot)
        shots = [terminal_bytes(app)]
        assert "NVIDIA H200" in screen_text(app)
        await pilot.press("p")
        await settle(pilot)
        shots.append(terminal_bytes(app))
        assert "/venvs/app" in screen_text(app)
    for shot in shots:
        for bad in ("\x1b]0;pwned", "\x1b]52;", "\x1b[2J", "\x9b", "\u202e", "\x07", "\r"):
            assert bad not in shot, bad
