"""Is a downloaded archive whole? Read to its end before it enters the cache (and again when
the cache hands it out): a wheel's every zip entry against its CRC, a source .tar.gz through
every member to the gzip trailer (its CRC and length). A digest alone cannot tell: a file
the index names without one is measured on first download, truncated or not."""

from __future__ import annotations

import gzip
import tarfile
import zipfile
import zlib
from pathlib import Path

_BLOCK = 1 << 20


def archive_kind(name: str) -> str | None:
    lowered = name.lower()
    if lowered.endswith((".whl", ".zip")):
        return "zip"
    if lowered.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    return None


def _zip_problem(path: Path) -> str | None:
    with zipfile.ZipFile(path) as archive:
        bad = archive.testzip()
    return None if bad is None else f"the entry {bad!r} fails its CRC check"


def _tar_gz_problem(path: Path) -> str | None:
    with gzip.open(path, "rb") as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                handle = tar.extractfile(member) if member.isfile() else None
                while handle is not None and handle.read(_BLOCK):
                    pass
        while stream.read(_BLOCK):  # the padding after the tar's end, up to the trailer
            pass
    return None


def archive_problem(path: Path, name: str) -> str | None:
    """Why the archive at ``path`` (a wheel or source archive called ``name``) is not whole,
    or None: whole, or a kind that has no check of its own."""
    kind = archive_kind(name)
    if kind is None:
        return None
    try:
        return _zip_problem(path) if kind == "zip" else _tar_gz_problem(path)
    except EOFError:
        return "it ends early (truncated)"
    except (zipfile.BadZipFile, tarfile.TarError, zlib.error, gzip.BadGzipFile) as exc:
        return f"it is not a whole {kind} archive ({exc or type(exc).__name__})"
    except (NotImplementedError, RuntimeError) as exc:  # an unknown compression, encryption
        return f"it cannot be read as a {kind} archive ({exc})"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
