"""Text from outside (a GPU name from nvidia-smi or someone's `--facts` file, versions, paths,
a tool's output) made safe to show on a terminal, and JSON that carries it unchanged but
escaped.

A terminal obeys escape sequences wherever they come from: an OSC sequence in a GPU name can
set the window title, write the clipboard (OSC 52) or forge a link; a CSI sequence can move
the cursor and overwrite the lines above it; a carriage return or a newline can forge a
"✓ No problems found" line. So every such string loses its escape sequences and control
characters (C0 but tab and newline where meant, DEL, C1) and the bidirectional overrides
that reorder what is shown, before a renderer styles it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

# Whole sequences first, so no "[31m" or "]0;title" is left behind once ESC is gone.
_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"           # CSI: cursor moves, erase, colours
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: title, clipboard, links
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"       # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"                 # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]"            # 8-bit CSI
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c)?"  # 8-bit OSC, DCS, SOS, PM, APC
)
# Bidirectional embeddings, overrides and isolates, and the marks (Trojan Source).
_BIDI = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_LINE_BREAKS = re.compile("[\t\n\x0b\x0c\r\x85\u2028\u2029]+")
# What JSON written with ensure_ascii=False would still carry raw (json escapes C0 itself).
_JSON_RAW = re.compile(f"[\x7f-\x9f{_BIDI}\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` without escape sequences and control characters; tab and newline stay."""
    if text.isprintable():  # the common case, and cheap
        return text
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


def one_line(text: str) -> str:
    """printable(), and on one line: every line break or tab becomes one space."""
    return printable(_LINE_BREAKS.sub(" ", text))


def safe_json(data: Any, *, indent: int | None = 2, ensure_ascii: bool = False) -> str:
    """json.dumps whose text holds no raw control or bidi character: the data is kept, each
    such character \\u-escaped (json.dumps escapes C0 itself; DEL, C1 and the bidi controls
    it would write raw)."""
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii)
    if ensure_ascii:
        return text
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SGR = r"\x1b\[[0-9;]*m"
_STREAM_FILTER = re.compile(f"({_SGR})|{_SEQUENCES.pattern}|{_CONTROLS.pattern}")


def colours_only(text: str) -> str:
    """printable(), but colour sequences (SGR, what render.py paints with) stay."""
    if text.isprintable():
        return text
    return _STREAM_FILTER.sub(lambda m: m.group(1) or "", text)


class SafeTextStream:
    """The CLI's stdout and stderr: what any command writes passes colours_only() on its way
    out, a net under the renderers for lines they do not own (a build's latest line, an
    installer's message, an error naming a path). JSON loses nothing: it escapes all of it.

    A stream that fails (a pipe whose reader quit, a closed descriptor, a full disk under a
    redirect) does not stop the work: the failure is kept in ``failure``, and this and every
    later write, the interpreter's own flush at exit included, goes to the null device. The
    CLI then says what became of the output (cli.py)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.failure: OSError | ValueError | None = None

    @property
    def inner(self) -> Any:
        return self._inner

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                self._inner.write(colours_only(text))
            except (OSError, ValueError) as exc:  # ValueError: the file object was closed
                self._broke(exc)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self._inner.flush()
            except (OSError, ValueError) as exc:
                self._broke(exc)

    def _broke(self, exc: OSError | ValueError) -> None:
        self.failure = exc
        # What is still buffered, and the flush at exit, must not fail a second time.
        try:
            fd = self._inner.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError):
            return
        try:
            os.dup2(devnull, fd)
        except OSError:
            pass
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer...
        return getattr(self._inner, name)
