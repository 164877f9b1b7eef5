"""ComfyUI as a target: the three recorded layouts (portable with its ._pth, Desktop, a clone
with a venv), each giving the right Python, version and flag support; a ComfyUI (or any folder
holding a .venv) never called InvokeAI; the flag against verify's record; enable's two ways."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sagedoctor.apps.comfyui import (
    bat_sets_sage_flag,
    desktop_sets_sage_flag,
    find_comfyui,
    locate_comfyui,
    pth_file_for,
    pth_imports_site,
    sageattn_table,
    with_sage_flag,
)
from sagedoctor.decide.checks import diagnose
from sagedoctor.facts import (
    Facts,
    VerificationFacts,
    WrongKernel,
    facts_from_dict,
    facts_to_dict,
    load_facts_file,
)
from sagedoctor.probe.invokeai import choose_root
from tests.standins import add_dist, clean_env, make_venv, run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "comfyui"
PROFILES = Path(__file__).parent / "profiles"
REPO = Path(__file__).resolve().parent.parent


def portable_copy(tmp_path: Path) -> Path:
    root = tmp_path / "Comfy ü" / "ComfyUI_windows_portable"
    shutil.copytree(FIXTURES / "portable" / "ComfyUI_windows_portable", root)
    return root


def desktop_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Desktop's base path with its .venv, and the app's config.json and resources."""
    base = tmp_path / "Users" / "Ana M" / "Documents" / "ComfyUI"
    shutil.copytree(FIXTURES / "desktop" / "Documents" / "ComfyUI", base)
    for folder in ("models", "custom_nodes", ".venv/Scripts"):
        (base / folder).mkdir(parents=True)
    (base / ".venv" / "Scripts" / "python.exe").write_text("", encoding="utf-8")
    (base / ".venv" / "pyvenv.cfg").write_text("version_info = 3.12.9\n", encoding="utf-8")
    appdata, local = tmp_path / "AppData" / "Roaming", tmp_path / "AppData" / "Local"
    (appdata / "ComfyUI").mkdir(parents=True)
    (appdata / "ComfyUI" / "config.json").write_text(json.dumps(
        {"installState": "installed", "basePath": str(base)}), encoding="utf-8")
    resources = local / "Programs" / "@comfyorgcomfyui-electron" / "resources" / "ComfyUI"
    shutil.copytree(FIXTURES / "desktop" / "resources" / "ComfyUI", resources)
    return base, {"APPDATA": str(appdata), "LOCALAPPDATA": str(local)}


def clone_copy(tmp_path: Path) -> Path:
    root = tmp_path / "src" / "ComfyUI ü"
    shutil.copytree(FIXTURES / "clone" / "ComfyUI", root)
    return root


# --- the three layouts ---------------------------------------------------------------------

@pytest.mark.parametrize("given", ["", "python_embeded", "ComfyUI"])
def test_portable_build_is_found_with_its_embedded_python_and_version(
        tmp_path: Path, given: str) -> None:
    root = portable_copy(tmp_path)
    found = locate_comfyui(root / given if given else root, "--comfyui", "windows", {})
    assert found is not None
    assert (found.layout, found.root, found.python) == (
        "portable", str(root), str(root / "python_embeded" / "python.exe"))
    assert (found.version, found.version_source) == ("0.8.1", "comfyui_version.py")
    assert found.sage_flag_supported is True
    assert found.pth_file == str(root / "python_embeded" / "python312._pth")
    assert found.pth_imports_site is True
    assert found.launchers == ("run_nvidia_gpu.bat", "run_nvidia_gpu_fast_fp16_accumulation.bat")
    assert found.sage_flag_in == () and found.problem is None


def test_portable_launcher_with_the_flag_is_seen_and_a_remark_is_not(tmp_path: Path) -> None:
    root = portable_copy(tmp_path)
    stock = (root / "run_nvidia_gpu.bat").read_text(encoding="utf-8")
    (root / "run_sage.bat").write_text(stock.replace("--enable-manager",
                                                     "--use-sage-attention"), encoding="utf-8")
    (root / "notes.bat").write_text("REM try --use-sage-attention\r\n:: --use-sage-attention\r\n",
                                    encoding="utf-8")
    found = locate_comfyui(root, "--comfyui", "windows", {})
    assert found is not None and found.sage_flag_in == ("run_sage.bat",)


