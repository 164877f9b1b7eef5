"""Dead ends a newcomer met in the CLI (issue 35): each answer is the one the exit-code table
and the help promise."""

from __future__ import annotations

from pathlib import Path

from tests.standins import FIXTURES, clean_env, run_cli

PROFILE = FIXTURES.parent / "profiles" / "linux-h200-ready.json"


def test_dash_capital_v_prints_the_version(tmp_path: Path) -> None:
    done = run_cli(["-V"], clean_env(tmp_path))
    assert done.returncode == 0 and done.stdout.startswith("sagedoctor "), done.stderr
    assert run_cli(["--version"], clean_env(tmp_path)).stdout == done.stdout


def test_tui_help_describes_the_app(tmp_path: Path) -> None:
    done = run_cli(["tui", "--help"], clean_env(tmp_path))
    assert done.returncode == 0
    usage, _, rest = done.stdout.partition("\n\n")
    assert usage.startswith("usage: sagedoctor tui")
    assert rest.startswith("The interactive app") and "needs a terminal" in rest.lower()


def test_a_bad_source_shows_the_commands_usage_not_the_top_level(tmp_path: Path) -> None:
    for command in ("install", "post-update"):
        done = run_cli([command, "--source", str(tmp_path / "nowhere")], clean_env(tmp_path))
        assert done.returncode == 64
        assert done.stderr.startswith(f"usage: sagedoctor {command} "), done.stderr
        assert f"sagedoctor {command}: error: --source {tmp_path / 'nowhere'}: not a folder" in (
            done.stderr)


def test_an_uninspectable_target_gives_one_fix_its_own(tmp_path: Path) -> None:
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("#!/bin/sh\necho 'Traceback: boom' >&2\nexit 1\n", encoding="utf-8")
    python.chmod(0o755)
    done = run_cli(["verify", "--python", str(python)], clean_env(tmp_path))
    assert done.returncode == 1
    assert "SD902" in done.stderr and "boom" in done.stderr
    assert done.stderr.count("fix:") == 1, done.stderr
    assert "(fix:" not in done.stderr and "run it by hand" in done.stderr


def test_an_index_file_that_does_not_exist_is_not_an_entry_to_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.toml"
    done = run_cli(["plan", "--index", str(missing), "--facts", str(PROFILE)],
                   clean_env(tmp_path))
    assert done.returncode == 3 and "SD903" in done.stderr
    assert "fix that entry" not in done.stderr
    assert "leave --index out for the shipped index" in done.stderr


def test_no_gpu_and_no_target_is_exit_2_in_check_plan_and_install_alike(tmp_path: Path) -> None:
    env = clean_env(tmp_path)  # no nvidia-smi: no GPU
    nowhere = str(tmp_path / "nonexistent")
    codes = {}
    for args in (["check"], ["plan"], ["install", "--dry-run"]):
        done = run_cli([*args, "--venv", nowhere], env)
        codes[args[0] + " " + " ".join(args[1:])] = done.returncode
        assert "SD111" in done.stdout and "SD190" in done.stdout, (args, done.stdout)
        if args[0] != "check":
            assert "No plan: SageAttention cannot work on this machine." in done.stdout
            assert "fix these first" not in done.stdout
    assert set(codes.values()) == {2}, codes


def test_plan_marks_are_checks_marks(tmp_path: Path) -> None:
    profile = FIXTURES.parent / "profiles" / "macos-apple.json"
    env = {**clean_env(tmp_path), "PYTHONIOENCODING": "utf-8", "FORCE_COLOR": "1"}
    plan = run_cli(["plan", "--facts", str(profile)], env).stdout
    check = run_cli(["check", "--facts", str(profile)], env).stdout
    mark = "\x1b[31m✗\x1b[0m" if "\x1b[31m✗\x1b[0m" in check else None
    assert mark is not None, check
    assert f"  {mark} SD101" in plan, plan
    plain = run_cli(["plan", "--facts", str(profile)],
                    {**clean_env(tmp_path), "PYTHONIOENCODING": "ascii"}).stdout
    assert "  x SD101" in plain and "\x1b[" not in plain


def test_verify_of_a_venv_without_torch_or_runtime_says_so_before_any_self_test(
        tmp_path: Path) -> None:
    from tests.standins import H200, add_torch, fake_nvidia_smi, make_venv

    venv = tmp_path / "app venv"
    site = make_venv(venv)
    csv = (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8")
    fake_nvidia_smi(tmp_path / "bin", "replay", csv)
    gpu = clean_env(tmp_path, tmp_path / "bin")
    done = run_cli(["verify", "--venv", str(venv)], gpu)
    assert done.returncode == 1 and f"no torch in {venv}" in done.stderr, done.stderr
    assert "module specification" not in done.stderr
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    done = run_cli(["verify", "--venv", str(venv)], gpu)
    assert done.returncode == 1, done.stderr
    assert f"the sagedoctor runtime is not installed in {venv}" in done.stderr
    assert f"run `sagedoctor install --venv '{venv}'` first" in done.stderr  # as it was named
    # Without a GPU, the same venv is what check and plan call impossible here: 2 alike.
    codes = {c: run_cli([c, "--venv", str(venv)], clean_env(tmp_path)).returncode
             for c in ("check", "plan", "verify")}
    assert codes == {"check": 2, "plan": 2, "verify": 2}


def test_post_update_of_a_never_verified_venv_without_sageattention_says_what_it_is(
        tmp_path: Path) -> None:
    from tests.standins import H200, add_dist, add_torch, fake_nvidia_smi, make_venv

    venv = tmp_path / "app venv"
    site = make_venv(venv)
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    add_dist(site, "triton", "3.6.0", {"triton/__init__.py": ""})
    csv = (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8")
    fake_nvidia_smi(tmp_path / "bin", "replay", csv)
    done = run_cli(["post-update", "--venv", str(venv)], clean_env(tmp_path, tmp_path / "bin"))
    out = done.stdout + done.stderr
    assert "this venv has no verify on record" in out, out
    assert "since the last verify" not in out
    assert "verify cannot run: the sagedoctor runtime is not installed" in out
    assert "module specification" not in out
    # No toolkit here for the build a Linux H200 needs: the repair is blocked and says so;
    # with one (the GPU machine) it would be planned as "SageAttention is not installed".
    assert "post-update: cannot repair:" in out or (
        "post-update: SageAttention is not installed in this venv; the repair:" in out)
    assert "installed build mismatched" not in out
    assert done.returncode == 1  # routing off, or nobody to confirm the repair: nothing changed
