"""The portable build's embedded Python, for real: an interpreter made to behave like
`python_embeded` (a `._pth` file beside it governs sys.path and whether `site` runs; no
pyvenv.cfg, no pip), in a copy of the portable layout. check, install (the real executor and
uv, a wheel from a local server), enable, the hook starting in that Python, uninstall: the
folder is hash-identical at the end. A `._pth` without `import site` is refused by enable with
the reason; `--launch-flag` writes a copy of run_nvidia_gpu.bat, never the original."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from sagedoctor.install.execute import Executor, installed_distributions
from sagedoctor.plan import Plan, Step
from tests.standins import (
    add_sageattention,
    borrow_host_site,
    clean_env,
    record_passing_verify,
    run_cli,
)
from tests.test_install_kit import sage_wheel, serving
from tests.test_install_steps import wheel_step

# getpath reads a ._pth beside a POSIX interpreter from Python 3.11 on (Windows only before).
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11) or sys.platform == "win32",
                                reason="an embedded-style POSIX Python needs 3.11's getpath")

FIXTURES = Path(__file__).parent / "fixtures" / "comfyui"
SHORT = f"{sys.version_info.major}.{sys.version_info.minor}"


def make_embedded(portable: Path, site: bool = True, list_site: bool = False) -> Path:
    """python_embeded/python: this machine's base interpreter behind a link, with a
    python._pth as the embeddable zip's (its stdlib lines point at this machine's stdlib);
    CPython reads `<executable>._pth` beside the executable on every platform (3.11+).
    list_site: the ._pth names the site directory itself, as a line of its own."""
    folder = portable / "python_embeded"
    for stand_in in ("python.exe", "python312._pth"):  # the recorded Windows files
        (folder / stand_in).unlink()
    python = folder / "python"
    python.symlink_to(Path(getattr(sys, "_base_executable", sys.executable)).resolve())
    stdlib = sysconfig.get_paths()["stdlib"]
    lines = ["../ComfyUI", str(Path(stdlib).with_name(f"python{SHORT.replace('.', '')}.zip")),
             stdlib, str(sysconfig.get_config_var("DESTSHARED")), "."]
    pth = folder / "python._pth"
    pth.write_text("\n".join(lines) + "\n", encoding="utf-8")
    own_site = embedded_site(python)  # asked of it, with the ._pth in place
    own_site.mkdir(parents=True)
    if list_site:
        lines.append(str(own_site.relative_to(folder)))
    lines += ["", "# Uncomment to run site.main() automatically", "#import site"]
    pth.write_text("\n".join(lines + (["import site"] if site else [])) + "\n", encoding="utf-8")
    return python


@functools.cache
def embedded_site(python: Path) -> Path:
    """The interpreter's own site directory, as it reports it (and as sagedoctor reads it):
    lib/python3.X/site-packages under a python.org build's prefix, but
    local/lib/python3.X/dist-packages under a Debian or Ubuntu system Python's."""
    done = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True,
                          env={"PATH": os.environ.get("PATH", "")}, timeout=60)
    return Path(done.stdout.strip())


def portable(tmp_path: Path, site: bool = True, list_site: bool = False
             ) -> tuple[Path, Path]:
    root = tmp_path / "Comfy ü" / "ComfyUI_windows_portable"
    shutil.copytree(FIXTURES / "portable" / "ComfyUI_windows_portable", root)
    return root, make_embedded(root, site, list_site)


