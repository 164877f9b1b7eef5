"""`sagedoctor post-update` when nothing changed since a passing verify, against
`sagedoctor --version` (the CLI's own start), side by side in one run.

A real venv holds stand-in torch, triton and sageattention dist-infos and a passing verify
record whose stat fingerprint matches them (both copies: the user state and the venv's
verified.json), so post-update takes its fast path: a few stat() calls, no target process.
Runs alternate so machine noise hits both. Target: post-update median <= 0.3 s.

    python benchmarks/bench_post_update.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def add_dist(site: Path, name: str, version: str) -> None:
    dist = site / f"{name}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                   encoding="utf-8")
    (dist / "RECORD").write_text(f"{dist.name}/METADATA,,\n{dist.name}/RECORD,,\n",
                                 encoding="utf-8")


def passing_venv(folder: Path) -> Path:
    from sagedoctor.runtime.hook import dist_stats
    from sagedoctor.state import (
        VerifyRecord,
        default_post_update,
        save_record,
        venv_python_version,
        venv_site_dirs,
    )

    venv = folder / "app venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    for name, version in (("torch", "2.13.0"), ("triton", "3.7.0"),
                          ("sageattention", "2.2.0")):
        add_dist(site, name, version)
    fingerprint = {"python": venv_python_version(venv),
                   "dists": {"torch": "2.13.0", "triton": "3.7.0", "sageattention": "2.2.0"},
                   "stat": dist_stats(venv_site_dirs(venv))}
    save_record(venv, VerifyRecord("routing", "2026-12-03T12:00:00+00:00", fingerprint, {},
                                   default_post_update(venv, venv / "bin" / "python")))
    return venv


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{argv} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-post-update ") as tmp:
        state = Path(tmp) / "state"
        os.environ["XDG_STATE_HOME"] = str(state)  # the record goes here, for both sides
        env = {**os.environ, "XDG_STATE_HOME": str(state)}
        venv = passing_venv(Path(tmp))
        post = [sys.executable, "-m", "sagedoctor", "post-update", "--venv", str(venv)]
        version = [sys.executable, "-m", "sagedoctor", "--version"]
        out = subprocess.run(post, env=env, capture_output=True, text=True, check=True).stdout
        if "nothing to do" not in out:
            sys.exit(f"post-update did not take its fast path: {out}")
        timed(version, env)
        post_t, version_t = [], []
        for i in range(args.runs):
            if i % 2:
                version_t.append(timed(version, env))
                post_t.append(timed(post, env))
            else:
                post_t.append(timed(post, env))
                version_t.append(timed(version, env))
    post_med, version_med = statistics.median(post_t), statistics.median(version_t)
    print(f"{args.runs} runs each, alternating, {os.cpu_count()} cores")
    print(f"post-update (unchanged)  median {post_med * 1e3:7.1f} ms  "
          f"(min {min(post_t) * 1e3:.1f}, max {max(post_t) * 1e3:.1f})")
    print(f"sagedoctor --version     median {version_med * 1e3:7.1f} ms  "
          f"(min {min(version_t) * 1e3:.1f}, max {max(version_t) * 1e3:.1f})")
    print(f"post-update - --version  {(post_med - version_med) * 1e3:+.1f} ms; ratio "
          f"{post_med / version_med:.2f} (target: post-update <= 300 ms)")
    ok = post_med <= 0.3
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