def test_desktop_is_found_from_its_config_with_its_venv_and_launch_settings(
        tmp_path: Path) -> None:
    base, env = desktop_copy(tmp_path)
    found = find_comfyui(None, None, env, tmp_path / "home", "windows")
    assert found is not None
    assert (found.layout, found.source, found.root) == ("desktop", "desktop-config", str(base))
    assert found.python == str(base / ".venv" / "Scripts" / "python.exe")
    assert found.version == "0.8.1" and found.sage_flag_supported is True
    assert found.sage_flag_in == ("comfy.settings.json",)
    # the same base path given by hand, without the app's resources: version unknown, said so
    alone = locate_comfyui(base, "--comfyui", "windows", {})
    assert alone is not None and alone.layout == "desktop"
    assert (alone.version, alone.sage_flag_supported) == (None, None)


def test_clone_with_a_venv_reads_its_version_from_pyproject(tmp_path: Path) -> None:
    root = clone_copy(tmp_path)
    make_venv(root / "venv")
    found = locate_comfyui(root, "--comfyui", "linux", {})
    assert found is not None
    assert (found.layout, found.python) == ("clone", str(root / "venv" / "bin" / "python"))
    assert (found.version, found.version_source) == ("0.3.54", "pyproject.toml")
    assert found.sage_flag_supported is True
    # found from the venv alone, as `--venv` or an activated venv gives it
    assert find_comfyui(root / "venv", None, {}, tmp_path, "linux") == replace(
        found, source="--venv")


def test_a_clones_own_start_script_with_the_flag_is_seen(tmp_path: Path) -> None:
    root = clone_copy(tmp_path)
    (root / "run.sh").write_text("#!/bin/sh\n# python main.py --use-sage-attention\n"
                                 "exec venv/bin/python main.py --listen\n", encoding="utf-8")
    found = locate_comfyui(root, "--comfyui", "linux", {})
    assert found is not None and (found.launchers, found.sage_flag_in) == (("run.sh",), ())
    (root / "run.sh").write_text("exec venv/bin/python main.py --use-sage-attention\n",
                                 encoding="utf-8")
    found = locate_comfyui(root, "--comfyui", "linux", {})
    assert found is not None and found.sage_flag_in == ("run.sh",)


def test_an_older_comfyui_without_the_flag_is_said(tmp_path: Path) -> None:
    root = clone_copy(tmp_path)
    args = root / "comfy" / "cli_args.py"
    args.write_text("".join(line for line in args.read_text(encoding="utf-8").splitlines(True)
                            if "sage" not in line), encoding="utf-8")
    found = locate_comfyui(root, "--comfyui", "linux", {})
    assert found is not None and found.sage_flag_supported is False
    assert found.python is None and found.problem is not None and "--python" in found.problem


def test_folders_that_are_no_comfyui_are_not_taken_for_one(tmp_path: Path) -> None:
    assert locate_comfyui(REPO, "--comfyui", "linux", {}) is None  # holds a .venv
    assert find_comfyui(REPO / ".venv", None, {}, tmp_path, "linux") is None
    assert find_comfyui(None, None, {"XDG_CONFIG_HOME": str(tmp_path)}, tmp_path,
                        "linux") is None


# --- never InvokeAI unless it is there ---------------------------------------------------

def test_a_venvs_parent_is_an_invokeai_root_only_with_invokeai_in_it(tmp_path: Path) -> None:
    comfy = clone_copy(tmp_path)
    make_venv(comfy / ".venv")
    assert choose_root(None, {}, comfy / ".venv", tmp_path).root is None
    assert choose_root(None, {}, REPO / ".venv", tmp_path).root is None
    invoke = tmp_path / "invokeai"
    site = make_venv(invoke / ".venv")
    assert choose_root(None, {}, invoke / ".venv", tmp_path).root is None
    add_dist(site, "invokeai", "6.14.2")
    assert choose_root(None, {}, invoke / ".venv", tmp_path).source == "venv-parent"
    marked = tmp_path / "launcher-made"
    make_venv(marked / ".venv")
    (marked / ".first_run").write_text("", encoding="utf-8")  # InvokeAI's launcher's marker
    assert choose_root(None, {}, marked / ".venv", tmp_path).source == "venv-parent"


