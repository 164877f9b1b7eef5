"""What the last `sagedoctor verify` recorded for the target venv, read from the state store:
a `sageattn()` found wrong on a GPU stays known to every later `check` and `plan`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..decide.app_shapes import app_shape_speeds as speeds
from ..facts import AppShapeSpeed, VerificationFacts, WrongKernel
from ..state import arming_problem, changes_since, hook_on, hook_problem, load_status


def wrong_kernels(results: Any) -> tuple[WrongKernel, ...]:
    """GPUs whose `sageattn()` failed the check for any dtype and head size."""
    gpus = results.get("gpus") if isinstance(results, dict) else None
    if not isinstance(gpus, dict):
        return ()
    out = []
    for gpu, entry in sorted(gpus.items()):
        if not isinstance(entry, dict) or not isinstance(entry.get("sageattn_auto"), dict):
            continue
        failed = [v for v in entry["sageattn_auto"].values()
                  if isinstance(v, dict) and v.get("passed") is False]
        if failed:
            kernel = failed[0].get("kernel")
            out.append(WrongKernel(str(gpu), str(entry.get("name", "")),
                                   str(entry.get("arch", "")),
                                   kernel if isinstance(kernel, str) else None))
    return tuple(out)


def app_shape_speeds(prefix: Path) -> tuple[AppShapeSpeed, ...]:
    """verify's stored decisions at the apps' shapes, from the venv's calibration.json (an
    unreadable or absent file: none)."""
    from ..runtime.decisions import load_calibration
    from ..runtime.records import venv_calibration_path

    try:
        data = load_calibration(venv_calibration_path(str(prefix)))
    except (OSError, ValueError):
        return ()
    return speeds(data)


def read_verification(prefix: Path) -> VerificationFacts:
    status, record = load_status(prefix)
    hooked = hook_on(prefix)
    odd_hook = hook_problem(prefix)
    if record is None:
        return VerificationFacts(status=status, hooked=hooked, hook_problem=odd_hook)
    fingerprint = record.typed_fingerprint
    dists = fingerprint.dists

    # The same comparisons as state.still_as_verified (post-update, enable and the TUI):
    # the venv's Python and dist-info RECORDs against the fingerprint, the hook's copy.
    changed = changes_since(prefix, fingerprint)
    armed = arming_problem(prefix, record) if record.verdict == "routing" else None
    return VerificationFacts(status=status, verdict=record.verdict,
                             verified_at=record.verified_at,
                             sageattention=dists.get("sageattention"), torch=dists.get("torch"),
                             wrong_sageattn=wrong_kernels(record.results), changed=changed,
                             hooked=hooked, arming_problem=armed,
                             app_shapes=app_shape_speeds(prefix), hook_problem=odd_hook)
