"""`sagedoctor check --json` vs `python -m torch.utils.collect_env`, side by side in one run.

Both inspect the same venv, which holds the real CPU build of torch (the test venv has it:
`bash scripts/test.sh` installs torch==2.13.0). Runs alternate so that machine noise hits both.
Targets: check median <= 0.3 s, and <= 1/5 of collect_env's.

    python benchmarks/bench_check.py [--venv .venv] [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            check=False)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1, 2):  # check's exit codes; collect_env exits 0
        sys.exit(f"{argv[0]} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    python = args.venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        sys.exit(f"{args.venv} has no working torch; run `bash scripts/test.sh` first")
    sagedoctor = shutil.which("sagedoctor", path=str(args.venv / "bin")) or "sagedoctor"
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    check_cmd = [sagedoctor, "check", "--json", "--venv", str(args.venv)]
    collect_cmd = [str(python), "-m", "torch.utils.collect_env"]
    timed(check_cmd, env)  # warm the file cache for both before measuring
    timed(collect_cmd, env)
    check_times, collect_times = [], []
    for _ in range(args.runs):
        check_times.append(timed(check_cmd, env))
        collect_times.append(timed(collect_cmd, env))
    check_med = statistics.median(check_times)
    collect_med = statistics.median(collect_times)
    print(f"torch {probe.stdout.strip()} in {args.venv}, {args.runs} runs each, {os.cpu_count()} "
          "cores")
    print(f"sagedoctor check --json   median {check_med * 1000:7.1f} ms  "
          f"(min {min(check_times) * 1000:.1f}, max {max(check_times) * 1000:.1f})")
    print(f"torch collect_env         median {collect_med * 1000:7.1f} ms  "
          f"(min {min(collect_times) * 1000:.1f}, max {max(collect_times) * 1000:.1f})")
    ratio = check_med / collect_med
    print(f"ratio check/collect_env   {ratio:.3f}  (target <= 0.200; check target <= 300 ms)")
    verdict = check_med <= 0.3 and ratio <= 0.2
    print("PASS" if verdict else "FAIL")
    sys.exit(0 if verdict else 1)


if __name__ == "__main__":
    main()
