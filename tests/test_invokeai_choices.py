"""InvokeAI's attention_backend choices, read from its config_default.py as it declares them:
through module-level aliases, `typing.Literal` under any import name, `Annotated[...]` and
unions. A type whose choices cannot be read is said (SD189), never guessed.

One real venv holds a stand-in InvokeAI (a dist-info and its config_default.py, which raises
if imported: the probe reads it, never imports it); each case rewrites that file and asks the
venv's own interpreter through the probe."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sagedoctor.facts import InvokeAIPackageFacts
from sagedoctor.probe.target import probe_target
from tests.standins import add_invokeai, make_venv, venv_python

CHOICES = ("auto", "torch-sdp", "sage")
HEADER = "raise ImportError('the probe must not import this')\n"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("inv") / "Invoke root é" / ".venv"
    add_invokeai(make_venv(venv), "6.20.0", HEADER)
    return venv


def read(venv: Path, source: str) -> InvokeAIPackageFacts:
    config = next(venv.glob("lib/python3*/site-packages")) / \
        "invokeai/app/services/config/config_default.py"
    config.write_text(HEADER + textwrap.dedent(source), encoding="utf-8")
    package = probe_target(venv_python(venv), venv).invokeai
    assert package is not None
    return package


READABLE = {
    "module-level alias (InvokeAI's ATTENTION_TYPE style)": '''
        from typing import Literal
        ATTENTION_BACKEND = Literal["auto", "torch-sdp", "sage"]
        class InvokeAIAppConfig:
            attention_backend: ATTENTION_BACKEND = "auto"
        ''',
    "import typing as t": '''
        import typing as t
        class InvokeAIAppConfig:
            attention_backend: t.Literal["auto", "torch-sdp", "sage"] = "auto"
        ''',
    "from typing import Literal as L": '''
        from typing import Literal as L
        class InvokeAIAppConfig:
            attention_backend: L["auto", "torch-sdp", "sage"] = "auto"
        ''',
    "Annotated with a Field whose description names sage": '''
        from typing import Annotated, Literal
        from pydantic import Field
        class InvokeAIAppConfig:
            attention_backend: Annotated[Literal["auto", "torch-sdp", "sage"],
                                         Field(description="sage-attention is fast")] = "auto"
        ''',
    "TypeAlias, Optional and typing_extensions, through two aliases": '''
        from typing import Optional, TypeAlias
        import typing_extensions as te
        _BASE: TypeAlias = te.Literal["auto", "torch-sdp"]
        BACKEND = _BASE | te.Literal["sage"]
        class InvokeAIAppConfig:
            attention_backend: Optional[BACKEND] = None
        ''',
    "a string annotation (from __future__ style)": '''
        from typing import Literal
        BACKEND = Literal["auto", "torch-sdp", "sage"]
        class InvokeAIAppConfig:
            attention_backend: "BACKEND" = "auto"
        ''',
}


@pytest.mark.parametrize("source", READABLE.values(), ids=READABLE.keys())
def test_choices_are_read_through_every_declaration_style(venv: Path, source: str) -> None:
    package = read(venv, source)
    assert package.attention_backend_supported is True
    assert package.attention_backend_choices == CHOICES
    assert package.attention_backend_unread is None


UNREADABLE = {
    "an enum": ('''
        import enum
        class Backend(str, enum.Enum):
            auto = "auto"
            sage = "sage"
        class InvokeAIAppConfig:
            attention_backend: Backend = Backend.auto
        ''', "its type `Backend` names no fixed choices"),
    "a type imported from another module": ('''
        from invokeai.backend.attention import BACKENDS
        class InvokeAIAppConfig:
            attention_backend: BACKENDS = "sage"
        ''', "its type `BACKENDS` names no fixed choices"),
    "a plain str whose Field names sage": ('''
        from pydantic import Field
        class InvokeAIAppConfig:
            attention_backend: str = Field(default="sage", description="torch-sdp or sage")
        ''', "its type `str` names no fixed choices"),
    "a Literal of an enum member": ('''
        from typing import Literal
        from .backends import Backend
        class InvokeAIAppConfig:
            attention_backend: Literal["auto", Backend.SAGE] = "auto"
        ''', "its type `Backend.SAGE` names no fixed choices"),
    "an alias that refers to itself": ('''
        A = B
        B = A
        class InvokeAIAppConfig:
            attention_backend: A = "auto"
        ''', "its type aliases nest more than 8 deep"),
}


@pytest.mark.parametrize(("source", "why"), UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_choices_are_said_never_guessed(venv: Path, source: str, why: str) -> None:
    package = read(venv, source)
    assert package.attention_backend_supported is True
    assert package.attention_backend_choices == ()  # no "sage" picked out of a description
    assert package.attention_backend_unread is not None
    assert package.attention_backend_unread.startswith(why)


def test_a_release_without_the_setting_is_neither(venv: Path) -> None:
    package = read(venv, '''
        from typing import Literal
        ATTENTION_TYPE = Literal["auto", "normal", "xformers", "sliced", "torch-sdp"]
        class InvokeAIAppConfig:
            attention_type: ATTENTION_TYPE = "auto"
        ''')
    assert (package.attention_backend_supported, package.attention_backend_choices,
            package.attention_backend_unread) == (False, (), None)


def test_check_says_so_and_the_plan_writes_nothing(venv: Path, tmp_path: Path) -> None:
    import json

    from tests.standins import clean_env, run_cli

    read(venv, UNREADABLE["an enum"][0])
    root = venv.parent
    (root / "invokeai.yaml").write_text("schema_version: 4.0.3\n", encoding="utf-8")
    args = ["--root", str(root), "--venv", str(venv)]
    report = json.loads(run_cli(["check", "--json", *args], clean_env(tmp_path)).stdout)
    found = {f["code"]: f for f in report["findings"]}
    assert "attention_backend is declared, but its type `Backend`" in found["SD189"]["detail"]
    assert "SD193" not in found  # no "not switched on" for a value it cannot name
    plan = run_cli(["plan", *args], clean_env(tmp_path)).stdout
    assert "Set attention_backend" not in plan
