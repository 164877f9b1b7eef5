"""`sagedoctor index refresh`: newer wheels and GitHub's digests into the user's own index."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..index import load_index, user_index_path
from ..index_refresh import (
    GITHUB_API,
    fetch_releases,
    merge_wheels,
    today,
    wheels_from_releases,
    write_index,
)


def run_refresh(base: Path | None, api: str | None, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    index = load_index(base)
    releases = fetch_releases(api or GITHUB_API)
    found, skipped = wheels_from_releases(releases, index)
    merged, notes = merge_wheels(index, found)
    target = user_index_path()
    write_index(merged, target, max(today(), index.updated))
    confirmed = sum(1 for w in merged.windows_wheels if w.sha256_source == "github-api")
    stream.write(f"{len(releases)} releases, {len(found)} Windows wheels read from the API; "
                 f"{confirmed} of {len(merged.windows_wheels)} wheels now carry GitHub's "
                 f"digest.\n")
    for note in notes:
        stream.write(f"  {note}\n")
    for item in skipped:
        stream.write(f"  skipped {item}\n")
    stream.write(f"Wrote {target} (based on {index.source}); the shipped index is unchanged.\n")
    return 0
