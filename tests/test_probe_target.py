"""The target interpreter answers through itself; nothing heavy is ever imported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sagedoctor.probe.target import probe_target
from sagedoctor.probe.toolchain import probe_toolchain
from tests.standins import (
    H200,
    add_dist,
    add_sageattention,
    add_torch,
    make_venv,
    run_at_start_up,
    venv_python,
)


def test_probe_reads_files_only_in_a_path_with_spaces_and_non_ascii(tmp_path: Path) -> None:
    venv = tmp_path / "Mes Applis é" / "venv ü"
    site = make_venv(venv)
    # The stand-in torch raises if imported: the probe must read version.py as text.
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    add_dist(site, "triton-windows", "3.6.0.post25")
    add_sageattention(site, "2.2.0+cu130torch2.10.0andhigher.post6", ("_fused", "_qattn_sm89"))
    (site / "sageattention-2.2.0-py3.11-linux-x86_64.egg").mkdir()
    (site / "easy-install.pth").write_text("./sageattention-2.2.0-py3.11.egg\n", encoding="utf-8")

    facts = probe_target(venv_python(venv))

    assert facts.prefix == str(venv)
    assert facts.is_venv
    assert facts.torch is not None
    assert (facts.torch.version, facts.torch.full_version, facts.torch.cuda) == (
        "2.11.0", "2.11.0+cu130", "13.0")
    assert facts.triton is None and facts.triton_windows == "3.6.0.post25"
    assert facts.sageattention is not None
    assert facts.sageattention.compiled_modules == ("_fused", "_qattn_sm89")
    assert len(facts.sageattention.leftovers) == 2
    assert facts.site_packages_writable
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"  # the venv's own Python
    assert any(tag.startswith(f"{here}-{here}-") for tag in facts.tags)
    assert facts.invokeai is None


def test_empty_venv_reports_nothing_installed(tmp_path: Path) -> None:
    venv = tmp_path / "empty"
    make_venv(venv)
    facts = probe_target(venv_python(venv))
    assert (facts.torch, facts.sageattention, facts.triton, facts.pip) == (None, None, None, None)
    assert facts.tags, "wheel tags must come from our packaging when the venv has none"


def test_toolchain_from_cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "cuda 12.8"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n",
                    encoding="utf-8")
    nvcc.chmod(0o755)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("", encoding="utf-8")  # a full toolkit
    monkeypatch.setenv("CUDA_HOME", str(home))
    facts = probe_toolchain("linux")
    assert (facts.cuda_home, facts.nvcc_version) == (str(home), "12.8.93")


NOISY_SITECUSTOMIZE = (
    "import atexit, sys\n"
    "sys.stdout.write('hello from sitecustomize, no newline {\"json\": 1}')\n"
    "sys.stdout.flush()\n"
    "atexit.register(lambda: print('\\nbye from sitecustomize'))\n"
)


def test_a_sitecustomize_that_prints_does_not_stop_the_probe(tmp_path: Path) -> None:
    venv = tmp_path / "noisy venv é"
    site = make_venv(venv)
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    run_at_start_up(site, NOISY_SITECUSTOMIZE)
    (site / "zz-noise.pth").write_text("import sys; print('a .pth line prints too')\n",
                                       encoding="utf-8")

    facts = probe_target(venv_python(venv))

    assert facts.prefix == str(venv)
    assert facts.torch is not None and facts.torch.full_version == "2.11.0+cu130"


def test_the_install_steps_read_a_noisy_venv_too(tmp_path: Path) -> None:
    from sagedoctor.install.execute import installed_distributions
    from sagedoctor.install.transaction import target_state

    venv = tmp_path / "noisy"
    site = make_venv(venv)
    add_dist(site, "triton", "3.2.0")
    run_at_start_up(site, NOISY_SITECUSTOMIZE)

    assert installed_distributions(venv_python(venv))["triton"] == "3.2.0"
    state = target_state(venv_python(venv), ["triton"])
    assert [e["version"] for e in state["dists"]["triton"]] == ["3.2.0"]


def test_an_interpreter_that_never_answers_says_what_it_printed(tmp_path: Path) -> None:
    from sagedoctor.errors import TargetError

    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\ncat > /dev/null\necho 'Welcome to Python!'\n", encoding="utf-8")
    fake.chmod(0o755)
    with pytest.raises(TargetError) as caught:
        probe_target(fake)
    assert "gave no answer" in caught.value.message
    assert "Welcome to Python!" in caught.value.message


# A start-up that leaves a child holding the interpreter's stdout (a daemon started by a .pth
# line, a sitecustomize that spawns a helper): the child lives on after the answer.
HOLDS_STDOUT = ("import subprocess; subprocess.Popen(['sleep', '30'], "
                "stdin=subprocess.DEVNULL)\n")


def test_a_child_left_holding_stdout_does_not_hold_up_the_answer(tmp_path: Path) -> None:
    """D23 (issue 34): every command waited the probe's 20 s, then said the interpreter "did
    not answer" though it had: reading stops at the framed answer once it has exited."""
    import time

    from tests.standins import clean_env, run_cli

    venv = tmp_path / "venv"
    site = make_venv(venv)
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    (site / "zz-helper.pth").write_text(HOLDS_STDOUT, encoding="utf-8")
    env = clean_env(tmp_path)
    began = time.monotonic()
    done = run_cli(["check", "python", "--json", "--venv", str(venv)], env)
    took = time.monotonic() - began
    assert "did not answer" not in done.stdout + done.stderr, done.stdout
    assert '"SD190"' not in done.stdout, done.stdout
    assert took < 15, took  # not after SAGEDOCTOR_TARGET_TIMEOUT's 20 s
    # the install steps' own questions to the target too
    from sagedoctor.install.execute import installed_distributions

    began = time.monotonic()
    assert installed_distributions(venv_python(venv))["torch"] == "2.11.0"
    assert time.monotonic() - began < 15
