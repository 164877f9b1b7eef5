"""Fuzzing what ComfyUI detection reads: launchers (.bat), Desktop's comfy.settings.json and
config.json, the embedded Python's ._pth, comfyui_version.py and pyproject.toml. Near-valid
text, junk and bombs (deep nesting, a huge file) in a real layout on disk: each is read or
ignored, never a crash, a hang or a value that is not what the type says."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import example, given

from sagedoctor.apps.comfyui import (
    bat_sets_sage_flag,
    desktop_sets_sage_flag,
    locate_comfyui,
    pth_imports_site,
    pth_paths,
    with_sage_flag,
)
from tests.fuzz_support import fuzz, mutations, outcome, text_or_junk

FIXTURES = Path(__file__).parent / "fixtures" / "comfyui"
PORTABLE = FIXTURES / "portable" / "ComfyUI_windows_portable"
BAT = (PORTABLE / "run_nvidia_gpu.bat").read_text(encoding="utf-8")
PTH = (PORTABLE / "python_embeded" / "python312._pth").read_text(encoding="utf-8")
SETTINGS = (FIXTURES / "desktop" / "Documents" / "ComfyUI" / "user" / "default"
            / "comfy.settings.json").read_text(encoding="utf-8")
VERSION = (PORTABLE / "ComfyUI" / "comfyui_version.py").read_text(encoding="utf-8")
DEEP = "[" * 100_000 + "]" * 100_000


@fuzz(300)
@given(text_or_junk(mutations(BAT + "\r\nrem --use-sage-attention\r\n")))
@example("python.exe main.py --use-sage-attention\x00")
def test_launcher_text_never_breaks_the_reader(text: str) -> None:
    found = bat_sets_sage_flag(text)
    assert isinstance(found, bool)
    edited = with_sage_flag(text)
    assert edited == text or (edited.count("--use-sage-attention")
                              == text.count("--use-sage-attention") + 1)
    outcome("comfyui-bat", lambda: found)


@fuzz(300)
@given(text_or_junk(mutations(SETTINGS)))
@example(DEEP)
@example('{"Comfy.Server.LaunchArgs": ["use-sage-attention"]}')
def test_desktop_settings_never_break_the_reader(text: str) -> None:
    found = desktop_sets_sage_flag(text)
    assert found in (True, False, None)
    outcome("comfyui-settings", lambda: "unreadable" if found is None else found)


@fuzz(300)
@given(text_or_junk(mutations(PTH)))
def test_pth_text_never_breaks_the_reader(text: str) -> None:
    assert isinstance(pth_imports_site(text), bool)
    paths = pth_paths(text)
    assert all(isinstance(p, str) and p and not p.startswith("#") for p in paths)


@fuzz(120)
@given(version=text_or_junk(mutations(VERSION)), pth=text_or_junk(mutations(PTH)),
       bat=text_or_junk(mutations(BAT)))
@example(version="__version__ = (" * 50_000, pth=DEEP, bat="\x00" * 10)
@example(version='__version__ = "0.8\\x1b[2J"', pth=PTH, bat=BAT)
def test_a_hostile_portable_layout_is_read_or_ignored(version: str, pth: str,
                                                      bat: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ComfyUI_windows_portable"
        shutil.copytree(PORTABLE, root)
        (root / "ComfyUI" / "comfyui_version.py").write_text(version, encoding="utf-8",
                                                             errors="replace")
        (root / "python_embeded" / "python312._pth").write_text(pth, encoding="utf-8",
                                                                errors="replace")
        (root / "run_mine.bat").write_text(bat, encoding="utf-8", errors="replace")
        found = locate_comfyui(root, "--comfyui", "windows", {})
        assert found is not None and found.layout == "portable"
        assert found.version is None or (isinstance(found.version, str)
                                         and len(found.version) <= 40
                                         and found.version.isprintable())
        assert found.pth_imports_site in (True, False)
        outcome("comfyui-layout", lambda: "versioned" if found.version else "no version")