def test_check_of_a_comfyui_clone_names_comfyui_and_never_invokeai(tmp_path: Path) -> None:
    root = clone_copy(tmp_path)
    make_venv(root / ".venv")
    env = clean_env(tmp_path)
    done = run_cli(["check", "--json", "--venv", str(root / ".venv")], env)
    report = json.loads(done.stdout)
    comfy = report["facts"]["comfyui"]
    assert (comfy["layout"], comfy["version"], comfy["source"]) == ("clone", "0.3.54", "--venv")
    codes = {f["code"]: f for f in report["findings"]}
    assert "SD180" not in codes and "SD181" in codes
    assert codes["SD220"]["detail"].startswith(f"ComfyUI 0.3.54 (git clone) at {root}")
    text = run_cli(["check", "--comfyui", str(root)], env).stdout
    assert "InvokeAI (its venv not inspected)" not in text
    assert f"ComfyUI: ComfyUI 0.3.54 (git clone) at {root}" in text
    assert "--use-sage-attention: supported" in text


def test_check_of_this_repository_calls_nothing_invokeai(tmp_path: Path) -> None:
    done = run_cli(["check", "--json", "invokeai", "--venv", str(REPO / ".venv")],
                   clean_env(tmp_path))
    report = json.loads(done.stdout)
    assert [f["code"] for f in report["findings"]] == ["SD181"]


def test_invokeai_root_pointing_at_a_comfyui_is_said_and_not_its_default_target(
        tmp_path: Path) -> None:
    root = clone_copy(tmp_path)
    make_venv(root / ".venv")
    env = {**clean_env(tmp_path), "INVOKEAI_ROOT": str(root)}
    report = json.loads(run_cli(["check", "--json"], env).stdout)
    found = {f["code"]: f for f in report["findings"]}
    assert found["SD180"]["detail"] == f"no InvokeAI at {root} (from INVOKEAI_ROOT)"
    assert found["SD186"]["severity"] == "warn"
    # Not that .venv, and not sagedoctor's own environment either: nothing, and why.
    assert report["facts"]["target"] is None
    assert "--venv DIR" in found["SD190"]["fix"] and "--comfyui DIR" in found["SD190"]["fix"]


def test_comfyui_option_on_a_folder_that_is_no_comfyui_is_an_error(tmp_path: Path) -> None:
    done = run_cli(["plan", "--comfyui", str(tmp_path)], clean_env(tmp_path))
    assert done.returncode == 1  # a target that cannot be inspected (exit_codes.FIXABLE)
    assert "is not a ComfyUI install" in done.stderr and "fix:" in done.stderr
    gone = run_cli(["check", "--comfyui", str(tmp_path / "nowhere")], clean_env(tmp_path))
    assert gone.returncode == 1 and "nowhere does not exist" in gone.stderr


# --- the flag against verify's record ------------------------------------------------------

def _portable_facts(tmp_path: Path, profile: str, **comfy: Any) -> Facts:
    facts = load_facts_file(PROFILES / profile)
    root = portable_copy(tmp_path)
    found = locate_comfyui(root, "--comfyui", "windows", {})
    assert facts.target is not None and found is not None
    python = str(root / "python_embeded" / "python.exe")
    target = replace(facts.target, executable=python, prefix=str(root / "python_embeded"),
                     is_venv=False,
                     site_packages=str(root / "python_embeded" / "Lib" / "site-packages"))
    return replace(facts, target=target, comfyui=replace(found, **comfy),
                   areas=(*facts.areas, "comfyui"))


def _record(facts: Facts, verdict: str, wrong: tuple[WrongKernel, ...] = ()) -> Facts:
    target = facts.target
    assert target is not None and target.sageattention is not None and target.torch
    return replace(facts, verification=VerificationFacts(
        "verified", verdict, "2026-12-04T01:00:00+00:00", target.sageattention.version,
        target.torch.version, wrong))


def test_flag_with_a_wrong_sageattn_is_an_error_naming_the_launcher(tmp_path: Path) -> None:
    facts = _portable_facts(tmp_path, "windows-4090-unverified.json",
                            sage_flag_in=("run_sage.bat",))
    wrong = (WrongKernel("GPU-1", "NVIDIA GeForce RTX 4090", "8.9", "sage_fp8_sm89"),)
    found = {f.code: f for f in diagnose(_record(facts, "routing", wrong))}
    assert found["SD222"].severity == "error"
    assert "run_sage.bat" in found["SD222"].detail and "garbage" in found["SD222"].detail
    assert found["SD222"].fix.startswith('sagedoctor install --comfyui "')
    # without the flag, only the general SD167 is said
    assert facts.comfyui is not None
    unflagged = replace(facts, comfyui=replace(facts.comfyui, sage_flag_in=()))
    quiet = {f.code for f in diagnose(_record(unflagged, "routing", wrong))}
    assert "SD167" in quiet and "SD222" not in quiet