def snapshot(root: Path) -> dict[str, str]:
    """Every folder, link and file under root (file contents by sha256), caches included."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = "link " + os.readlink(path)
        elif path.is_dir():
            out[key] = "dir"
        else:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def ask(python: Path, code: str, env: dict[str, str]) -> dict:
    return ask_with_stderr(python, code, env)[0]


def ask_with_stderr(python: Path, code: str, env: dict[str, str]) -> tuple[dict, str]:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_stand_in_behaves_like_python_embeded(tmp_path: Path) -> None:
    root, python = portable(tmp_path)
    facts = ask(python, "import json, sys, site, importlib.util as u; print(json.dumps("
                "{'prefix': sys.prefix, 'venv': sys.prefix != sys.base_prefix, 'path': sys.path,"
                " 'pip': u.find_spec('pip') is not None, 'no_site': sys.flags.no_site}))",
                clean_env(tmp_path))
    assert facts["prefix"] == str(python.parent) and not facts["venv"] and not facts["pip"]
    assert str(root / "ComfyUI") in facts["path"]  # the ._pth's ../ComfyUI line
    assert str(embedded_site(python)) in facts["path"] and facts["no_site"] == 0
    assert not (python.parent / "pyvenv.cfg").exists()


# An SDPA call through the module, then: did the hook's trampoline hand over to the router?
HOOKED = ("import json, sys, torch, torch.nn.functional as F; q = torch.randn(1, 2, 8, 16); "
          "F.scaled_dot_product_attention(q, q, q); r = sys.modules.get('sagedoctor_runtime'); "
          "print(json.dumps({'armed': 'sagedoctor_runtime.router' in sys.modules and "
          "F.scaled_dot_product_attention == r.get_router().patched}))")


def test_install_enable_uninstall_round_trip_leaves_the_embedded_python_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")  # the stand-in kernel runs on the CPU
    root, python = portable(tmp_path)
    borrow_host_site(embedded_site(python))  # torch, as the portable build ships it
    for entry in (embedded_site(python).parent / "borrowed from tests" / "site-packages").glob(
            "pip*"):
        entry.unlink()  # no pip: installs go through uv --python
    env = clean_env(tmp_path)
    before = snapshot(root)

    done = run_cli(["check", "--json", "--comfyui", str(root)], env)
    report = json.loads(done.stdout)
    target, comfy = report["facts"]["target"], report["facts"]["comfyui"]
    assert (target["executable"], target["is_venv"], target["pip_importable"]) == (
        str(python), False, False)
    assert (comfy["layout"], comfy["version"], comfy["pth_imports_site"]) == (
        "portable", "0.8.1", True)
    assert comfy["python"] == str(python)

    with serving() as site:  # install: the real executor, real uv, a served wheel
        step = wheel_step(site, sage_wheel(tmp_path / "wheels"))
        runtime = Step("bundle-runtime", "Runtime", "why", ("sagedoctor-runtime",))
        messages: list[str] = []
        Executor(Plan(python=str(python), prefix=str(python.parent), os="linux",
                      steps=(step, runtime)), messages.append, tmp_path / "work",
                 tmp_path / "logs", cache_dir=tmp_path / "cache", state_root=tmp_path / "state",
                 github_api="http://127.0.0.1:9").run("0.1.0")
    dists = installed_distributions(python)
    assert dists["sageattention"] == "2.2.0" and dists["sagedoctor-runtime"] == "0.1.0"
    assert "smoke check passed: cpu" in "\n".join(messages)

    # A passing verify's record, as verify writes it for the hook (no GPU here to run one).
    fingerprint = ask(python, "import json, sagedoctor_runtime.hook as h; "
                      "print(json.dumps(h.live_fingerprint()))", env)
    record_passing_verify(python.parent, fingerprint, Path(env["HOME"]), python=python)
    done = run_cli(["enable", "--comfyui", str(root)], env)
    assert done.returncode == 0, done.stderr
    assert f"Enabled: {embedded_site(python) / 'sagedoctor-runtime.pth'}" in done.stdout
    assert "ComfyUI has two ways" in done.stdout and "--use-sage-attention (not seen" \
        in done.stdout
    armed, stderr = ask_with_stderr(python, HOOKED, env)
    assert armed == {"armed": True}, stderr  # the .pth ran: site is on

    done = run_cli(["uninstall", "--comfyui", str(root), "--all", "--yes"], env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ask(python, HOOKED, env) == {"armed": False}
    assert snapshot(root) == before


def test_a_pth_without_import_site_or_site_packages_stops_the_plan(tmp_path: Path) -> None:
    root, python = portable(tmp_path, site=False)
    env = clean_env(tmp_path)
    assert ask(python, "import json, sys; print(json.dumps({'no_site': sys.flags.no_site}))",
               env) == {"no_site": 1}
    report = json.loads(run_cli(["check", "--json", "--comfyui", str(root)], env).stdout)
    assert {"SD228"} <= {f["code"] for f in report["findings"] if f["severity"] == "error"}
    plan = run_cli(["plan", "--comfyui", str(root)], env)
    assert plan.returncode != 0 and "SD228" in plan.stdout and "No plan" in plan.stdout


def test_enable_says_why_a_pth_without_import_site_cannot_run_the_hook(tmp_path: Path) -> None:
    root, python = portable(tmp_path, site=False, list_site=True)
    env = clean_env(tmp_path)
    assert ask(python, "import json, sys; print(json.dumps({'last': sys.path[-1]}))",
               env) == {"last": str(embedded_site(python))}  # listed: packages there import
    report = json.loads(run_cli(["check", "--json", "--comfyui", str(root)], env).stdout)
    codes = {f["code"] for f in report["findings"]}
    assert "SD225" in codes and "SD228" not in codes
    done = run_cli(["enable", "--comfyui", str(root)], env)
    assert done.returncode == 1  # enable refused: fixable (exit_codes)
    pth = python.parent / "python._pth"
    assert f"{pth} has no `import site` line" in done.stderr
    assert "the start-up hook cannot run here" in done.stderr
    assert f"--comfyui {shlex.quote(str(root))} --launch-flag" in done.stderr
    assert not list(python.parent.rglob("*.pth"))


def test_launch_flag_writes_a_copy_of_the_launcher_and_disable_removes_it(
        tmp_path: Path) -> None:
    root, python = portable(tmp_path)
    add_sageattention(embedded_site(python), "2.2.0", ("_fused",))
    env = clean_env(tmp_path)
    stock_text = (root / "run_nvidia_gpu.bat").read_bytes().replace(b"\n", b"\r\n")
    (root / "run_nvidia_gpu.bat").write_bytes(b"rem Ana's caf\xe9 (cp1252)\r\n" + stock_text)
    stock = (root / "run_nvidia_gpu.bat").read_bytes()
    done = run_cli(["enable", "--comfyui", str(root), "--launch-flag"], env)
    assert done.returncode == 0, done.stderr
    copy = root / "run_nvidia_gpu_sageattention.bat"
    # byte for byte the stock launcher (its code page, its CRLF), plus the flag on one line
    assert copy.read_bytes() == stock.replace(b"--enable-manager\r\n",
                                              b"--enable-manager --use-sage-attention\r\n")
    assert (root / "run_nvidia_gpu.bat").read_bytes() == stock
    assert "verify's record: none" in done.stdout
    assert "No verify has checked sageattn() in this Python" in done.stdout
    assert "--use-sage-attention (on in run_nvidia_gpu_sageattention.bat)" in done.stdout
    assert not (embedded_site(python) / "sagedoctor-runtime.pth").exists()  # the flag, no hook
    report = json.loads(run_cli(["check", "--json", "--comfyui", str(root)], env).stdout)
    assert report["facts"]["comfyui"]["sage_flag_in"] == ["run_nvidia_gpu_sageattention.bat"]

    copy.write_bytes(copy.read_bytes() + b"rem mine\r\n")
    again = run_cli(["enable", "--comfyui", str(root), "--launch-flag"], env)
    assert again.returncode == 1 and "is not what sagedoctor would write" in again.stderr
    kept = run_cli(["disable", "--comfyui", str(root)], env)
    assert kept.returncode == 0 and copy.exists()  # edited by the user: left alone
    copy.unlink()
    run_cli(["enable", "--comfyui", str(root), "--launch-flag"], env)
    done = run_cli(["disable", "--comfyui", str(root)], env)
    assert done.returncode == 0 and f"Removed {copy}" in done.stdout and not copy.exists()


def test_the_embedded_python_given_by_python_is_known_as_comfyuis(tmp_path: Path) -> None:
    root, python = portable(tmp_path)
    report = json.loads(run_cli(["check", "--json", "--python", str(python)],
                                clean_env(tmp_path)).stdout)
    comfy = report["facts"]["comfyui"]
    assert (comfy["layout"], comfy["source"], comfy["root"]) == ("portable", "--python", str(root))
    found = {f["code"]: f for f in report["findings"]}
    assert "SD134" not in found and "SD227" not in found  # the app's Python, the one inspected
    # no GPU here, so no install is offered; no fix line names the Python as a venv
    assert found["SD161"]["fix"].startswith("none here")
    assert not [(f["code"], f["fix"]) for f in report["findings"] if "--venv" in f["fix"]]
