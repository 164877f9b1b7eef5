"""SAGEDOCTOR_* environment variables: read strictly, so a typo is an error naming the variable
instead of a silent default or a traceback (docs/development.md lists them)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .errors import SettingError

# name -> (what it must be, lower bound exclusive, upper bound inclusive)
_NUMBERS: dict[str, tuple[str, float, float]] = {
    "SAGEDOCTOR_TIMEOUT": ("a number of seconds above 0", 0.0, math.inf),
    "SAGEDOCTOR_TARGET_TIMEOUT": ("a number of seconds above 0", 0.0, math.inf),
    "SAGEDOCTOR_MIN_COSINE": ("a number above 0 and at most 1", 0.0, 1.0),
    "SAGEDOCTOR_MAX_REL_L2": ("a number above 0", 0.0, math.inf),
    "SAGEDOCTOR_REFRESH_TIMEOUT": ("a number of seconds above 0", 0.0, math.inf),
    # read by the self-test and the runtime (which ignore a bad value): refused here
    "SAGEDOCTOR_ROUTE_MARGIN": ("a speed-up above 0, such as 1.05", 0.0, math.inf),
}
_SWITCHES: dict[str, tuple[str, ...]] = {
    "SAGEDOCTOR_RUNTIME": ("", "on", "off", "0", "1", "false", "true", "no", "yes", "sdpa"),
    "SAGEDOCTOR_SPEED_CHECK": ("", "on", "off", "0", "1", "false", "true", "no", "yes"),
}


def number_from_env(env: Mapping[str, str], name: str, default: float) -> float:
    """The variable's value as a number, ``default`` when unset or empty."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    expected, low, high = _NUMBERS[name]
    try:
        value = float(raw)
    except ValueError:
        raise SettingError(name, raw, expected) from None
    if not (low < value <= high) or math.isnan(value):
        raise SettingError(name, raw, expected)
    return value


def check_settings(env: Mapping[str, str]) -> None:
    """Reject every malformed SAGEDOCTOR_* value before any work starts."""
    for name in _NUMBERS:
        number_from_env(env, name, 1.0)
    for name, allowed in _SWITCHES.items():
        raw = env.get(name, "")
        if raw.strip().lower() not in allowed:
            raise SettingError(name, raw, "one of " + ", ".join(a for a in allowed if a))
    from .probe.roots import HostRoots

    HostRoots.from_env(env)

