"""Every SD code is defined in the one catalogue (decide/findings): the findings in CATALOG,
the errors that stop a command in ERRORS; an error class takes its exit status from there."""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import sagedoctor
from sagedoctor import exit_codes
from sagedoctor.decide.findings import CATALOG, ERRORS
from sagedoctor.errors import SagedoctorError

PACKAGE = Path(sagedoctor.__file__).parent


def test_every_sd_code_in_the_source_is_in_the_catalogue() -> None:
    found = {code: path.relative_to(PACKAGE.parent) for path in sorted(PACKAGE.rglob("*"))
             if path.suffix in (".py", ".toml", ".tcss")
             for code in re.findall(r"\bSD\d{3}\b", path.read_text(encoding="utf-8"))}
    assert len(found) > 100
    assert {code: str(path) for code, path in found.items()
            if code not in CATALOG and code not in ERRORS} == {}


def _subclasses(cls: type[SagedoctorError]) -> Iterator[type[SagedoctorError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _error_classes() -> list[type[SagedoctorError]]:
    for module in pkgutil.walk_packages(sagedoctor.__path__, "sagedoctor."):
        if module.name.startswith(("sagedoctor.runtime", "sagedoctor.__main__",
                                   "sagedoctor.probe.target_script")):
            continue  # the runtime raises none of these; the others are scripts that run
        importlib.import_module(module.name)
    return sorted(set(_subclasses(SagedoctorError)), key=lambda c: c.__qualname__)


def test_each_error_class_takes_its_code_and_exit_status_from_the_catalogue() -> None:
    classes = _error_classes()
    own = [c for c in classes if "code" in vars(c)]
    assert len(own) >= 30
    for cls in own:
        kind = ERRORS[cls.code]
        assert (cls.exit_status, cls.title) == (kind.exit_status, kind.title), cls
    # the few that keep their parent's code set their own exit status (verify's SD920)
    assert {c.code for c in classes if "code" not in vars(c)} <= {"SD920"}
    assert {(c.code, c.exit_status) for c in own} >= {
        ("SD912", exit_codes.INTERRUPTED), ("SD905", exit_codes.USAGE),
        ("SD930", exit_codes.FIXABLE), ("SD970", exit_codes.INTERRUPTED)}


def test_an_error_class_with_a_code_not_in_the_catalogue_is_refused() -> None:
    with pytest.raises(TypeError, match=r"SD999 is not in decide/findings\.ERRORS"):
        type("Uncatalogued", (SagedoctorError,), {"code": "SD999"})
