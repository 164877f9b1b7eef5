"""A cached reinstall vs a first install, side by side in one run.

The plan holds every kind of download: a wheel from a simple index (triton-windows), the pinned
source archive (built with a stand-in setup.py, so the build takes seconds, not the real
minutes), and the runtime wheel; everything is served by a local HTTP server into a real venv
that sees the CPU torch (run `bash scripts/test.sh` once first). The smoke check runs on the
CPU. Runs alternate: a first install with an empty cache, then a reinstall from it.
Targets: reinstall median <= 3 s, 0 bytes downloaded, 0 requests.

    python benchmarks/bench_install.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sagedoctor.install.execute import Executor  # noqa: E402
from tests.test_install_kit import (  # noqa: E402
    plan,
    serving,
    torch_venv,
)
from tests.test_install_steps import full_plan  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["SAGEDOCTOR_SMOKE_DEVICE"] = "cpu"
    first: list[float] = []
    again: list[float] = []
    downloaded: list[int] = []
    requests: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench install ü ") as tmp, serving() as site:
        root = Path(tmp)
        python, _site = torch_venv(root / "venv")
        steps = full_plan(root, site)
        for run in range(args.runs):
            cache = root / f"cache-{run}"
            for label, times in (("first", first), ("again", again)):
                site.requests.clear()
                executor = Executor(plan(python, *steps), lambda _m: None,
                                    root / f"work-{run}-{label}", root / "logs",
                                    cache_dir=cache, state_root=root / "state")
                started = time.perf_counter()
                executor.run("0.1.0")
                times.append(time.perf_counter() - started)
                if label == "again":
                    downloaded.append(executor.downloaded_bytes)
                    requests.append(len(site.requests))
    cold, warm = statistics.median(first), statistics.median(again)
    print(f"first install (empty cache): median {cold:.2f} s over {args.runs}")
    print(f"cached reinstall:            median {warm:.2f} s; bytes downloaded "
          f"{max(downloaded)}; server requests {max(requests)}")
    print(f"ratio reinstall/first: {warm / cold:.2f}")
    ok = warm <= 3.0 and max(downloaded) == 0 and max(requests) == 0
    print("targets (<= 3 s, 0 bytes, 0 requests):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