def test_flag_where_verify_found_nothing_faster_is_a_warning(tmp_path: Path) -> None:
    facts = _portable_facts(tmp_path, "windows-4090-unverified.json",
                            sage_flag_in=("comfy.settings.json",))
    found = {f.code: f for f in diagnose(_record(facts, "sdpa-only"))}
    assert found["SD223"].severity == "warn" and "slower" in found["SD223"].detail
    assert "SD222" not in found
    assert "SD223" not in {f.code for f in diagnose(_record(facts, "routing"))}


def test_flag_this_comfyui_does_not_have_and_a_pth_without_site(tmp_path: Path) -> None:
    facts = _portable_facts(tmp_path, "windows-4090-unverified.json",
                            sage_flag_in=("run_sage.bat",), sage_flag_supported=False,
                            pth_imports_site=False,
                            pth_paths=("../ComfyUI", "python312.zip", ".", "Lib\\site-packages"))
    found = {f.code: f for f in diagnose(facts)}
    assert found["SD224"].severity == "warn" and "unrecognized arguments" in found["SD224"].detail
    # site-packages listed: packages import, only the .pth hook cannot run
    assert found["SD225"].severity == "warn" and "python312._pth" in found["SD225"].detail
    assert "SD228" not in found
    assert facts.comfyui is not None
    unlisted = replace(facts, comfyui=replace(facts.comfyui, pth_paths=(
        "../ComfyUI", "python312.zip", ".")))
    found = {f.code: f for f in diagnose(unlisted)}
    assert found["SD228"].severity == "error" and "SD225" not in found
    assert "embedded Python 3." in found["SD220"].detail
    # the app's own interpreter: no "base interpreter" note; fixes name it by --comfyui
    assert facts.comfyui is not None and "SD134" not in found
    # no runtime in that venv yet: the install bundles it, then verifies
    assert found["SD169"].fix == (f'sagedoctor install --comfyui "{facts.comfyui.root}" (it '
                                  'bundles the runtime, then verifies)')


def test_comfyui_facts_round_trip_and_older_reports_still_load(tmp_path: Path) -> None:
    facts = _portable_facts(tmp_path, "windows-4090-unverified.json")
    data = facts_to_dict(facts)
    assert facts_from_dict(json.loads(json.dumps(data))) == facts
    del data["comfyui"]
    assert facts_from_dict(data).comfyui is None


# --- small pure pieces ---------------------------------------------------------------------

def test_pth_and_launcher_parsing() -> None:
    assert pth_imports_site("python312.zip\n.\n# Uncomment\n#import site\nimport site\n")
    assert not pth_imports_site("python312.zip\n.\n\n# Uncomment to run site.main\n#import site\n")
    assert not pth_imports_site("import sitecustomize\n")
    assert bat_sets_sage_flag("python.exe -s ComfyUI\\main.py --use-sage-attention\r\n")
    assert not bat_sets_sage_flag("rem python.exe main.py --use-sage-attention\n")
    assert not bat_sets_sage_flag("python.exe main.py --use-sage-attention-3\n")
    assert desktop_sets_sage_flag('{"Comfy.Server.LaunchArgs": {"use-sage-attention": ""}}')
    assert desktop_sets_sage_flag('{"Comfy.Server.LaunchArgs": {"cpu": ""}}') is False
    assert desktop_sets_sage_flag("[1]") is None and desktop_sets_sage_flag("{") is None
    stock = "a.exe -s ComfyUI\\main.py --windows-standalone-build\r\npause\r\n"
    assert with_sage_flag(stock) == ("a.exe -s ComfyUI\\main.py --windows-standalone-build "
                                     "--use-sage-attention\r\npause\r\n")
    assert with_sage_flag("pause\n") == "pause\n"


