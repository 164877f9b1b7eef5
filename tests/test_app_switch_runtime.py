"""One router at a time: with an app's own SageAttention switch on (InvokeAI's
attention_backend: sage, ComfyUI's --use-sage-attention, DIFFUSERS_ATTN_BACKEND=sage*), the
start-up hook stands aside and says so once, so the app's router is the only one.

A real venv with the bundled runtime, the real CPU torch and a passing verify record; the
stand-in InvokeAI is a real package in it whose scope rebinds SDPA at start, as InvokeAI's
does (facts/apps.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sagedoctor.install.bundle import build_runtime_wheel
from sagedoctor.install.runner import Installer
from sagedoctor.runtime.app_switch import app_switch_on, configured_backend
from tests.standins import (
    add_dist,
    borrow_host_site,
    clean_env,
    make_venv,
    record_passing_verify,
    run_cli,
    venv_python,
)

SCOPE = '''\
import torch.nn.functional as F

def install():
    """What InvokeAI's attention_backend: sage does at start: rebind SDPA once."""
    original = F.scaled_dot_product_attention
    def invokeai_sage_scope(*args, **kwargs):
        return original(*args, **kwargs)
    invokeai_sage_scope.original = original
    F.scaled_dot_product_attention = invokeai_sage_scope
'''

APP = r"""
import json, sys
import torch
import torch.nn.functional as F
import invokeai.scope
invokeai.scope.install()  # the app rebinds SDPA at start
q = k = v = torch.randn(1, 2, 8, 16)
F.scaled_dot_product_attention(q, k, v)
F.scaled_dot_product_attention(q, k, v)
wrapper = F.scaled_dot_product_attention
inner = getattr(wrapper, "original", None)
print(json.dumps({
    "outer": wrapper.__name__,
    "inner_is_torch": inner is torch._C._nn.scaled_dot_product_attention,
    "inner_module": getattr(inner, "__module__", None),
    "router_loaded": "sagedoctor_runtime.router" in sys.modules,
}))
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("app")
    root = tmp / "Invoke root é"
    site = make_venv(root / ".venv")
    borrow_host_site(site)
    add_dist(site, "invokeai", "6.20.0", {"invokeai/__init__.py": "",
                                           "invokeai/scope.py": SCOPE,
                                           "invokeai/app/__init__.py": "",
                                           "invokeai/app/run_app.py": APP})
    python = venv_python(root / ".venv")
    # InvokeAI's console script, as the launcher starts it (argv[0] is this file)
    (python.parent / "invokeai-web").write_text(
        "import runpy\nrunpy.run_module('invokeai.app.run_app', run_name='__main__')\n",
        encoding="utf-8")
    Installer.for_target(python).install([str(build_runtime_wheel(tmp / "w", "0.1.0"))])
    env = clean_env(tmp)
    done = subprocess.run([str(python), "-c", "import json, sagedoctor_runtime.hook as h; "
                           "print(json.dumps(h.live_fingerprint()))"],
                          capture_output=True, text=True, env=env, check=True)
    record_passing_verify(root / ".venv", json.loads(done.stdout), Path(env["HOME"]))
    enabled = run_cli(["enable", "--python", str(python)], env)
    assert enabled.returncode == 0, enabled.stderr
    return python, env


def run(python: Path, env: dict[str, str], yaml: str | None, *args: str,
        how: str = "script") -> tuple[dict, list]:
    """The app in the venv: as InvokeAI's `invokeai-web` ("entry"), as `-m invokeai.app.run_app`
    ("module"), or as a plain script of the same venv (`-c`)."""
    config = python.parents[2] / "invokeai.yaml"
    if yaml is None:
        config.unlink(missing_ok=True)
    else:
        config.write_text(yaml, encoding="utf-8")
    start = {"entry": [str(python), str(python.parent / "invokeai-web")],
             "module": [str(python), "-m", "invokeai.app.run_app"],
             "script": [str(python), "-c", APP]}[how]
    done = subprocess.run([*start, *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("sagedoctor: ")]
    return json.loads(done.stdout), ours


def test_without_the_app_switch_the_hook_arms_underneath(app: tuple[Path, dict]) -> None:
    # The contrast: what two routers look like (the app's wraps sagedoctor's trampoline).
    python, env = app
    info, ours = run(python, env, "schema_version: 4.0.3\nattention_backend: auto\n",
                     how="entry")
    # sagedoctor's router took the function over at the first call, the app's scope inside
    # or outside it: two routers on one function.
    assert info["router_loaded"] and ours == []
    assert (info["outer"], info["inner_is_torch"]) != ("invokeai_sage_scope", True)


@pytest.mark.parametrize("how", ["entry", "module"])
def test_invokeai_switch_on_means_one_router_said_once(app: tuple[Path, dict],
                                                        how: str) -> None:
    python, env = app
    info, ours = run(python, env, "# Internal metadata\nschema_version: 4.0.3\n\n"
                     "attention_backend: 'sage'   # set by hand\n", how=how)
    assert info == {"outer": "invokeai_sage_scope", "inner_is_torch": True,
                    "inner_module": info["inner_module"], "router_loaded": False}
    config = python.parents[2] / "invokeai.yaml"
    assert ours == [f"sagedoctor: InvokeAI's attention_backend: sage ({config}) is on, so "
                    "sagedoctor's start-up hook stands aside (one router at a time; "
                    "`sagedoctor check` shows the pair)"]


@pytest.mark.parametrize(("extra_env", "args", "said"), [
    ({}, ("--use-sage-attention",), "ComfyUI's --use-sage-attention"),
    ({"DIFFUSERS_ATTN_BACKEND": "_sage_qk_int8_pv_fp16_cuda"}, (),
     "diffusers' DIFFUSERS_ATTN_BACKEND=_sage_qk_int8_pv_fp16_cuda")])
def test_comfyui_flag_and_diffusers_backend_also_stand_the_hook_aside(
        app: tuple[Path, dict], extra_env: dict[str, str], args: tuple[str, ...],
        said: str) -> None:
    python, env = app
    info, ours = run(python, {**env, **extra_env}, None, *args)
    assert info["inner_is_torch"] and not info["router_loaded"]
    assert len(ours) == 1 and ours[0].startswith(f"sagedoctor: {said} is on")


def test_configured_backend_reads_only_top_level_keys_of_a_regular_file(
        tmp_path: Path) -> None:
    config = tmp_path / "invokeai.yaml"
    config.write_bytes(b"\xef\xbb\xbfnested:\n  attention_backend: sage\n"
                       b"attention_backend: \"sage\"  # on\nattention_backend: auto\n")
    assert configured_backend(str(config)) == "auto"  # the last one, as PyYAML keeps it
    config.write_bytes(b"attention_backend: sage\r\n\xff\xfe junk\n")
    assert configured_backend(str(config)) == "sage"
    assert configured_backend(str(tmp_path)) is None  # a folder
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert configured_backend(str(fifo)) is None  # not opened: it would block
    assert configured_backend(str(tmp_path / "missing.yaml")) is None


def test_a_script_of_the_invokeai_venv_keeps_the_hook(app: tuple[Path, dict]) -> None:
    # Not InvokeAI: no scope of InvokeAI's rebinds SDPA here, whatever its yaml says.
    python, env = app
    info, ours = run(python, env, "attention_backend: sage\n", how="script")
    assert info["router_loaded"] and ours == []


def test_invokeai_config_option_names_the_file_it_reads(app: tuple[Path, dict],
                                                         tmp_path: Path) -> None:
    python, env = app
    root = python.parents[2]
    other = tmp_path / "my settings.yaml"
    other.write_text("attention_backend: sage\n", encoding="utf-8")
    # the root's file says auto; the --config file InvokeAI reads says sage: aside
    info, ours = run(python, env, "attention_backend: auto\n", "--config", str(other),
                     how="entry")
    assert not info["router_loaded"]
    assert ours == [f"sagedoctor: InvokeAI's attention_backend: sage ({other}) is on, so "
                    "sagedoctor's start-up hook stands aside (one router at a time; "
                    "`sagedoctor check` shows the pair)"]
    # the other way round: the root's file says sage, the --config one auto: the hook routes
    other.write_text("attention_backend: auto\n", encoding="utf-8")
    info, ours = run(python, env, "attention_backend: sage\n", f"--config={other}",
                     how="module")
    assert info["router_loaded"] and ours == []
    # a relative --config is the root's (InvokeAI reads root / --config)
    (root / "alt.yaml").write_text("attention_backend: sage\n", encoding="utf-8")
    try:
        info, ours = run(python, env, "attention_backend: auto\n", "--config", "alt.yaml",
                         how="entry")
    finally:
        (root / "alt.yaml").unlink()
    assert not info["router_loaded"] and f"({root / 'alt.yaml'})" in ours[0]
    # INVOKEAI_ATTENTION_BACKEND beats the file, as pydantic-settings has it in InvokeAI
    info, ours = run(python, {**env, "INVOKEAI_ATTENTION_BACKEND": "sage"},
                     "attention_backend: auto\n", how="entry")
    assert not info["router_loaded"]
    assert "(INVOKEAI_ATTENTION_BACKEND in the environment)" in ours[0]


@pytest.mark.parametrize(("argv", "orig_argv", "runs"), [
    (["/r/.venv/bin/invokeai-web", "--root", "/r"], ["/r/.venv/bin/python", "x"], True),
    (["C:\\r\\.venv\\Scripts\\invokeai-web.exe"], [], True),
    (["C:\\r\\.venv\\Scripts\\invokeai-web-script.py"], [], True),
    (["/pkg/invokeai/app/run_app.py"], ["py", "-X", "utf8", "-m", "invokeai.app.run_app"], True),
    (["/pkg/invokeai/app/run_app.py"], ["py", "-minvokeai.app.run_app"], True),
    (["/pkg/invokeai/app/run_app.py"], [], True),  # no orig_argv (Python 3.9): the file says it
    (["/home/u/invokeai/gen.py"], ["py", "/home/u/invokeai/gen.py"], False),  # the root's folder
    (["-c"], ["py", "-c", "code", "-m", "invokeai"], False),  # after -c: the script's own args
    (["/r/.venv/bin/invokeai-model-install"], [], False),
    (["/usr/bin/jupyter-lab"], ["py", "-m", "jupyterlab"], False),
    ([], [], False)])
def test_only_invokeais_own_process_counts(argv: list[str], orig_argv: list[str],
                                           runs: bool) -> None:
    from sagedoctor.runtime.app_switch import runs_invokeai

    assert runs_invokeai(argv, orig_argv, ["/pkg/invokeai"]) is runs


def test_the_root_is_found_as_invokeai_finds_it(tmp_path: Path) -> None:
    root = tmp_path / "elsewhere"
    root.mkdir()
    (root / "invokeai.yaml").write_text("attention_backend: sage\n", encoding="utf-8")
    prefix = str(tmp_path / "venv-without-config" / ".venv")
    home = str(tmp_path / "home")
    # app_switch_on looks for the invokeai package in this (the test's) interpreter: where it
    # is absent, no InvokeAI scope can be on whatever a yaml says.
    import importlib.util

    if importlib.util.find_spec("invokeai") is not None:
        pytest.skip("the test interpreter has an invokeai package")
    assert app_switch_on(["x", "--root", str(root)], {}, prefix, home) is None
    assert app_switch_on(["x"], {"DIFFUSERS_ATTN_BACKEND": "native"}, prefix, home) is None
    assert app_switch_on(["x"], {"DIFFUSERS_ATTN_BACKEND": "sage_hub"}, prefix, home) == \
        "diffusers' DIFFUSERS_ATTN_BACKEND=sage_hub"


def test_enable_says_the_hook_stands_aside_while_invokeais_switch_is_on(
        app: tuple[Path, dict]) -> None:
    python, env = app
    config = python.parents[2] / "invokeai.yaml"
    config.write_text("attention_backend: sage\n", encoding="utf-8")
    done = run_cli(["enable", "--python", str(python)], env)
    assert done.returncode == 0, done.stderr
    assert (f"Note: {config} sets attention_backend: sage, InvokeAI's own switch: the hook "
            "stands aside while it does") in done.stdout
    config.write_text("attention_backend: auto\n", encoding="utf-8")
    again = run_cli(["enable", "--python", str(python)], env)
    assert again.returncode == 0 and "Note:" not in again.stdout
