"""The channel between sagedoctor and a script it runs in the target interpreter.

The script writes its JSON answer between two copies of a random token that only this run
knows (given in SAGEDOCTOR_ANSWER_TOKEN), straight to file descriptor 1. Whatever else the
target prints on its own (a `sitecustomize`, a `.pth` line, an atexit hook, a banner) lies
outside the frame and is ignored. A pipe of its own would do the same on POSIX, but Windows
cannot hand a child an extra descriptor through subprocess; a frame works everywhere.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .proc import ToolResult, run_tool

TOKEN_ENV = "SAGEDOCTOR_ANSWER_TOKEN"

# Python source (3.8+, standard library) that a script run in the target calls as
# `_answer(data)`: prepended to every `python -c` script; target_script.py has its own copy.
ANSWER_FUNCTION = r"""
def _answer(data):
    import json as _json, os as _os
    token = _os.environ.get("SAGEDOCTOR_ANSWER_TOKEN", "")
    payload = (token + _json.dumps(data) + token + "\n").encode("utf-8")
    while payload:  # fd 1 itself: a sitecustomize may have replaced sys.stdout
        payload = payload[_os.write(1, payload):]
"""


def with_answer_function(script: str) -> str:
    return ANSWER_FUNCTION + script


def new_token() -> str:
    return "<<SAGEDOCTOR-ANSWER-" + secrets.token_hex(16) + ">>"


def framed(stdout: str, token: str) -> str | None:
    """The text between the first two copies of ``token``, or None without a whole frame."""
    start = stdout.find(token)
    if start < 0:
        return None
    begin = start + len(token)
    end = stdout.find(token, begin)
    return None if end < 0 else stdout[begin:end]


@dataclass(frozen=True)
class Answer:
    result: ToolResult
    text: str | None  # the framed answer; None: the script never answered

    def json(self) -> Any:
        """The parsed answer; ValueError where there is none or it is not JSON."""
        if self.text is None:
            raise ValueError("no answer in its output")
        return json.loads(self.text)

    def noise(self) -> str:
        """What the target printed outside the frame (first line, for messages)."""
        lines = [line for line in self.result.stdout.splitlines() if line.strip()]
        return lines[0][:120] if lines else ""


def ask_target(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
               input_text: str | None = None, max_output_bytes: int | None = None) -> Answer:
    """run_tool for a script that answers through ``_answer`` (see ANSWER_FUNCTION)."""
    token = new_token()
    child_env = dict(os.environ if env is None else env)
    child_env[TOKEN_ENV] = token
    result = run_tool(argv, timeout=timeout, env=child_env, input_text=input_text,
                      max_output_bytes=max_output_bytes, answer_frame=token.encode("utf-8"))
    return Answer(result, framed(result.stdout, token))
