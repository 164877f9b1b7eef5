"""resolve_uninstall: the uninstall plan from plain facts, as a table of cases (pure: no venv,
no file is read)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from sagedoctor.decide.resolve.uninstall import EditedConfig, UninstallFacts, resolve_uninstall
from sagedoctor.facts import InterruptedInstall, SageFacts, TargetFacts
from sagedoctor.plan import ACTIONS, Blocked, Plan
from sagedoctor.state import InstallRecord

PREFIX = "/venvs/app"
HOOK = f"{PREFIX}/lib/python3.12/site-packages/sagedoctor-runtime.pth"
RECORDS = f"{PREFIX}/sagedoctor"
CONFIG = "/invoke/invokeai.yaml"

BARE = TargetFacts(
    executable=f"{PREFIX}/bin/python", python_version="3.12.3", implementation="cpython",
    tags=(), is_venv=True, prefix=PREFIX, base_prefix="/usr", site_packages=f"{PREFIX}/lib",
    site_packages_writable=True, include_dir="/usr/include", has_python_h=True, libs_dir=None,
    has_python_lib=None, torch=None, triton=None, triton_windows=None, sageattention=None,
    invokeai=None, pip=None, uv=None)
SAGE = SageFacts("2.2.0", ("_fused",), None)
INSTALLED = replace(BARE, runtime="0.1.0", sageattention=SAGE, triton_windows="3.6.0.post25")
OURS = InstallRecord({"sageattention": "2.2.0", "sagedoctor-runtime": "0.1.0",
                      "triton-windows": "3.6.0.post25"}, {"triton-windows": "3.5.1.post24"})


@dataclass(frozen=True)
class Case:
    name: str
    facts: UninstallFacts
    everything: bool = False
    actions: tuple[str, ...] = ()  # the steps' actions, in order
    titles: tuple[str, ...] = ()  # a substring of each step's title, in order (where given)
    notes: tuple[str, ...] = ()  # a substring of some note, each
    changed: frozenset[str] = field(default_factory=frozenset)


CASES = [
    Case("nothing left", UninstallFacts(BARE, "linux")),
    Case("a user's own sageattention without --all stays, said",
         UninstallFacts(replace(BARE, sageattention=SAGE), "linux"),
         notes=("sageattention 2.2.0 stays (pass --all to remove it too)",)),
    Case("all of it, records last",
         UninstallFacts(INSTALLED, "windows", OURS, HOOK, RECORDS),
         everything=True,
         actions=("remove-hook", "uninstall", "put-back", "uninstall", "remove-records"),
         titles=(f"remove the start-up hook {HOOK}", "uninstall sagedoctor-runtime 0.1.0",
                 "put back triton-windows 3.5.1.post24 (sagedoctor replaced it with "
                 "3.6.0.post25)", "uninstall sageattention 2.2.0",
                 f"remove {RECORDS} (records, verification)"),
         changed=frozenset({"sagedoctor-runtime", "triton-windows", "sageattention"})),
    Case("without --all sageattention stays and the put-back is doubted",
         UninstallFacts(INSTALLED, "windows", OURS, HOOK, RECORDS),
         actions=("remove-hook", "uninstall", "put-back", "remove-records"),
         notes=("sageattention 2.2.0 stays", "triton-windows 3.5.1.post24 may not be the one")),
    Case("a sageattention sagedoctor did not install says so under --all",
         UninstallFacts(replace(BARE, sageattention=SAGE), "linux"), everything=True,
         actions=("uninstall",), titles=("uninstall sageattention 2.2.0 (not installed by "
                                         "sagedoctor)",)),
    Case("the user's triton-windows is already back: nothing to put back",
         UninstallFacts(replace(INSTALLED, triton_windows="3.5.1.post24"), "windows", OURS),
         actions=("uninstall",)),
    Case("a hostile record's version is never passed to uv",
         UninstallFacts(INSTALLED, "windows", InstallRecord(
             {}, {"triton-windows": "3.5 --index-url http://evil"})),
         actions=("uninstall",), notes=("is not a version: it is not put back",)),
    Case("invokeai.yaml as sagedoctor left it is put back under --all",
         UninstallFacts(BARE, "linux", config=EditedConfig(CONFIG, "sage", True)),
         everything=True, actions=("restore-invokeai",),
         titles=(f"put back {CONFIG} as it was before sagedoctor set attention_backend: sage",)),
    Case("invokeai.yaml changed since: only the key goes",
         UninstallFacts(BARE, "linux", config=EditedConfig(CONFIG, "sage", False)),
         everything=True, actions=("unset-invokeai-key",),
         titles=(f"remove attention_backend: sage from {CONFIG}",)),
    Case("invokeai.yaml keeps the key without --all, said",
         UninstallFacts(BARE, "linux", config=EditedConfig(CONFIG, "sage", True)),
         notes=(f"{CONFIG} keeps attention_backend: sage (pass --all",)),
    Case("an invokeai.yaml on another backend is not touched",
         UninstallFacts(BARE, "linux", config=EditedConfig(CONFIG, "torch-sdp", True)),
         everything=True),
    Case("an interrupted install is rolled back first",
         UninstallFacts(replace(BARE, runtime="0.1.0"), "linux",
                        interrupted=InterruptedInstall("/state/journal.json", 4242, "changing")),
         actions=("recover", "uninstall")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resolve_uninstall(case: Case) -> None:
    plan = resolve_uninstall(case.facts, case.everything)
    assert isinstance(plan, Plan)
    assert plan.purpose == "uninstall"
    assert plan.prefix == PREFIX and plan.python == f"{PREFIX}/bin/python"
    assert tuple(s.action for s in plan.steps) == case.actions
    assert all(s.action in ACTIONS for s in plan.steps)
    for step, title in zip(plan.steps, case.titles, strict=False):
        assert title in step.title
    for note in case.notes:
        assert any(note in n for n in plan.notes), (note, plan.notes)
    if case.changed:
        assert plan.changed_distributions == case.changed


def test_records_are_always_the_last_step() -> None:
    config = EditedConfig(CONFIG, "sage", True)
    plan = resolve_uninstall(UninstallFacts(INSTALLED, "windows", OURS, HOOK, RECORDS,
                                            config), everything=True)
    assert isinstance(plan, Plan)
    assert plan.steps[-1].action == "remove-records"
    assert [s.action for s in plan.steps].count("remove-records") == 1


def test_put_back_pins_the_recorded_version() -> None:
    plan = resolve_uninstall(UninstallFacts(INSTALLED, "windows", OURS), everything=False)
    assert isinstance(plan, Plan)
    [step] = [s for s in plan.steps if s.action == "put-back"]
    assert step.requirement == "triton-windows==3.5.1.post24"
    assert step.distributions == ("triton-windows",)


def test_an_uninspected_target_blocks() -> None:
    blocked = resolve_uninstall(UninstallFacts(None, "linux"), everything=True)
    assert isinstance(blocked, Blocked)
    assert [f.code for f in blocked.findings] == ["SD190"]
