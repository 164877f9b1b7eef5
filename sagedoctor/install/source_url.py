"""Where a source build's archive may come from: --source-url or SAGEDOCTOR_SOURCE_URL,
https only (http for this machine)."""

from __future__ import annotations

import os

ENV_NAME = "SAGEDOCTOR_SOURCE_URL"


def source_url_problem(url: str) -> str | None:
    """Why this source-archive URL is refused, or None: https only (http for this machine)."""
    from urllib.parse import urlsplit

    from .fetch import LOCAL_HOSTS

    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:  # an unclosed [ in the host part
        return f"not a URL ({exc})"
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and host in LOCAL_HOSTS:
        return None
    return "not https (http only for 127.0.0.1 or localhost)"


def chosen_source_url(given: str | None) -> str | None:
    """--source-url (`given`), else SAGEDOCTOR_SOURCE_URL, else None (the index's archive);
    a refused one raises InstallError."""
    url = given or os.environ.get(ENV_NAME) or None
    if url is None:
        return None
    problem = source_url_problem(url)
    if problem:  # the CLI refuses it up front; this is for callers that skip the CLI
        from .runner import InstallError

        where = "--source-url" if given else ENV_NAME
        raise InstallError(f"{where} {url!r}: {problem}", f"fix {where}")
    return url
