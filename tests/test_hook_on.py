"""One answer to "is the start-up hook on?" (issue 33): hook.hook_on for a probed target and
state.hook_on for a venv folder agree, on the cases where the two used to differ."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from sagedoctor import hook, state
from sagedoctor.facts import TargetFacts
from sagedoctor.runtime.files import HOOK_FILE


def target(prefix: Path, site: Path) -> TargetFacts:
    return TargetFacts(
        executable=str(prefix / "bin" / "python"), python_version="3.12.3",
        implementation="cpython", tags=(), is_venv=True, prefix=str(prefix),
        base_prefix="/usr", site_packages=str(site), site_packages_writable=True,
        include_dir="/usr/include", has_python_h=True, libs_dir=None, has_python_lib=None,
        torch=None, triton=None, triton_windows=None, sageattention=None, invokeai=None,
        pip=None, uv=None)


@pytest.fixture
def venv(tmp_path: Path) -> tuple[Path, Path]:
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    return prefix, site


def both(prefix: Path, facts: TargetFacts) -> tuple[bool, bool]:
    return hook.hook_on(facts), state.hook_on(prefix, Path(facts.site_packages))


def test_a_hook_file_is_on_and_none_is_off(venv: tuple[Path, Path]) -> None:
    prefix, site = venv
    assert both(prefix, target(prefix, site)) == (False, False)
    (site / HOOK_FILE).write_text("import sagedoctor_runtime.start\n", encoding="utf-8")
    assert both(prefix, target(prefix, site)) == (True, True)
    assert state.hook_on(prefix)  # the venv folder alone says the same


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_something_at_the_hook_path_that_is_no_file_is_off(venv: tuple[Path, Path],
                                                           kind: str) -> None:
    # every Python skips it (check's SD136 says the hook is off); hook.hook_on said on
    prefix, site = venv
    if kind == "folder":
        (site / HOOK_FILE).mkdir()
    else:
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(site / HOOK_FILE)
    assert both(prefix, target(prefix, site)) == (False, False)


def test_a_hook_in_a_site_packages_outside_the_venv_patterns_is_on(tmp_path: Path) -> None:
    # a base or conda Python: its site-packages is where the probe found it (the venv
    # patterns alone said off)
    prefix = tmp_path / "conda"
    site = prefix / "python-site"
    site.mkdir(parents=True)
    (site / HOOK_FILE).write_text("import sagedoctor_runtime.start\n", encoding="utf-8")
    facts = replace(target(prefix, site), is_venv=False)
    assert both(prefix, facts) == (True, True)
    assert not state.hook_on(prefix)  # without the probed site-packages nothing says where
