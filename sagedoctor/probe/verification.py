"""What the last `sagedoctor verify` recorded for the target venv, read from the state store:
a `sageattn()` found wrong on a GPU stays known to every later `check` and `plan`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..facts import VerificationFacts, WrongKernel
from ..runtime.hook import dist_stats, stat_differences
from ..state import hook_enabled, load_status, venv_site_dirs


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


def read_verification(prefix: Path) -> VerificationFacts:
    status, record = load_status(prefix)
    hooked = hook_enabled(prefix)
    if record is None:
        return VerificationFacts(status=status, hooked=hooked)
    dists = record.fingerprint.get("dists") if isinstance(record.fingerprint, dict) else None
    dists = dists if isinstance(dists, dict) else {}

    def version(name: str) -> str | None:
        value = dists.get(name)
        return value if isinstance(value, str) else None

    saved = record.fingerprint.get("stat") if isinstance(record.fingerprint, dict) else None
    changed: tuple[str, ...] = ()
    if isinstance(saved, dict):  # reports before the stat fingerprint have none to compare
        changed = tuple(stat_differences(saved, dist_stats(venv_site_dirs(prefix))))
    return VerificationFacts(status=status, verdict=record.verdict,
                             verified_at=record.verified_at,
                             sageattention=version("sageattention"), torch=version("torch"),
                             wrong_sageattn=wrong_kernels(record.results), changed=changed,
                             hooked=hooked)