def test_sageattn_table_is_made_of_checked_printable_values() -> None:
    table = sageattn_table({"gpus": {"GPU-1": {"name": "NVIDIA H200\x1b[2J", "arch": "9.0",
                                               "sageattn_auto": {
                                                   "bfloat16|128": {"kernel": "sage_fp8_sm90",
                                                                    "passed": False},
                                                   "float16|64": "not a mapping"}},
                                     "GPU-2": "junk"}})
    lines = table.splitlines()
    assert lines[1].split() == ["NVIDIA", "H200?[2J", "sm90", "bfloat16", "128",
                                "sage_fp8_sm90", "WRONG"]
    assert lines[2].split()[-3:] == ["-", "not", "run"]
    assert "\x1b" not in table
    assert "no sageattn() results" in sageattn_table({"gpus": []})


def test_pth_file_is_the_one_beside_the_interpreter(tmp_path: Path) -> None:
    (tmp_path / "python.exe").write_text("", encoding="utf-8")
    assert pth_file_for(tmp_path / "python.exe") is None
    (tmp_path / "python312._pth").write_text("import site\n", encoding="utf-8")
    assert pth_file_for(tmp_path / "python.exe") == tmp_path / "python312._pth"
    (tmp_path / "python._pth").write_text(".\n", encoding="utf-8")  # the DLL's comes first
    assert pth_file_for(tmp_path / "python.exe") == tmp_path / "python312._pth"
    (tmp_path / "python312._pth").unlink()
    assert pth_file_for(tmp_path / "python.exe") == tmp_path / "python._pth"


def test_desktop_found_alone_is_the_default_target_and_invokeai_found_too_stays_it(
        tmp_path: Path) -> None:
    base = tmp_path / "Documents" / "ComfyUI"
    shutil.copytree(FIXTURES / "desktop" / "Documents" / "ComfyUI", base)
    make_venv(base / ".venv")
    config = tmp_path / "config"
    (config / "ComfyUI").mkdir(parents=True)
    (config / "ComfyUI" / "config.json").write_text(json.dumps({"basePath": str(base)}),
                                                    encoding="utf-8")
    env = {**clean_env(tmp_path), "XDG_CONFIG_HOME": str(config)}
    report = json.loads(run_cli(["check", "--json"], env).stdout)
    assert report["facts"]["target"]["prefix"] == str(base / ".venv")
    comfy = report["facts"]["comfyui"]
    assert (comfy["layout"], comfy["source"], comfy["sage_flag_in"]) == (
        "desktop", "desktop-config", ["comfy.settings.json"])
    # with an InvokeAI too, InvokeAI's venv stays the default and ComfyUI says how to pick it
    invoke = tmp_path / "invokeai"
    add_dist(make_venv(invoke / ".venv"), "invokeai", "6.14.2")
    both = json.loads(run_cli(["check", "--json"], {**env, "INVOKEAI_ROOT": str(invoke)}).stdout)
    assert both["facts"]["target"]["prefix"] == str(invoke / ".venv")
    found = {f["code"]: f for f in both["findings"]}
    assert found["SD227"]["fix"] == f"sagedoctor check --comfyui {shlex.quote(str(base))}"
    assert "SD222" not in found  # the flag is read against ComfyUI's own Python only


def test_enable_says_which_switch_is_on_and_that_the_flag_wins_over_the_hook(
        tmp_path: Path) -> None:
    from sagedoctor.apps.comfyui import comfyui_ways

    _base, env = desktop_copy(tmp_path)
    desktop = find_comfyui(None, None, env, tmp_path, "windows")
    assert desktop is not None
    text = comfyui_ways(desktop, hook_on=True, table="  (table)\n")
    assert "the start-up hook (on)" in text
    assert "--use-sage-attention (on in comfy.settings.json)" in text
    assert "Both are on: the flag wins" in text and text.endswith("  (table)\n")
    clone = locate_comfyui(clone_copy(tmp_path), "--comfyui", "linux", {})
    assert clone is not None
    text = comfyui_ways(clone, hook_on=False, table="")
    assert "the start-up hook (off)" in text and "a clone is started by hand" in text
    assert "Both are on" not in text


def test_the_check_shown_in_the_docs_is_what_check_prints(tmp_path: Path) -> None:
    profile = "tests/profiles/windows-comfyui-portable-sage-flag-wrong.json"  # as the page says
    done = subprocess.run([sys.executable, "-m", "sagedoctor", "check", "--facts", profile],
                          env={**clean_env(tmp_path), "NO_COLOR": "1"}, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    page = (REPO / "docs" / "comfyui.md").read_text(encoding="utf-8")
    assert f"```text\n{done.stdout.rstrip()}\n```" in page, "update the capture in comfyui.md"
