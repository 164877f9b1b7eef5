"""How long `sagedoctor verify` takes, and whether its decisions hold from run to run.

On a GPU machine with SageAttention installed in the target venv (and the runtime bundled by
`sagedoctor install`):

1. `--full N` full verifies, each after the venv's calibration file is removed (what a verify
   after a new build or torch sees: nothing stored to keep), timed wall to wall;
2. `--unchanged N` verifies right after (nothing changed for the kernels' inputs: a sample is
   re-timed, the rest kept);
3. `verify --fresh` (every shape decided anew, the stored decisions ignored).

Then the agreement of the full runs: the verdict per GPU, dtype and head size; the app shapes'
decisions; and the decision at every shape of the old fixed grid (19 lengths x 3 head
families x 2 dtypes = 114 shapes), each as the router takes it from that run's file (stored,
or interpolated between stored lengths that agree).

    python benchmarks/bench_verify.py --python /path/to/venv/bin/python [--full 3] [--json F]

Targets (issue 37, H100 or H200): full <= 30 s, after nothing changed <= 10 s (issue 21:
--fresh <= 60 s); 3 full runs agree on every verdict, every app shape, and >= 110 of the 114
grid shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sagedoctor.decide.app_shapes import app_decisions
from sagedoctor.runtime.decisions import Calibration, load_calibration, shape_key
from sagedoctor.verify import key_results, run_signature

# The fixed grid verify swept before bisection (selftest.SWEEP x its head families).
GRID = (1024, 2048, 4096, 4608, 6144, 8192, 9216, 9728, 10240, 11264, 12288, 14336, 16384,
        16896, 20480, 24576, 28672, 32760, 32768)
FAMILIES = ((64, 2, 10), (128, 1, 24), (128, 1, 40))
DTYPES = ("bfloat16", "float16")


def grid_shapes() -> list[str]:
    return [shape_key(dtype, d, b * h, t, t, False) for dtype in DTYPES
            for d, b, h in FAMILIES for t in GRID]


def grid_decisions(data: Calibration) -> dict[str, bool | None]:
    """Per GPU and grid shape, the router's decision from this file (None: it would time the
    shape live)."""
    out: dict[str, bool | None] = {}
    for gpu in data.gpus:
        for shape in grid_shapes():
            found, _how = data.lookup(gpu, shape)
            out[f"{gpu} {shape}"] = found.route if found is not None else None
    return out


def verify(cli: list[str], python: str, env: dict[str, str], *extra: str,
           ) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    done = subprocess.run([*cli, "verify", "--python", python, "--json", *extra],
                          capture_output=True, text=True, env=env, check=False, timeout=900)
    took = time.monotonic() - started
    try:
        data = json.loads(done.stdout)
    except ValueError:
        print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"verify printed no JSON (exit {done.returncode})") from None
    return took, data


def summary(took: float, data: dict[str, Any]) -> dict[str, Any]:
    report = data["report"]
    reuse = (report.get("measure") or {}).get("reuse") or {}
    points = [p for g in report["gpus"] for k in g["keys"] for p in k.get("sweep", [])]
    return {"wall_s": round(took, 2), "verdict": data["verdict"],
            "signature": run_signature(key_results(report)),
            "app_shapes": {f"{gpu} {name}": [d.route, round(d.speedup, 3), round(d.low, 3),
                                              round(d.high, 3)]
                           for gpu, shapes in app_decisions(
                               Calibration.from_json(data["calibration"])).items()
                           for name, d in shapes.items()},
            "points_measured": sum(1 for p in points
                                   if not p.get("reused") and not p.get("borrowed")),
            "points_kept": sum(1 for p in points if p.get("reused")),
            "points_borrowed": sum(1 for p in points if p.get("borrowed")),
            "sustained": sum(1 for p in points if p.get("sustained")),
            "timed_ms": round(sum(p.get("spent_ms") or 0 for p in points)),
            "timing": report.get("timing"),
            "points": [[p.get("heads"), p.get("tokens"), p.get("speedup"), p.get("short"),
                        p.get("rounds"), p.get("route"), p.get("spent_ms")] for p in points
                       if not p.get("reused") and not p.get("borrowed")]
            if len(points) < 200 else [],
            "reuse": reuse, "sister": (report.get("measure") or {}).get("sister") or {}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", required=True, help="the target venv's interpreter")
    parser.add_argument("--full", type=int, default=3, help="full verifies (default 3)")
    parser.add_argument("--unchanged", type=int, default=1,
                        help="verifies after nothing changed, one after another (default 1)")
    parser.add_argument("--json", metavar="FILE", help="write the results here as they come")
    parser.add_argument("--skip", action="append", default=[], choices=("unchanged", "fresh"),
                        help="leave out a step (to split the runs over two calls)")
    args = parser.parse_args()
    env = dict(os.environ)
    cli = [sys.executable, "-m", "sagedoctor"]
    prefix = Path(subprocess.run([args.python, "-c", "import sys; print(sys.prefix)"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    cal_path = prefix / "sagedoctor" / "calibration.json"
    out: dict[str, Any] = {"python": args.python, "full": [], "files": []}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")

    grids = []
    for number in range(args.full):
        cal_path.unlink(missing_ok=True)
        took, data = verify(cli, args.python, env)
        row = summary(took, data)
        out["full"].append(row)
        grids.append(grid_decisions(load_calibration(str(cal_path))))
        print(f"full {number + 1}: {took:.1f} s, {data['verdict']}, measured "
              f"{row['points_measured']} shapes ({row['sustained']} sustained, "
              f"{row['points_borrowed']} borrowed, "
              f"{row['timed_ms']} ms timing); {data['report'].get('timing')}", flush=True)
        save()
    if "unchanged" not in args.skip:
        out["unchanged_runs"] = []
        for number in range(args.unchanged):
            took, data = verify(cli, args.python, env)
            row = summary(took, data)
            out["unchanged_runs"].append(row)
            out["unchanged"] = row
            print(f"nothing changed {number + 1}: {took:.1f} s, kept {row['points_kept']}, "
                  f"re-timed {row['points_measured']} ({row['timed_ms']} ms): "
                  f"{row['reuse'].get('why')}; {data['report'].get('timing')}", flush=True)
            save()
    if "fresh" not in args.skip:
        took, data = verify(cli, args.python, env, "--fresh")
        out["fresh"] = summary(took, data)
        print(f"--fresh: {took:.1f} s, measured {out['fresh']['points_measured']}", flush=True)
    if len(grids) > 1:
        full = out["full"]
        keys = sorted({k for r in full for k in r["signature"]})
        apps = sorted({k for r in full for k in r["app_shapes"]})
        shapes = sorted({k for g in grids for k in g})
        flipped = [s for s in shapes if len({g.get(s) for g in grids}) > 1]
        out["agreement"] = {
            "runs": len(full),
            "verdicts": f"{sum(1 for k in keys if len({r['signature'].get(k) for r in full}) == 1)}"
                        f" of {len(keys)}",
            "app_shapes": f"{sum(1 for a in apps if len({r['app_shapes'].get(a, [None])[0] for r in full}) == 1)}"  # noqa: E501
                          f" of {len(apps)}",
            "grid_shapes": f"{len(shapes) - len(flipped)} of {len(shapes)}",
            "grid_flipped": [f"{s}: {[g.get(s) for g in grids]}" for s in flipped],
            "grid_live": sum(1 for g in grids for v in g.values() if v is None)}
        print("agreement over the full runs:", json.dumps(out["agreement"]), flush=True)
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
