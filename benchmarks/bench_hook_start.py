"""What the start-up hook adds to interpreter start, side by side in one run.

Two real venvs, identical but for the hook's .pth line (what `sagedoctor enable` writes):
both hold the bundled runtime; `python -c pass` is started in each, alternately, many times
(the order flips every round, so drift and cache state hit both alike). The added time is the
median of the paired differences. Target: <= 1 ms and <= 5 % of the plain start.

With --torch (this interpreter's torch is put on both venvs' path by a .pth line) it also
times `import torch.nn.functional`, where the hook compares the stat fingerprint of a matching
verify record and arms the trampoline: the cost an app pays once per start.

With --setuptools both venvs also get setuptools' start-up line (distutils-precedence.pth and
_distutils_hack, copied from this interpreter), as app venvs on Python >= 3.12 have it (torch
requires setuptools there): its import pays for the first look into site-packages, which in a
bare venv the hook pays. The PASS line judges the bare venvs.

    python benchmarks/bench_hook_start.py [--runs 200] [--torch] [--setuptools]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sagedoctor.hook import HOOK_LINE  # noqa: E402
from sagedoctor.install.bundle import build_runtime_wheel  # noqa: E402
from sagedoctor.install.runner import Installer  # noqa: E402
from sagedoctor.runtime.files import HOOK_FILE  # noqa: E402


def make_venv(path: Path, wheel: Path, torch_path: str | None,
              setuptools: bool = False) -> tuple[Path, Path]:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    Installer.for_target(python).install([str(wheel)])
    site = next(path.glob("lib/python3*/site-packages"))
    if setuptools:
        here = Path(sysconfig.get_paths()["purelib"])
        shutil.copy2(here / "distutils-precedence.pth", site)
        shutil.copytree(here / "_distutils_hack", site / "_distutils_hack")
    if torch_path:
        (site / "zz-torch.pth").write_text(torch_path + "\n", encoding="utf-8")
    # Bytecode as pip (and the InvokeAI launcher's --compile-bytecode) leave it; without it
    # each start would compile the hook again where PYTHONDONTWRITEBYTECODE is set.
    subprocess.run([str(python), "-m", "compileall", "-q", str(site)], check=True)
    return python, site


def start_s(python: Path, code: str) -> float:
    started = time.perf_counter()
    subprocess.run([str(python), "-c", code], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def paired(plain: Path, hooked: Path, code: str, runs: int) -> tuple[float, float, float]:
    """(median plain s, median hooked s, median of the paired differences s)."""
    for _ in range(3):  # warm the file cache for both
        start_s(plain, code)
        start_s(hooked, code)
    a, b, diff = [], [], []
    for i in range(runs):
        if i % 2:
            y, x = start_s(hooked, code), start_s(plain, code)
        else:
            x, y = start_s(plain, code), start_s(hooked, code)
        a.append(x)
        b.append(y)
        diff.append(y - x)
    return statistics.median(a), statistics.median(b), statistics.median(diff)


def write_matching_record(python: Path) -> None:
    """A routing verify record whose fingerprint is the venv's own: the hook arms."""
    live = subprocess.run([str(python), "-c", "import json, sagedoctor_runtime.hook as h; "
                           "print(json.dumps(h.live_fingerprint()))"], check=True,
                          capture_output=True, text=True).stdout
    folder = python.parent.parent / "sagedoctor"
    folder.mkdir(exist_ok=True)
    (folder / "verified.json").write_text(json.dumps(
        {"schema_version": 1, "verdict": "routing", "fingerprint": json.loads(live)}),
        encoding="utf-8")


def report(label: str, plain: float, hooked: float, added: float) -> bool:
    share = added / plain
    print(f"{label}: plain {plain * 1e3:7.2f} ms, with hook {hooked * 1e3:7.2f} ms, "
          f"added {added * 1e3:+.3f} ms ({share * 100:+.2f} %)")
    return added <= 1e-3 and share <= 0.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--torch", action="store_true",
                        help="also time `import torch.nn.functional` (needs torch here)")
    parser.add_argument("--setuptools", action="store_true",
                        help="also time venvs with setuptools' start-up line, as app venvs")
    args = parser.parse_args()
    here = Path(sysconfig.get_paths()["purelib"])
    if args.setuptools and not (here / "distutils-precedence.pth").is_file():
        sys.exit(f"no setuptools start-up line in {here}")
    torch_path = sysconfig.get_paths()["purelib"] if args.torch else None
    with tempfile.TemporaryDirectory(prefix="bench-hook ") as tmp:
        wheel = build_runtime_wheel(Path(tmp) / "wheel", "0.1.0")
        plain, _ = make_venv(Path(tmp) / "plain", wheel, torch_path)
        hooked, site = make_venv(Path(tmp) / "hooked", wheel, torch_path)
        (site / HOOK_FILE).write_text(HOOK_LINE, encoding="utf-8")
        print(f"{args.runs} paired starts, Python {sys.version.split()[0]}, "
              "target <= 1 ms and <= 5 % added")
        ok = report("python -c pass          ", *paired(plain, hooked, "pass", args.runs))
        if args.setuptools:
            app_plain, _ = make_venv(Path(tmp) / "app plain", wheel, None, setuptools=True)
            app_hooked, app_site = make_venv(Path(tmp) / "app hooked", wheel, None,
                                             setuptools=True)
            (app_site / HOOK_FILE).write_text(HOOK_LINE, encoding="utf-8")
            report("  with setuptools' .pth ", *paired(app_plain, app_hooked, "pass",
                                                      args.runs))
        if args.torch:
            write_matching_record(hooked)
            # the hooked venv must really arm, the plain one must not
            code = ("import sys, torch.nn.functional as F; "
                    "assert hasattr(F.scaled_dot_product_attention, '__wrapped__') "
                    "!= sys.prefix.endswith('plain')")
            report("import torch.nn.functional", *paired(plain, hooked, code,
                                                         max(10, args.runs // 10)))
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
