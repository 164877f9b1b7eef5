"""Shared pieces of the fuzz tests (tests/test_fuzz_*.py; no tests here).

The property every parser of outside data must keep: an input parses, or it is refused with
one of our errors (a `SagedoctorError` and its code) or a documented result (a probe note, a
`config_error` finding); never another exception. `outcome` runs one parse and tallies what
it did per parser; with SAGEDOCTOR_FUZZ_TALLY=FILE the tally is written there at exit, which
is how `benchmarks/faults.py` prints its figures.

Settings are bounded and reproducible: a fixed number of examples per test, no deadline (a
slow CI core must not fail a test), derandomized (the same inputs on every run), no example
database written into the checkout.
"""

from __future__ import annotations

import atexit
import json
import os
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sagedoctor.errors import SagedoctorError

TALLY: defaultdict[str, Counter[str]] = defaultdict(Counter)
_TALLY_FILE = os.environ.get("SAGEDOCTOR_FUZZ_TALLY")


def fuzz(max_examples: int) -> settings:
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much])


def outcome(parser: str, parse: Callable[[], Any],
            refusal: tuple[type[BaseException], ...] = ()) -> str:
    """'parsed', a refusal's code (SD9xx) or the documented refusal's class name.

    parse may return a str to name a documented result itself (e.g. 'config_error')."""
    try:
        result = parse()
    except SagedoctorError as exc:
        assert exc.code.startswith("SD") and exc.code != "SD000", exc
        assert str(exc).strip(), "a refusal says why"
        label = exc.code
    except refusal as exc:
        label = type(exc).__name__
    else:
        label = result if isinstance(result, str) else "parsed"
    TALLY[parser][label] += 1
    return label


def _write_tally() -> None:
    if not _TALLY_FILE:
        return
    try:
        with open(_TALLY_FILE, encoding="utf-8") as handle:
            old = json.load(handle)
    except (OSError, ValueError):
        old = {}
    for parser, counts in TALLY.items():
        merged = Counter(old.get(parser, {}))
        merged.update(counts)
        old[parser] = dict(merged)
    with open(_TALLY_FILE, "w", encoding="utf-8") as handle:
        json.dump(old, handle, indent=1, sort_keys=True)


atexit.register(_write_tally)


# --- generators ------------------------------------------------------------------------------

# Characters that break naive parsers: separators, quotes, NUL, BOM, a superscript digit
# (str.isdigit() but not int()), Arabic-Indic digits (\d but not [0-9]), RTL mark, emoji.
TRICKY = ",.;:-+_ \t\r\n\"'\\/\x00\ufeff²١٥\u200f🙂[]{}#=%&*!|<>?@^`~$"


def mutations(seed_text: str) -> st.SearchStrategy[str]:
    """A valid input changed a little: characters deleted, inserted, replaced or repeated."""

    @st.composite
    def mutate(draw: st.DrawFn) -> str:
        text = seed_text
        rounds = draw(st.integers(1, 6))
        rng = random.Random(draw(st.integers(0, 2**32 - 1)))
        for _ in range(rounds):
            pos = rng.randrange(len(text) + 1)
            kind = rng.randrange(5)
            junk = "".join(rng.choice(TRICKY + "0123456789abcxyzMiB")
                           for _ in range(rng.randrange(1, 5)))
            if kind == 0 and text:
                end = min(len(text), pos + rng.randrange(1, 8))
                text = text[:pos] + text[end:]
            elif kind == 1:
                text = text[:pos] + junk + text[pos:]
            elif kind == 2 and text:
                text = text[:pos] + junk + text[pos + len(junk):]
            elif kind == 3 and text:
                piece = text[pos:pos + rng.randrange(1, 40)]
                text = text[:pos] + piece * rng.randrange(2, 6) + text[pos:]
            else:
                lines = text.splitlines(keepends=True)
                rng.shuffle(lines)
                text = "".join(lines)
        return text

    return mutate()


def byte_mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    """Valid bytes with some flipped, cut or spliced with binary junk."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        data = bytearray(seed)
        rng = random.Random(draw(st.integers(0, 2**32 - 1)))
        for _ in range(draw(st.integers(1, 8))):
            pos = rng.randrange(len(data) + 1)
            kind = rng.randrange(3)
            if kind == 0 and data:
                data[min(pos, len(data) - 1)] = rng.randrange(256)
            elif kind == 1:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
            else:
                del data[pos:pos + rng.randrange(1, 16)]
        return bytes(data)

    return mutate()


def text_or_junk(near_valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Near-valid inputs mixed with raw text, tricky characters and decoded binary."""
    return st.one_of(
        near_valid,
        st.text(max_size=200),
        st.text(alphabet=TRICKY + "0123456789.", max_size=80),
        st.binary(max_size=300).map(lambda b: b.decode("utf-8", errors="replace")),
    )


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=4),
    max_leaves=20,
)


def _leaf_paths(data: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every value inside a JSON document."""
    out: list[tuple[Any, Any]] = []
    stack = [data]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else (
            enumerate(node) if isinstance(node, list) else ())
        for key, value in list(items):
            out.append((node, key))
            stack.append(value)
    return out


@st.composite
def mutated_json(draw: st.DrawFn, seed: Any) -> Any:
    """A copy of a valid JSON document with a few leaves replaced, keys dropped or added."""
    import copy

    data = copy.deepcopy(seed)
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    for _ in range(draw(st.integers(1, 4))):
        paths = _leaf_paths(data)
        if not paths:
            return draw(json_values)
        parent, key = rng.choice(paths)
        kind = rng.randrange(4)
        if kind == 0 and isinstance(parent, dict):
            del parent[key]
        elif kind == 1 and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values)
        else:
            parent[key] = draw(json_values)
    return data
