"""ComfyUI's own attention switches beside sagedoctor's hook: --use-ck-attention seen in the
launchers (and its exclusion with --use-sage-attention), and check saying which one serves.
Real copies of the recorded portable and Desktop layouts (tests/fixtures/comfyui)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sagedoctor.apps.comfyui import find_comfyui, locate_comfyui
from sagedoctor.decide.checks import diagnose
from tests.test_comfyui import _portable_facts, desktop_copy, portable_copy


def _launcher(root: Path, name: str, flags: str) -> None:
    stock = (root / "run_nvidia_gpu.bat").read_text(encoding="utf-8")
    (root / name).write_text(stock.replace("--enable-manager", flags), encoding="utf-8")


def test_ck_flag_is_seen_per_launcher_beside_the_sage_flag(tmp_path: Path) -> None:
    root = portable_copy(tmp_path)
    _launcher(root, "run_ck.bat", "--use-ck-attention")
    _launcher(root, "run_both.bat", "--use-sage-attention --use-ck-attention")
    (root / "notes.bat").write_text("REM --use-ck-attention\r\n", encoding="utf-8")
    found = locate_comfyui(root, "--comfyui", "windows", {})
    assert found is not None
    assert found.ck_flag_in == ("run_both.bat", "run_ck.bat")
    assert found.sage_flag_in == ("run_both.bat",)


def test_desktop_launch_settings_with_the_ck_flag(tmp_path: Path) -> None:
    base, env = desktop_copy(tmp_path)
    settings = base / "user" / "default" / "comfy.settings.json"
    data = json.loads(settings.read_text(encoding="utf-8"))
    data["Comfy.Server.LaunchArgs"] = {"use-ck-attention": ""}
    settings.write_text(json.dumps(data), encoding="utf-8")
    found = find_comfyui(None, None, env, tmp_path / "home", "windows")
    assert found is not None
    assert (found.ck_flag_in, found.sage_flag_in) == (("comfy.settings.json",), ())


def test_both_flags_in_one_launcher_is_an_error(tmp_path: Path) -> None:
    facts = _portable_facts(tmp_path, "windows-4090-unverified.json",
                            sage_flag_in=("run_both.bat",), ck_flag_in=("run_both.bat",))
    found = {f.code: f for f in diagnose(facts)}
    assert found["SD230"].severity == "error"
    assert found["SD230"].detail == ("run_both.bat passes both --use-sage-attention and "
                                     "--use-ck-attention")
    apart = _portable_facts(tmp_path / "2", "windows-4090-unverified.json",
                            sage_flag_in=("run_sage.bat",), ck_flag_in=("run_ck.bat",))
    assert "SD230" not in {f.code for f in diagnose(apart)}


def test_check_says_which_switch_serves(tmp_path: Path) -> None:
    facts = _portable_facts(tmp_path, "windows-4090-unverified.json",
                            sage_flag_in=("run_sage.bat",))
    assert facts.verification is not None
    hooked = replace(facts, verification=replace(facts.verification, hooked=True))
    pair = next(f for f in diagnose(hooked) if f.code == "SD229")
    assert pair.detail == ("--use-sage-attention (run_sage.bat) serves: `sageattn()` for every "
                           "unmasked call, no check; the start-up hook stands aside there")
    assert pair.fix.startswith("Keep one")
    assert facts.comfyui is not None
    hook_only = replace(hooked, comfyui=replace(facts.comfyui, sage_flag_in=()))
    pair = next(f for f in diagnose(hook_only) if f.code == "SD229")
    assert pair.detail == ("sagedoctor's start-up hook serves (it routes only where verify "
                           "proved a gain)")
    ck = replace(hooked, comfyui=replace(facts.comfyui, sage_flag_in=(),
                                         ck_flag_in=("run_ck.bat",)))
    pair = next(f for f in diagnose(ck) if f.code == "SD229")
    assert pair.detail.startswith("--use-ck-attention (run_ck.bat): Comfy Kitchen's INT8 "
                                  "attention serves")
