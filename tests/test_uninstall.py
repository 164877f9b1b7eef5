"""`sagedoctor uninstall`: the real CLI on a real venv (made without pip, as uv makes them)
with stand-in dist-infos; the triton-windows it puts back is a local wheel that real uv
installs from a find-links folder, offline (no test here reaches the network)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from sagedoctor.apps.invokeai import apply_settings, save_edit_record
from sagedoctor.install.lock import venv_lock, venv_state_dir
from sagedoctor.install.runner import Installer, InstallError
from sagedoctor.state import InstallRecord, merged_record, record_install, state_dir
from sagedoctor.state import read_install_record as read_record
from tests.standins import (
    INVOKEAI_CONFIG_NEW,
    add_dist,
    add_invokeai,
    add_sageattention,
    clean_env,
    make_venv,
    venv_python,
)


def test_record_keeps_the_users_version_across_installs(tmp_path: Path) -> None:
    first = merged_record(None, {"triton-windows": "3.5.1.post24", "torch": "2.9.1"},
                          {"triton-windows": "3.6.0.post25", "sageattention": "2.2.0",
                           "torch": "2.9.1"},
                          frozenset({"triton-windows", "sageattention"}))
    assert first == InstallRecord({"sageattention": "2.2.0", "triton-windows": "3.6.0.post25"},
                                  {"triton-windows": "3.5.1.post24"})
    # a second install replaces sagedoctor's own triton: still the user's 3.5.1 to put back
    second = merged_record(first, {"triton-windows": "3.6.0.post25"},
                           {"triton-windows": "3.6.0.post26"}, frozenset({"triton-windows"}))
    assert second.replaced == {"triton-windows": "3.5.1.post24"}
    assert second.installed["triton-windows"] == "3.6.0.post26"
    # plain triton removed on Windows: recorded as replaced, no longer installed
    third = merged_record(None, {"triton": "3.6.0"}, {}, frozenset({"Triton"}))
    assert third == InstallRecord({}, {"triton": "3.6.0"})


def test_record_file_round_trips_and_hostile_ones_are_ignored(tmp_path: Path) -> None:
    record_install(tmp_path, {}, {"sageattention": "2.2.0"}, frozenset({"sageattention"}))
    assert read_record(tmp_path) == InstallRecord({"sageattention": "2.2.0"}, {})
    (tmp_path / "sagedoctor" / "installed.json").write_text(
        json.dumps({"schema": 1, "installed": {"x": 1}, "replaced": {}}), encoding="utf-8")
    assert read_record(tmp_path) is None


def local_wheel(folder: Path, name: str, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    files = {"triton/__init__.py": "",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{dist}/RECORD"] = "".join(f"{k},,\n" for k in [*files, f"{dist}/RECORD"])
    with zipfile.ZipFile(path, "w") as wheel:
        for rel, text in files.items():
            wheel.writestr(rel, text)
    return path


def complete_record(site: Path) -> None:
    """List each dist-info's own files in its RECORD, as installers do (tests.standins leaves
    them out), so a real uninstall removes the dist-info too."""
    for dist in site.glob("*.dist-info"):
        record = dist / "RECORD"
        own = "".join(f"{dist.name}/{f.name},,\n" for f in sorted(dist.iterdir()))
        record.write_text(record.read_text(encoding="utf-8") + own, encoding="utf-8")


@pytest.fixture
def installed_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "app vénv"
    site = make_venv(venv)
    add_dist(site, "sagedoctor-runtime", "0.1.0", {"sagedoctor_runtime/__init__.py": ""})
    add_dist(site, "triton-windows", "3.6.0.post25", {"triton/__init__.py": ""})
    add_sageattention(site, "2.2.0", ("_fused",))
    complete_record(site)
    (site / "sagedoctor-runtime.pth").write_text("import sagedoctor_runtime.hook\n",
                                                 encoding="utf-8")
    (venv / "sagedoctor").mkdir()
    (venv / "sagedoctor" / "verified.json").write_text("{}", encoding="utf-8")
    record_install(venv, {"triton-windows": "3.5.1.post24"},
                   {"triton-windows": "3.6.0.post25", "sageattention": "2.2.0",
                    "sagedoctor-runtime": "0.1.0"},
                   frozenset({"triton-windows", "sageattention", "sagedoctor-runtime"}))
    return venv


def dists(venv: Path) -> dict[str, str]:
    code = ("import json, importlib.metadata as m; print(json.dumps("
            "{d.metadata['Name']: d.version for d in m.distributions()}))")
    done = subprocess.run([str(venv_python(venv)), "-I", "-c", code], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def offline_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment where uv finds wheels only in a local folder and never asks an
    index: whatever uninstall puts back comes from there, or it fails (no network reached)."""
    env = clean_env(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    env.update({"UV_FIND_LINKS": str(wheels), "UV_NO_INDEX": "1", "UV_OFFLINE": "1",
                "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
                # anything that still tried the network would meet a closed port
                "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
                "PIP_NO_INDEX": "1"})
    return env


def uninstall(args: list[str], env: dict[str, str], answer: str = ""
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sagedoctor", "uninstall", *args], env=env,
                          input=answer, capture_output=True, text=True, timeout=120)


def test_uninstall_dry_run_no_then_yes(tmp_path: Path, installed_venv: Path) -> None:
    env = offline_env(tmp_path)
    local_wheel(tmp_path / "wheels", "triton-windows", "3.5.1.post24")
    site = next(installed_venv.glob("lib/python3*/site-packages"))
    before = dists(installed_venv)

    dry = uninstall(["--venv", str(installed_venv), "--dry-run"], env)
    assert dry.returncode == 0, dry.stderr
    assert "Would change" in dry.stdout
    assert "put back triton-windows 3.5.1.post24 (sagedoctor replaced it with 3.6.0.post25)" \
        in dry.stdout
    assert "sageattention 2.2.0 stays (pass --all to remove it too)" in dry.stdout
    declined = uninstall(["--venv", str(installed_venv)], env, answer="n\n")
    assert declined.returncode == 1 and "Nothing was changed." in declined.stdout
    assert dists(installed_venv) == before
    assert (site / "sagedoctor-runtime.pth").exists()

    done = uninstall(["--venv", str(installed_venv)], env, answer="y\n")
    assert done.returncode == 0, done.stdout + done.stderr
    after = dists(installed_venv)
    assert "sagedoctor-runtime" not in after
    assert after["triton-windows"] == "3.5.1.post24"
    assert after["sageattention"] == "2.2.0"
    assert not (site / "sagedoctor-runtime.pth").exists()
    assert not (installed_venv / "sagedoctor").exists()
    again = uninstall(["--venv", str(installed_venv), "--yes"], env)
    assert again.returncode == 0 and "Nothing to do" in again.stdout


def test_uninstall_all_removes_sageattention(tmp_path: Path, installed_venv: Path) -> None:
    (installed_venv / "sagedoctor" / "installed.json").unlink()  # no record: nothing to restore
    done = uninstall(["--venv", str(installed_venv), "--all", "--yes"], offline_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    after = dists(installed_venv)
    assert "sageattention" not in after and "sagedoctor-runtime" not in after
    assert after["triton-windows"] == "3.6.0.post25"  # nothing recorded as replaced
    assert "uninstall sageattention 2.2.0 (not installed by sagedoctor)" in done.stdout


def has_pip(venv: Path) -> bool:
    done = subprocess.run([str(venv_python(venv)), "-I", "-c", "import pip"],
                          capture_output=True, text=True)
    return done.returncode == 0


def test_uninstall_works_in_a_venv_without_pip(tmp_path: Path, installed_venv: Path) -> None:
    """The GPU machine's uv-made venv has no pip ("No module named pip"): uv does it all."""
    assert not has_pip(installed_venv)
    env = offline_env(tmp_path)
    local_wheel(tmp_path / "wheels", "triton-windows", "3.5.1.post24")
    done = uninstall(["--venv", str(installed_venv), "--all", "--yes"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    after = dists(installed_venv)
    assert "sagedoctor-runtime" not in after and "sageattention" not in after
    assert after["triton-windows"] == "3.5.1.post24"  # put back through uv, from the folder
    site = next(installed_venv.glob("lib/python3*/site-packages"))
    assert not (site / "sagedoctor_runtime").exists() and not (site / "sageattention").exists()
    assert "No module named pip" not in done.stdout + done.stderr


def test_without_uv_the_uninstall_installer_refuses_rather_than_use_pip(
        installed_venv: Path) -> None:
    installer = Installer(venv_python(installed_venv), None, allow_pip=False)
    with pytest.raises(InstallError, match="uv is not found") as info:
        installer.uninstall(["sagedoctor-runtime"])
    assert "nothing was changed" in info.value.fix
    assert "sagedoctor-runtime" in dists(installed_venv)


def target_prefix(venv: Path) -> Path:
    """sys.prefix as the target reports it: the install's lock is keyed by it."""
    done = subprocess.run([str(venv_python(venv)), "-I", "-c", "import sys; print(sys.prefix)"],
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def test_uninstall_is_refused_while_an_install_holds_the_lock(
        tmp_path: Path, installed_venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An install in its smoke check holds the venv's lock: uninstall --all must not pull its
    files away (the install then blamed a good wheel)."""
    env = offline_env(tmp_path)
    local_wheel(tmp_path / "wheels", "triton-windows", "3.5.1.post24")
    monkeypatch.setenv("HOME", env["HOME"])  # the same state folder as the CLI's
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    prefix = target_prefix(installed_venv)
    site = next(installed_venv.glob("lib/python3*/site-packages"))
    before = dists(installed_venv)
    with venv_lock(venv_state_dir(prefix, state_dir()), prefix, lambda _line: None):
        refused = uninstall(["--venv", str(installed_venv), "--all", "--yes"], env)
    assert refused.returncode != 0
    assert "SD911" in refused.stderr and "cannot uninstall now" in refused.stderr
    assert f"(pid {os.getpid()})" in refused.stderr
    assert "wait for the install to finish" in refused.stderr
    assert dists(installed_venv) == before
    assert (site / "sagedoctor-runtime.pth").exists()
    assert (installed_venv / "sagedoctor" / "installed.json").exists()
    # once the install is done, the same command goes through
    done = uninstall(["--venv", str(installed_venv), "--all", "--yes"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sagedoctor-runtime" not in dists(installed_venv)


def test_uninstall_during_a_running_install_plans_no_rollback_of_it(
        tmp_path: Path, installed_venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An install at work (its lock held, its journal there) is no interrupted install: the
    uninstall listed "Roll back the interrupted install" for it, then met the lock."""
    env = offline_env(tmp_path)
    monkeypatch.setenv("HOME", env["HOME"])
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    prefix = target_prefix(installed_venv)
    folder = venv_state_dir(prefix, state_dir())
    before = dists(installed_venv)
    with venv_lock(folder, prefix, lambda _line: None):
        (folder / "journal.json").write_text(json.dumps({"pid": os.getpid(),
                                                         "phase": "changing"}))
        for args in (["--dry-run"], ["--all", "--yes"]):
            refused = uninstall(["--venv", str(installed_venv), *args], env)
            said = refused.stdout + refused.stderr
            assert "Roll back the interrupted install" not in said, said
            assert refused.returncode != 0 and "SD911" in said, said
            assert "cannot uninstall now" in said and f"pid {os.getpid()}" in said
        (folder / "journal.json").unlink()
    assert dists(installed_venv) == before


USER_CONFIG = ("# my InvokeAI settings\n"
               "schema_version: 4.0.3\n"
               "precision: float16  # the card is happier so\n")


@pytest.fixture
def invokeai_root(tmp_path: Path) -> Path:
    """<root>/.venv holding InvokeAI 6.15 (it declares attention_backend), SageAttention and
    the runtime; <root>/invokeai.yaml edited as the install's enable-invokeai step does."""
    root = tmp_path / "Invoke é root"
    venv = root / ".venv"
    site = make_venv(venv)
    add_invokeai(site, "6.15.0", INVOKEAI_CONFIG_NEW)
    add_dist(site, "sagedoctor-runtime", "0.1.0", {"sagedoctor_runtime/__init__.py": ""})
    add_sageattention(site, "2.2.0", ("_fused",))
    complete_record(site)
    record_install(venv, {}, {"sageattention": "2.2.0", "sagedoctor-runtime": "0.1.0"},
                   frozenset({"sageattention", "sagedoctor-runtime"}))
    config = root / "invokeai.yaml"
    config.write_text(USER_CONFIG, encoding="utf-8")
    config.chmod(0o640)
    edit = apply_settings(config, {"attention_backend": "sage"}, venv_python(venv), venv,
                          processes=lambda: [])
    save_edit_record(venv, edit)  # what the install records once it commits
    assert "attention_backend: sage" in config.read_text(encoding="utf-8")
    return root


def test_uninstall_all_puts_invokeai_yaml_back(tmp_path: Path, invokeai_root: Path) -> None:
    config = invokeai_root / "invokeai.yaml"
    venv = invokeai_root / ".venv"
    env = offline_env(tmp_path)
    kept = uninstall(["--venv", str(venv), "--root", str(invokeai_root), "--dry-run"], env)
    assert kept.returncode == 0, kept.stderr
    assert f"{config} keeps attention_backend: sage (pass --all" in kept.stdout
    done = uninstall(["--venv", str(venv), "--root", str(invokeai_root), "--all", "--yes"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"put back {config} as it was before sagedoctor set attention_backend: sage" \
        in done.stdout
    assert config.read_text(encoding="utf-8") == USER_CONFIG
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    assert sorted(p.name for p in invokeai_root.iterdir()) == [".venv", "invokeai.yaml"]
    assert "sageattention" not in dists(venv)


def test_uninstall_all_removes_only_the_key_from_a_file_changed_since(
        tmp_path: Path, invokeai_root: Path) -> None:
    config = invokeai_root / "invokeai.yaml"
    venv = invokeai_root / ".venv"
    with config.open("a", encoding="utf-8") as handle:  # the user's later change
        handle.write("# added later\nlog_level: debug\n")
    done = uninstall(["--venv", str(venv), "--root", str(invokeai_root), "--all", "--yes"],
                     offline_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"remove attention_backend: sage from {config}" in done.stdout
    text = config.read_text(encoding="utf-8")
    assert "attention_backend" not in text
    for line in ("# my InvokeAI settings", "precision: float16  # the card is happier so",
                 "# added later", "log_level: debug"):
        assert line in text
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    assert list(invokeai_root.glob("invokeai.yaml.sagedoctor-*.bak"))  # nothing lost


def switched_off_root(tmp_path: Path) -> Path:
    """<root> whose user had InvokeAI's own switch on (`attention_backend: sage`), set back
    to auto by the install for sagedoctor's hook (the plan's step where the hook is better)."""
    root = tmp_path / "Invoke root"
    venv = root / ".venv"
    site = make_venv(venv)
    add_invokeai(site, "6.15.0", INVOKEAI_CONFIG_NEW)
    add_dist(site, "sagedoctor-runtime", "0.1.0", {"sagedoctor_runtime/__init__.py": ""})
    add_sageattention(site, "2.2.0", ("_fused",))
    complete_record(site)
    record_install(venv, {}, {"sagedoctor-runtime": "0.1.0"}, frozenset({"sagedoctor-runtime"}))
    config = root / "invokeai.yaml"
    config.write_text(USER_CONFIG + "attention_backend: sage\n", encoding="utf-8")
    edit = apply_settings(config, {"attention_backend": "auto"}, venv_python(venv), venv,
                          processes=lambda: [])
    save_edit_record(venv, edit)
    assert "attention_backend: auto" in config.read_text(encoding="utf-8")
    return root


def test_uninstall_puts_back_invokeais_own_switch_the_install_turned_off(
        tmp_path: Path) -> None:
    root = switched_off_root(tmp_path)
    config, venv = root / "invokeai.yaml", root / ".venv"
    env = offline_env(tmp_path)
    everything = uninstall(["--venv", str(venv), "--root", str(root), "--all", "--dry-run"],
                           env)
    assert everything.returncode == 0, everything.stderr
    assert (f"{config} keeps attention_backend: auto, as the install set it for sagedoctor's "
            "hook") in everything.stdout
    done = uninstall(["--venv", str(venv), "--root", str(root), "--yes"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"put back {config} as it was before sagedoctor set attention_backend: auto" \
        in done.stdout
    assert config.read_text(encoding="utf-8") == USER_CONFIG + "attention_backend: sage\n"
    assert sorted(p.name for p in root.iterdir()) == [".venv", "invokeai.yaml"]  # no .bak
    assert "sageattention" in dists(venv)  # without --all it stays, for InvokeAI's switch


def test_uninstall_leaves_a_switched_off_file_changed_since_and_says_so(
        tmp_path: Path) -> None:
    root = switched_off_root(tmp_path)
    config, venv = root / "invokeai.yaml", root / ".venv"
    with config.open("a", encoding="utf-8") as handle:  # the user's later change
        handle.write("log_level: debug\n")
    text = config.read_text(encoding="utf-8")
    done = uninstall(["--venv", str(venv), "--root", str(root), "--yes"],
                     offline_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"{config} changed since sagedoctor set attention_backend: auto for its hook: set "
            "it back by hand") in done.stdout
    assert config.read_text(encoding="utf-8") == text


def test_uninstall_all_is_refused_up_front_while_that_invokeai_runs(
        tmp_path: Path, invokeai_root: Path) -> None:
    config = invokeai_root / "invokeai.yaml"
    venv = invokeai_root / ".venv"
    hook = next(venv.glob("lib/python3*/site-packages")) / "sagedoctor-runtime.pth"
    hook.write_text("import sagedoctor_runtime.hook\n", encoding="utf-8")  # removed first
    before, text = dists(venv), config.read_bytes()
    script = venv / "bin" / "invokeai-web"
    script.write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    child = subprocess.Popen([str(venv_python(venv)), str(script)])
    try:
        time.sleep(0.3)  # let the process show its argv
        refused = uninstall(["--venv", str(venv), "--root", str(invokeai_root), "--all",
                             "--yes"], offline_env(tmp_path))
    finally:
        child.kill()
        child.wait()
    assert refused.returncode != 0
    assert "SD941" in refused.stderr and f"pid {child.pid}" in refused.stderr
    assert "done:" not in refused.stdout  # nothing was started, the packages least of all
    assert dists(venv) == before and config.read_bytes() == text and hook.exists()


def fake_uv(folder: Path, real: str, site: Path, fail_on: str) -> Path:
    """uv as the user has it, except that installing `fail_on` removes the old files first
    and then fails: a put-back that breaks half-way."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "uv"
    script.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" {fail_on} "*)\n'
        f"  rm -rf {shlex.quote(str(site / 'triton'))}\n"
        "  echo 'error: the put-back failed half-way on purpose' >&2; exit 1;;\n"
        "esac\n"
        f'exec {shlex.quote(real)} "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return script


def test_a_put_back_failing_half_way_rolls_back_everything_uninstall_did(
        tmp_path: Path, installed_venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagedoctor import __version__
    from sagedoctor.decide.resolve.uninstall import resolve_uninstall
    from sagedoctor.flows.uninstall import uninstall_facts
    from sagedoctor.install.execute import Executor
    from sagedoctor.plan import Plan
    from sagedoctor.probe import ProbeOptions, collect_facts
    from tests.test_install_kit import tree_hashes

    env = offline_env(tmp_path)
    for key in ("UV_FIND_LINKS", "UV_NO_INDEX", "UV_OFFLINE", "UV_CACHE_DIR"):
        monkeypatch.setenv(key, env[key])
    local_wheel(tmp_path / "wheels", "triton-windows", "3.5.1.post24")
    site = next(installed_venv.glob("lib/python3*/site-packages"))
    root = tmp_path / "root"  # an InvokeAI root whose invokeai.yaml sagedoctor edited
    root.mkdir()
    (root / "databases").mkdir()
    config = root / "invokeai.yaml"
    config.write_text(USER_CONFIG, encoding="utf-8")
    save_edit_record(installed_venv, apply_settings(
        config, {"attention_backend": "sage"}, venv_python(installed_venv), installed_venv,
        processes=lambda: []))
    state = tmp_path / "state"
    target = collect_facts(ProbeOptions(venv=installed_venv, areas=("python",))).target
    assert target is not None
    plan = resolve_uninstall(uninstall_facts(target, None, state), everything=True)
    assert isinstance(plan, Plan)
    assert [s.action for s in plan.steps] == ["remove-hook", "restore-invokeai", "uninstall",
                                              "put-back", "uninstall", "remove-records"]

    def files() -> tuple[dict[str, str], dict[str, str], int]:
        venv_files = {k: v for k, v in tree_hashes(installed_venv).items()
                      if k != ".lock"}  # uv's own lock file, which it leaves in every venv
        return venv_files, tree_hashes(root), stat.S_IMODE(config.stat().st_mode)

    before = files()
    said: list[str] = []
    executor = Executor(plan, said.append, tmp_path / "work", tmp_path / "logs",
                        cache_dir=tmp_path / "cache", state_root=state)
    assert executor.installer.uv is not None and not executor.installer.allow_pip
    executor.installer = replace(executor.installer, uv=str(fake_uv(
        tmp_path / "bin", executor.installer.uv, site, "triton-windows==3.5.1.post24")))

    with pytest.raises(InstallError) as info:
        executor.run(__version__)
    text = "\n".join(said)
    assert "step 4 (put back triton-windows 3.5.1.post24" in info.value.message
    assert "files match their sha256 from before" in info.value.fix, info.value.fix
    # the three steps before it had run: hook gone, invokeai.yaml restored, runtime removed
    assert "removed " + str(site / "sagedoctor-runtime.pth") in text
    assert "restored " + str(config) in text
    assert "[3/6] uninstall sagedoctor-runtime 0.1.0" in text and "rolling back" in text
    # ...and all of it is back: packages, hook, invokeai.yaml and its backup, the records
    assert files() == before
    assert "attention_backend: sage" in config.read_text(encoding="utf-8")
    assert dists(installed_venv)["triton-windows"] == "3.6.0.post25"
    assert read_record(installed_venv) is not None
    assert not list(state.rglob("journal.json")) and not list(state.rglob("removed"))


def test_uninstall_dry_run_changes_nothing(tmp_path: Path, invokeai_root: Path) -> None:
    from tests.test_install_kit import tree_hashes

    venv = invokeai_root / ".venv"
    hook = next(venv.glob("lib/python3*/site-packages")) / "sagedoctor-runtime.pth"
    hook.write_text("import sagedoctor_runtime.hook\n", encoding="utf-8")
    env = offline_env(tmp_path)
    state = Path(env["HOME"])
    before = (tree_hashes(invokeai_root), tree_hashes(state))
    dry = uninstall(["--venv", str(venv), "--root", str(invokeai_root), "--all", "--dry-run"],
                    env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0] == f"Would change {venv}:"
    for number, title in enumerate((f"remove the start-up hook {hook}",
                                    f"put back {invokeai_root / 'invokeai.yaml'} as it was",
                                    "uninstall sagedoctor-runtime 0.1.0",
                                    "uninstall sageattention 2.2.0",
                                    f"remove {venv / 'sagedoctor'} (records"), 1):
        assert any(line.startswith(f"  {number}. {title}") for line in lines), (title, lines)
    assert "Proceed?" not in dry.stdout and "[1/" not in dry.stdout  # nothing was run
    assert (tree_hashes(invokeai_root), tree_hashes(state)) == before


def test_uninstall_is_refused_up_front_while_the_venvs_invokeai_runs(
        tmp_path: Path, invokeai_root: Path) -> None:
    """Without --all nothing edits invokeai.yaml, but the runtime InvokeAI has loaded would
    be pulled away: the executor's preflight refuses, as it does for an install."""
    venv = invokeai_root / ".venv"
    hook = next(venv.glob("lib/python3*/site-packages")) / "sagedoctor-runtime.pth"
    hook.write_text("import sagedoctor_runtime.hook\n", encoding="utf-8")
    before = dists(venv)
    script = venv / "bin" / "invokeai-web"
    script.write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    child = subprocess.Popen([str(venv_python(venv)), str(script)])
    try:
        time.sleep(0.3)  # let the process show its argv
        refused = uninstall(["--venv", str(venv), "--root", str(invokeai_root), "--yes"],
                            offline_env(tmp_path))
    finally:
        child.kill()
        child.wait()
    assert refused.returncode != 0
    assert "SD931" in refused.stderr and "SD196" in refused.stderr, refused.stderr
    assert f"pid {child.pid}" in refused.stderr
    assert dists(venv) == before and hook.exists() and (venv / "sagedoctor").is_dir()
