"""`sagedoctor index refresh`: newer wheels and GitHub's digests into the user's own index."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from ..index import (
    SHIPPED_INDEX,
    IndexError_,
    WheelIndex,
    load_index,
    load_index_file,
    user_index_path,
)
from ..index.refresh import (
    GITHUB_API,
    PYPI_SIMPLE,
    REFRESH_TIMEOUT_ENV,
    REFRESH_TIMEOUT_S,
    Coverage,
    coverage,
    fetch_releases,
    fetch_versions,
    merge_wheels,
    today,
    wheels_from_releases,
    with_windows_releases,
    within,
    write_index,
)


def _starting_index(base: Path | None) -> WheelIndex:
    """--index, else the usual choice; a corrupt refreshed copy must not block its own
    repair: start from the shipped index and keep the bad file beside the new one."""
    if base is not None:
        return load_index(base)
    try:
        return load_index()
    except IndexError_ as exc:
        user = user_index_path()
        if not exc.message.startswith(str(user)):
            raise
        kept = user.with_name(user.name + ".corrupt")
        try:
            user.replace(kept)
        except OSError:
            raise exc from None
        sys.stderr.write(f"Your refreshed index cannot be used ({exc.message}); it was moved to "
                     f"{kept} and this refresh starts from the shipped index.\n")
        return load_index_file(SHIPPED_INDEX)


def run_refresh(base: Path | None, api: str | None, out: TextIO | None = None,
                pypi: str | None = None, as_json: bool = False) -> int:
    import os
    import time

    from ..settings import number_from_env

    stream = out or sys.stdout
    index = _starting_index(base)
    budget = number_from_env(os.environ, REFRESH_TIMEOUT_ENV, REFRESH_TIMEOUT_S)
    deadline = time.monotonic() + budget  # the whole refresh, not each read
    releases = within(deadline, budget, "GitHub API",
                      lambda: fetch_releases(api or GITHUB_API))
    found, skipped = wheels_from_releases(releases, index)
    merged, notes = merge_wheels(index, found)
    torch_versions = within(deadline, budget, "PyPI",
                            lambda: fetch_versions("torch", pypi or PYPI_SIMPLE))
    triton_windows = within(deadline, budget, "PyPI", lambda: fetch_versions(
        index.triton.windows_package, pypi or PYPI_SIMPLE))
    merged = with_windows_releases(merged, triton_windows)
    gaps = coverage(index, torch_versions, triton_windows,
                    [n.removeprefix("new: ") for n in notes if n.startswith("new: ")])
    target = user_index_path()
    write_index(merged, target, max(today(), index.updated))
    confirmed = sum(1 for w in merged.windows_wheels if w.sha256_source == "github-api")
    if as_json:
        json.dump({"schema_version": 1, "written": str(target), "based_on": index.source,
                   "releases": len(releases), "windows_wheels_read": len(found),
                   "wheels": len(merged.windows_wheels), "github_digests": confirmed,
                   "notes": notes, "skipped": skipped, "not_covered": gaps.as_dict()},
                  stream, indent=1)
        stream.write("\n")
        return 0
    stream.write(f"{len(releases)} releases, {len(found)} Windows wheels read from the API; "
                 f"{confirmed} of {len(merged.windows_wheels)} wheels now carry GitHub's "
                 f"digest.\n")
    for note in notes:
        stream.write(f"  {note}\n")
    for item in skipped:
        stream.write(f"  skipped {item}\n")
    stream.write(_coverage_text(gaps))
    stream.write(f"Wrote {target} (based on {index.source}); the shipped index is unchanged.\n")
    return 0


def _coverage_text(gaps: Coverage) -> str:
    lines = []
    if gaps.torch_without_row:
        lines.append("torch on PyPI without a pairing row: " + ", ".join(gaps.torch_without_row)
                     + " (planned from torch's own triton pin; the smoke check decides)")
    if gaps.torch_without_windows:
        lines.append("torch without a triton-windows pairing: "
                     + ", ".join(gaps.torch_without_windows))
    if gaps.triton_windows_new:
        lines.append("triton-windows minors newer than the table: "
                     + ", ".join(gaps.triton_windows_new))
    if gaps.new_wheels:
        lines.append(f"new fork wheels: {len(gaps.new_wheels)} (listed above)")
    if not lines:
        return "The index covers every torch and triton-windows minor on PyPI.\n"
    return "Not covered by the index yet:\n" + "".join(f"  {line}\n" for line in lines)
