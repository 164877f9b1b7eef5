"""The fault suite, with figures: every parser of outside data fuzzed, and faults injected into
each install step of a real venv, proven harmless by hashes.

1. Parsers: runs tests/test_fuzz_*.py (hypothesis, bounded and derandomized) and prints, per
   parser, the inputs tried and what became of them: parsed, or refused with which code.
2. Install steps: a real venv (it sees this machine's CPU torch; run `bash scripts/test.sh`
   once first) holding sageattention 2.1.1, installed by uv so its RECORD has hashes. Each
   fault is injected at the process boundary (a local HTTP server that misbehaves, a stand-in
   build that fails or hangs, a folder or an immutable file where uv must write, a wrong
   kernel, a signal, a FIFO where invokeai.yaml should be) into the real executor. After each:
   the venv is intact when every RECORD hash matches and every file under site-packages has
   the sha256 it had before; a file lost is one that was there before and is gone.

Exit status 1 when a fuzz test fails, a fault ends in anything but our error, a venv is not
intact or a file is lost. No GPU needed; about two minutes on two cores.

    python benchmarks/faults.py [--skip-fuzz]
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sagedoctor.errors import SagedoctorError  # noqa: E402
from sagedoctor.install.execute import Executor  # noqa: E402
from sagedoctor.install.runner import Installer  # noqa: E402
from sagedoctor.resolve import Step  # noqa: E402
from tests.test_install_kit import (  # noqa: E402
    SAGE_GARBAGE,
    Site,
    fake_source,
    make_wheel,
    plan,
    sage_wheel,
    serving,
    torch_venv,
    tree_hashes,
)
from tests.test_install_steps import wheel_step  # noqa: E402
from tests.test_transaction import build_pids, build_step, start  # noqa: E402

# --- 1. the parsers ------------------------------------------------------------------------


def fuzz_figures(tally: Path) -> tuple[bool, dict[str, dict[str, int]], float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_fuzz_*.py"))],
        cwd=ROOT, env={**os.environ, "SAGEDOCTOR_FUZZ_TALLY": str(tally)},
        capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
    data = json.loads(tally.read_text(encoding="utf-8")) if tally.is_file() else {}
    return done.returncode == 0, data, seconds


def print_fuzz(data: dict[str, dict[str, int]], ok: bool, seconds: float) -> None:
    tried = sum(sum(counts.values()) for counts in data.values())
    print(f"parsers fuzzed: {len(data)}, inputs tried: {tried}, fuzz tests "
          f"{'passed' if ok else 'FAILED'} in {seconds:.0f} s")
    print(f"  {'parser':42} {'tried':>6}  outcomes (parsed, a result, or refused with a code)")
    for parser, counts in sorted(data.items()):
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(),
                                                          key=lambda kv: -kv[1]))
        print(f"  {parser:42} {sum(counts.values()):6}  {outcomes}")


# --- 2. the install steps ------------------------------------------------------------------

def record_problems(site: Path) -> tuple[int, list[str]]:
    """(files checked, problems): every file a RECORD lists with a hash, against that hash."""
    checked, problems = 0, []
    for record in sorted(site.glob("*.dist-info/RECORD")):
        with record.open(encoding="utf-8", newline="") as handle:
            for row in csv.reader(handle):
                if len(row) < 2 or not row[1].startswith("sha256="):
                    continue
                path = site / row[0]
                checked += 1
                try:
                    digest = hashlib.sha256(path.read_bytes()).digest()
                except OSError:
                    problems.append(f"{row[0]}: missing")
                    continue
                if "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != row[1]:
                    problems.append(f"{row[0]}: hash differs from its RECORD")
    return checked, problems


@dataclass
class Venv:
    python: Path
    site: Path
    root: Path
    server: Site
    count: int = 0

    def folder(self) -> Path:
        self.count += 1
        path = self.root / f"fault {self.count}"
        path.mkdir()
        return path

    def executor(self, folder: Path, *steps: Step, progress: Callable[[str], None] | None = None,
                 **options: Any) -> Executor:
        options.setdefault("github_api", "http://127.0.0.1:9")  # nothing listens: no digest
        return Executor(plan(self.python, *steps), progress or (lambda _m: None),
                        folder / "work", folder / "logs", cache_dir=folder / "cache",
                        state_root=folder / "state", **options)


@dataclass
class Result:
    step: str
    fault: str
    outcome: str
    intact: bool
    lost: int
    changed: int
    seconds: float
    note: str = ""


def good_wheel(venv: Venv, folder: Path, **kw: Any) -> Step:
    return wheel_step(venv.server, sage_wheel(folder / "wheel", **kw))


# Each fault: (step, name, inject) where inject runs the executor and raises what it raised.
def server_gone(venv: Venv, folder: Path) -> None:
    wheel = sage_wheel(folder / "wheel")
    step = wheel_step(venv.server, wheel)
    venv.server.routes[f"/dl/{wheel.name}"] = ("drop", wheel.read_bytes()[:100])
    venv.executor(folder, step).run("0.1.0")


def digest_mismatch(venv: Venv, folder: Path) -> None:
    step = wheel_step(venv.server, sage_wheel(folder / "wheel"), sha256="0" * 64)
    venv.executor(folder, step).run("0.1.0")


def redirect_elsewhere(venv: Venv, folder: Path) -> None:
    wheel = sage_wheel(folder / "wheel")
    step = wheel_step(venv.server, wheel)
    other = venv.server.url(f"/dl/{wheel.name}").replace("127.0.0.1", "localhost")
    venv.server.routes[f"/dl/{wheel.name}"] = ("redirect", other)
    venv.executor(folder, step).run("0.1.0")


def record_lies(venv: Venv, folder: Path) -> None:
    venv.executor(folder, good_wheel(venv, folder, lie_about="sageattention/core.py")
                  ).run("0.1.0")


def zip_escape(venv: Venv, folder: Path) -> None:
    wheel = make_wheel(folder / "wheel", "sageattention", "2.2.0",
                       {"sageattention/__init__.py": ""}, extra={"../../escape.py": "x"})
    venv.executor(folder, wheel_step(venv.server, wheel)).run("0.1.0")


def compiler_fails(venv: Venv, folder: Path) -> None:
    venv.executor(folder, build_step(fake_source(folder / "src", fail=True))).run("0.1.0")


def uv_fails_half_way(venv: Venv, folder: Path) -> None:
    source = fake_source(folder / "src")
    (source / "sageattention" / "extra.py").write_text("NEW = 1\n", encoding="utf-8")
    blocker = venv.site / "sageattention" / "extra.py"  # a folder where uv writes a file
    blocker.mkdir()
    try:
        venv.executor(folder, build_step(source)).run("0.1.0")
    finally:
        blocker.rmdir()


def immutable_file(venv: Venv, folder: Path) -> None:
    target = venv.site / "sageattention" / "core.py"
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        raise Unavailable("chattr +i is not allowed here")
    try:
        venv.executor(folder, good_wheel(venv, folder)).run("0.1.0")
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


def wrong_kernel(venv: Venv, folder: Path) -> None:
    venv.executor(folder, good_wheel(venv, folder, kernel=SAGE_GARBAGE)).run("0.1.0")


def cancel_at_smoke(venv: Venv, folder: Path) -> None:
    class InstallCancelled(SagedoctorError):  # what the TUI raises when the user cancels
        code = "SD910"

    def progress(message: str) -> None:
        if message.startswith("smoke check:"):
            raise InstallCancelled("cancelled by the user", "")

    venv.executor(folder, good_wheel(venv, folder), progress=progress).run("0.1.0")


def config_is_a_fifo(venv: Venv, folder: Path) -> None:
    config = folder / "root" / "invokeai.yaml"
    config.parent.mkdir()
    os.mkfifo(config)
    enable = Step("enable-invokeai", "Enable", "why", paths=(str(config),),
                  config=(("attention_backend", "sage"),))
    venv.executor(folder, good_wheel(venv, folder), enable).run("0.1.0")


class Unavailable(Exception):
    """This machine cannot inject the fault (not counted)."""


class SignalOutcome(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _driver_code(out: str) -> str:
    for line in out.splitlines():
        if line.startswith("ERROR "):
            parts = line.split()
            return parts[2] if len(parts) > 2 else "ERROR"
    return "DONE" if "DONE" in out else "no answer"


def sigterm_mid_build(venv: Venv, folder: Path) -> None:
    proc = start(venv.python, fake_source(folder / "src", slow=True), folder)
    build_pids(folder)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    raise SignalOutcome(_driver_code(out))


def sigkill_then_recover(venv: Venv, folder: Path, mid: str) -> None:
    if mid == "build":
        proc = start(venv.python, fake_source(folder / "src", slow=True), folder)
        build_pids(folder)
    else:
        (folder / "hang").write_text("", encoding="utf-8")  # the new sageattn() hangs
        proc = start(venv.python, fake_source(folder / "src"), folder)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("smoke check:"):
                break
    proc.kill()
    proc.communicate(timeout=30)
    (folder / "hang").unlink(missing_ok=True)
    again = start(venv.python, fake_source(folder / "src2"), folder)
    out, _ = again.communicate(timeout=120)
    raise SignalOutcome("killed; next run: " + _driver_code(out))


FAULTS: list[tuple[str, str, Callable[[Venv, Path], None]]] = [
    ("download", "server gone mid-download", server_gone),
    ("download", "digest mismatch", digest_mismatch),
    ("download", "redirect to another host", redirect_elsewhere),
    ("wheel check", "a RECORD that lies", record_lies),
    ("wheel check", "a zip entry escaping the venv", zip_escape),
    ("source build", "compiler fails", compiler_fails),
    ("source build", "SIGTERM mid-build", sigterm_mid_build),
    ("source build", "SIGKILL mid-build", lambda v, f: sigkill_then_recover(v, f, "build")),
    ("uv install", "a folder where uv writes a file", uv_fails_half_way),
    ("uv install", "an immutable file (chattr +i)", immutable_file),
    ("uv install", "SIGKILL mid-change", lambda v, f: sigkill_then_recover(v, f, "change")),
    ("smoke check", "a kernel that returns garbage", wrong_kernel),
    ("smoke check", "cancelled from the progress callback", cancel_at_smoke),
    ("enable-invokeai", "a FIFO where invokeai.yaml should be", config_is_a_fifo),
]


def inject(venv: Venv, step: str, name: str, fault: Callable[[Venv, Path], None]) -> Result:
    tree_before = tree_hashes(venv.site)
    started = time.perf_counter()
    note = ""
    try:
        fault(venv, venv.folder())
        outcome = "no error (the fault went unnoticed)"
    except SagedoctorError as exc:
        outcome = exc.code
        note = exc.message[:90]
    except SignalOutcome as exc:
        outcome = exc.code
    except Unavailable as exc:
        return Result(step, name, "not injectable", True, 0, 0, 0.0, str(exc))
    except Exception as exc:  # a crash: the suite fails
        outcome = f"CRASH {type(exc).__name__}"
        note = str(exc)[:90]
    seconds = time.perf_counter() - started
    tree_after = tree_hashes(venv.site)
    _checked, problems = record_problems(venv.site)
    lost = len(set(tree_before) - set(tree_after))
    changed = sum(1 for k, v in tree_before.items() if tree_after.get(k, v) != v)
    added = len(set(tree_after) - set(tree_before))
    intact = not problems and tree_after == tree_before
    if problems or added:
        note = "; ".join(problems[:3]) + (f"; {added} file(s) added" if added else "")
    return Result(step, name, outcome, intact, lost, changed, seconds, note)


def run_faults(root: Path) -> list[Result]:
    os.environ["SAGEDOCTOR_SMOKE_DEVICE"] = "cpu"
    os.environ.setdefault("TMPDIR", str(root))
    with serving() as server:
        python, site = torch_venv(root / "venv ü")
        old = make_wheel(root / "old", "sageattention", "2.1.1",
                         {"sageattention/__init__.py": "def sageattn(*a, **k): pass\n",
                          "sageattention/core.py": "OLD = True\n"})
        Installer.for_target(python, root / "uv-cache").install([str(old)])
        venv = Venv(python, site, root, server)
        checked, problems = record_problems(site)
        assert checked and not problems, problems
        print(f"\nvenv: {site} ({len(tree_hashes(site))} files; {checked} RECORD hashes)")
        return [inject(venv, step, name, fault) for step, name, fault in FAULTS]


def print_faults(results: list[Result]) -> None:
    steps: dict[str, int] = {}
    for r in results:
        if r.outcome != "not injectable":
            steps[r.step] = steps.get(r.step, 0) + 1
    print("faults injected per install step: "
          + ", ".join(f"{step} {count}" for step, count in steps.items()))
    print(f"  {'step':15} {'fault':38} {'outcome':28} {'intact':6} {'lost':>4} {'s':>5}")
    for r in results:
        print(f"  {r.step:15} {r.fault:38} {r.outcome:28} {'yes' if r.intact else 'NO':6} "
              f"{r.lost:4} {r.seconds:5.1f}" + (f"  ({r.note})" if r.note else ""))
    counted = [r for r in results if r.outcome != "not injectable"]
    print(f"venvs intact: {sum(r.intact for r in counted)}/{len(counted)}; "
          f"files lost: {sum(r.lost for r in counted)}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-fuzz", action="store_true", help="only the install faults")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="faults ü ") as tmp:
        root = Path(tmp)
        if not args.skip_fuzz:
            ok, data, seconds = fuzz_figures(root / "tally.json")
            print_fuzz(data, ok, seconds)
            failed |= not ok or not data
        results = run_faults(root)
        print_faults(results)
    bad = [r for r in results if r.outcome != "not injectable"
           and (not r.intact or r.lost or not r.outcome.startswith(("SD", "killed; next run: SD")))]
    for r in bad:
        print(f"FAILED: {r.step}: {r.fault}: {r.outcome}, intact={r.intact}, lost={r.lost}")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
