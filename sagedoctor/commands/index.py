"""`sagedoctor index refresh`: newer wheels and GitHub's digests into the user's own index."""

from __future__ import annotations

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
from ..index_refresh import (
    GITHUB_API,
    fetch_releases,
    merge_wheels,
    today,
    wheels_from_releases,
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


def run_refresh(base: Path | None, api: str | None, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    index = _starting_index(base)
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
