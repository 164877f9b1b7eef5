"""check and plan agree, over every profile in tests/profiles and generated variations of it.

For each facts: check exits 0 exactly when the plan is empty (2 exactly when the plan says the
machine cannot work); every fix command is one the plan would run or one that exists in that
venv (pip only where pip starts, `uv pip` aimed at the venv's interpreter, never a bare `pip`);
and a fix applied to the facts leaves strictly fewer problems, never the same ones again (the
install's plan, applied, leaves nothing to do: no loop).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename

from sagedoctor import __version__
from sagedoctor.decide.assess import Assessment, assess
from sagedoctor.decide.findings import Finding, exit_code
from sagedoctor.decide.fixes import has_pip, quote
from sagedoctor.facts import (
    Facts,
    Gpu,
    InterruptedInstall,
    InvokeAIPackageFacts,
    SageFacts,
    TorchFacts,
    VerificationFacts,
    load_facts_file,
)
from sagedoctor.index import WheelIndex, shipped_index
from sagedoctor.plan import Blocked, Plan
from sagedoctor.render.plan import plan_exit_code

PROFILES = Path(__file__).parent / "profiles"
INDEX = shipped_index()
ALL_MODULES = ("_fused", "_qattn_sm80", "_qattn_sm89", "_qattn_sm90")

Mutation = Callable[[Facts], Facts | None]


# --- generated variations of a profile -----------------------------------------------------

def _target(facts: Facts, **changes: object) -> Facts | None:
    if facts.target is None:
        return None
    return replace(facts, target=replace(facts.target, **changes))  # type: ignore[arg-type]


def _current_record(facts: Facts, hooked: bool) -> VerificationFacts:
    target = facts.target
    assert target is not None
    return VerificationFacts(
        status="verified", verdict="routing", verified_at="2026-12-03T10:00:00+00:00",
        sageattention=target.sageattention.version if target.sageattention else None,
        torch=target.torch.version if target.torch else None, hooked=hooked)


def with_runtime(facts: Facts) -> Facts | None:
    return _target(facts, runtime=__version__)


def _verified(hooked: bool, stale: bool) -> Mutation:
    def mutate(facts: Facts) -> Facts | None:
        base = with_runtime(facts)
        if base is None or base.target is None or base.target.sageattention is None:
            return None
        record = _current_record(base, hooked)
        if stale:  # a torch rewrite since the verify (the launcher's update, say)
            record = replace(record, torch="2.9.0", changed=("torch",))
        return replace(base, verification=record)
    return mutate


def hooked_no_record(facts: Facts) -> Facts | None:
    base = with_runtime(facts)
    if base is None or base.target is None or base.target.sageattention is None:
        return None
    return replace(base, verification=VerificationFacts(status="unverified", hooked=True))


def leftovers(facts: Facts) -> Facts | None:
    base = with_runtime(facts)
    if base is None or base.target is None or base.target.sageattention is None:
        return None
    sage = replace(base.target.sageattention, leftovers=(
        f"{base.target.site_packages}/sageattention-2.1.1-py3.12.egg",))
    return _target(base, sageattention=sage)


def invokeai_with_backend(config_error: str | None = None,
                          configured: str | None = None) -> Mutation:
    """InvokeAI 6.15 (it declares attention_backend) with invokeai.yaml setting `configured`."""
    def mutate(facts: Facts) -> Facts | None:
        base = with_runtime(facts)
        if base is None or base.target is None or base.invokeai is None \
                or base.invokeai.root is None:
            return None
        package = InvokeAIPackageFacts("6.15.0", True, ("auto", "torch-sdp", "sageattention"))
        inv = replace(base.invokeai, attention_backend=configured, config_error=config_error)
        return replace(_target(base, invokeai=package) or base, invokeai=inv)
    return mutate


def _not_a_root(facts: Facts | None) -> Facts | None:
    """`--root` naming a folder with no invokeai.yaml and no .venv."""
    if facts is None or facts.invokeai is None:
        return None
    return replace(facts, invokeai=replace(facts.invokeai, root_source="--root",
                                           installed=False, venv=None, config_exists=False))


def gpus(*ccs: str) -> Mutation:
    def mutate(facts: Facts) -> Facts | None:
        base = with_runtime(facts)
        if base is None or base.gpu is None or not base.gpu.nvidia:
            return None
        listed = tuple(Gpu(i, "nvidia", f"NVIDIA GPU sm{cc.replace('.', '')}", cc, 24564)
                       for i, cc in enumerate(ccs))
        return replace(base, gpu=replace(base.gpu, gpus=listed))
    return mutate


def plain_triton(facts: Facts) -> Facts | None:
    if facts.system is None or facts.system.os != "windows":
        return None  # plain triton is what Linux torch pins
    return _target(with_runtime(facts) or facts, triton="3.6.0")


def interrupted(base: Mutation, running: bool = False) -> Mutation:
    """A journal a SIGKILLed install left for the venv (or, `running`, one still at work)."""
    def mutate(facts: Facts) -> Facts | None:
        changed = base(facts)
        if changed is None or changed.target is None:
            return None
        return replace(changed, interrupted_install=InterruptedInstall(
            "/state/venvs/0123456789abcdef.install/journal.json", 4242, "changing", running))
    return mutate


MUTATIONS: dict[str, Mutation] = {
    "as-recorded": lambda facts: facts,
    "runtime": with_runtime,
    "verified-hooked": _verified(hooked=True, stale=False),
    "stale-hooked": _verified(hooked=True, stale=True),
    "stale-unhooked": _verified(hooked=False, stale=True),
    "hooked-no-record": hooked_no_record,
    "leftovers": leftovers,
    "invokeai-backend": invokeai_with_backend(),
    "invokeai-backend-yaml-broken": invokeai_with_backend("invokeai.yaml: duplicate key "
                                                          "'attention_type' (line 7)"),
    "invokeai-backend-root-not-a-root": lambda facts: _not_a_root(
        invokeai_with_backend()(facts)),
    # InvokeAI's own switch already on: set back where the hook is chosen (issue 36)
    "invokeai-switch-on": invokeai_with_backend(configured="sageattention"),
    "invokeai-switch-on-b300": lambda facts: (gpus("10.3")(switched) if (
        switched := invokeai_with_backend(configured="sageattention")(facts)) else None),
    "b300": gpus("10.3"),
    "h100-v100": gpus("9.0", "7.0"),
    "b300-h100": gpus("10.3", "9.0"),
    "plain-triton": plain_triton,
    "interrupted": interrupted(lambda facts: facts),
    "interrupted-verified-hooked": interrupted(_verified(hooked=True, stale=False)),
    "interrupted-still-running": interrupted(with_runtime, running=True),
}


def _cases() -> list[tuple[str, str]]:
    return [(path.stem, name) for path in sorted(PROFILES.glob("*.json"))
            for name in MUTATIONS]


def _facts(profile: str, mutation: str) -> Facts | None:
    return MUTATIONS[mutation](load_facts_file(PROFILES / f"{profile}.json"))


def _params() -> list[object]:
    out: list[object] = []
    for profile, mutation in _cases():
        if _facts(profile, mutation) is None:
            continue
        out.append(pytest.param(profile, mutation, id=f"{profile}/{mutation}"))
    return out


# --- the properties --------------------------------------------------------------------------

def _problems(findings: tuple[Finding, ...] | list[Finding]) -> list[tuple[str, str]]:
    return [(f.code, f.detail) for f in findings if f.severity in ("warn", "error")]


def _assert_agreement(facts: Facts, index: WheelIndex) -> Assessment:
    result = assess(facts, index)
    check = exit_code(result.findings)
    plan = result.plan
    empty = isinstance(plan, Plan) and not plan.steps
    said = [(f.code, f.severity, f.detail) for f in result.findings if f.severity != "ok"]
    shown = (plan.findings if isinstance(plan, Blocked)
             else [s.action for s in plan.steps])
    assert (check == 0) == empty, (check, said, shown)
    assert (check == 2) == (plan_exit_code(plan) == 2), (check, said, shown)
    if isinstance(plan, Blocked):
        assert plan_exit_code(plan) == check, (check, said, shown)
    return result


_PIP_VERB = re.compile(r"(?<![\w-])pip (install|uninstall)\b")


def _assert_fixes_fit(facts: Facts, result: Assessment) -> None:
    target = facts.target
    plan = result.plan
    runs_install = isinstance(plan, Plan) and bool(plan.steps)
    os_name = facts.system.os if facts.system else "linux"
    for f in result.findings:
        fix = f.fix
        if not fix:
            continue
        for match in _PIP_VERB.finditer(fix):
            before = fix[:match.start()]
            assert before.endswith(("-m ", "uv ")), (f.code, fix)  # never a bare `pip`
        if target is not None:
            python = quote(target.executable, os_name)
            if " -m pip " in fix:
                assert has_pip(target), (f.code, fix)
                assert f"{python} -m pip " in fix, (f.code, fix)
            if "uv pip " in fix:
                assert f"--python {python}" in fix, (f.code, fix)
            if "sagedoctor verify" in fix:
                assert target.runtime is not None, (f.code, fix)  # its self-test is in it
        if isinstance(plan, Plan):  # a Triton the fix installs is the one the plan installs
            planned = [s.requirement for s in plan.steps if s.action == "install"
                       and s.requirement and s.requirement.startswith("triton-windows")]
            for spec in re.findall(r'"(triton-windows[^"]*)"', fix):
                assert not planned or spec in planned, (f.code, fix, planned)
        if "sagedoctor install" in fix:
            assert runs_install or fix.startswith(("first fix SD", "none here")), \
                (f.code, fix, plan)
            if isinstance(plan, Blocked):
                for code in re.findall(r"SD\d{3}", fix.split(";")[0]):
                    assert code in {b.code for b in plan.findings}, (f.code, fix)


def _assert_install_leaves_nothing_to_do(facts: Facts, result: Assessment) -> None:
    if not isinstance(result.plan, Plan) or not result.plan.steps:
        return
    after = assess(apply_plan(facts, result.plan), INDEX)
    left = [(f.code, f.detail) for f in after.findings if f.severity == "error"]
    assert isinstance(after.plan, Plan) and not after.plan.steps, (left, after.plan)
    assert exit_code(after.findings) == 0, left
    assert len(_problems(after.findings)) < len(_problems(result.findings))


@pytest.mark.parametrize(("profile", "mutation"), _params())
def test_check_and_plan_agree(profile: str, mutation: str) -> None:
    facts = _facts(profile, mutation)
    assert facts is not None
    result = _assert_agreement(facts, INDEX)
    _assert_fixes_fit(facts, result)
    _assert_install_leaves_nothing_to_do(facts, result)


@pytest.mark.parametrize(("profile", "mutation"), _params())
def test_each_fix_leaves_fewer_problems(profile: str, mutation: str) -> None:
    facts = _facts(profile, mutation)
    assert facts is not None
    result = assess(facts, INDEX)
    before = _problems(result.findings)
    for f in result.findings:
        if f.severity not in ("warn", "error"):
            continue  # an info's fix is a suggestion, not a problem solved
        fixed = apply_fix(facts, f, result.plan)
        if fixed is None:  # prose: a driver update, another GPU; nothing to replay
            continue
        after = assess(fixed, INDEX)
        now = _problems(after.findings)
        assert len(now) < len(before), (f.code, f.fix, before, now)
        assert (f.code, f.detail) not in now, (f.code, f.fix, now)


def test_the_variations_are_not_vacuous() -> None:
    results = [assess(f, INDEX) for p, m in _cases() if (f := _facts(p, m)) is not None]
    assert len(results) >= 300
    empty = [r for r in results if isinstance(r.plan, Plan) and not r.plan.steps]
    steps = [r for r in results if isinstance(r.plan, Plan) and r.plan.steps]
    blocked = [r for r in results if isinstance(r.plan, Blocked)]
    assert len(empty) >= 10 and len(steps) >= 50 and len(blocked) >= 50
    codes = {f.code for r in results for f in r.findings if f.severity == "error"}
    assert {"SD168", "SD191", "SD193", "SD183", "SD165", "SD205", "SD203", "SD204",
            "SD197", "SD199", "SD194"} <= codes


# --- what a fix does to the facts (the model the properties replay) ---------------------------

def _version_in(spec: str) -> str:
    wanted = SpecifierSet(spec)
    for minor in range(12, -1, -1):
        candidate = f"3.{minor}.0"
        if wanted.contains(candidate):
            return candidate
    raise AssertionError(f"no triton-windows version satisfies {spec}")


def apply_plan(facts: Facts, plan: Plan) -> Facts:
    """The facts as `install` leaves them: each step's effect, then the verify."""
    assert facts.target is not None
    target = facts.target
    inv = facts.invokeai
    record = facts.verification
    pending = facts.interrupted_install
    for step in plan.steps:
        if step.action == "recover":
            pending = None
        elif step.action == "uninstall":
            if "triton" in step.distributions:
                target = replace(target, triton=None)
            if "sageattention" in step.distributions:
                target = replace(target, sageattention=None)
        elif step.action == "remove-leftovers" and target.sageattention is not None:
            target = replace(target, sageattention=replace(target.sageattention, leftovers=()))
        elif step.action == "install" and step.requirement:
            spec = step.requirement.removeprefix("triton-windows")
            target = replace(target, triton_windows=_version_in(spec))
        elif step.action == "install-wheel" and step.wheel is not None:
            version = str(parse_wheel_filename(step.wheel.file)[1])
            target = replace(target, sageattention=SageFacts(version, ALL_MODULES, None))
        elif step.action == "install-from-index" and step.requirement:
            version = step.requirement.split("==", 1)[1]
            target = replace(target, sageattention=SageFacts(version, ALL_MODULES, None))
        elif step.action == "build-from-source":
            target = replace(target, sageattention=SageFacts("2.2.0", ALL_MODULES, None))
        elif step.action == "bundle-runtime" and step.requirement:
            target = replace(target, runtime=step.requirement.split("==", 1)[1])
        elif step.action == "enable-invokeai" and inv is not None:
            inv = replace(inv, attention_backend=dict(step.config)["attention_backend"])
        elif step.action == "remove-hook" and record is not None:
            record = replace(record, hook_problem=None)
        elif step.action == "verify":
            hooked = record.hooked if record is not None else False
            # the same GPU measures the apps' shapes as the verify before did
            shapes = record.app_shapes if record is not None else ()
            record = replace(_current_record(replace(facts, target=target), hooked),
                             app_shapes=shapes)
    return replace(facts, target=target, invokeai=inv, verification=record,
                   interrupted_install=pending)


_TORCH = re.compile(r"torch==(?P<version>[\w.]+?)(?:\+\w+)? --index-url "
                    r"https://download\.pytorch\.org/whl/cu(?P<cuda>\d+)")


def apply_fix(facts: Facts, f: Finding, plan: Plan | Blocked) -> Facts | None:
    """The facts after the user ran the fix's command; None where it is prose."""
    fix, target = f.fix, facts.target
    if not fix or target is None or fix.startswith(("first fix", "none here")):
        return None
    if fix.startswith("`sagedoctor install") or fix.startswith("sagedoctor install"):
        assert isinstance(plan, Plan) and plan.steps, (f.code, fix)
        return apply_plan(facts, plan)
    if fix.startswith("sagedoctor verify"):
        hooked = facts.verification.hooked if facts.verification else False
        return replace(facts, verification=_current_record(facts, hooked))
    torch = _TORCH.search(fix)
    if torch is not None:
        cuda = f"{torch['cuda'][:-1]}.{torch['cuda'][-1]}"
        label = f"{torch['version']}+cu{torch['cuda']}"
        fixed = _target(facts, torch=TorchFacts(label, label, cuda, None))
        toolkit = re.search(r"Install a CUDA (?P<major>\d+) toolkit", fix)
        if toolkit is not None and fixed is not None and fixed.toolchain is not None:
            fixed = replace(fixed, toolchain=replace(fixed.toolchain,
                                                     nvcc_version=f"{toolkit['major']}.0.88"))
        pair = INDEX.triton.pair_for(label)
        if "brings the triton it pins" in fix and pair is not None and pair.linux:
            fixed = _target(fixed or facts, triton=f"{pair.linux[0]}.{pair.linux[1]}.0")
        return fixed
    triton = re.search(r'"triton-windows(?P<spec>[^"]*)"', fix)
    if triton is not None:
        return _target(facts, triton_windows=_version_in(triton["spec"] or ">=0"))
    if re.search(r"uninstall (--python \S+ )?(-y )?triton$", fix):
        return _target(facts, triton=None)
    return None


# --- the contradictions issue 19 found, one by one -------------------------------------------

def _profile(name: str) -> Facts:
    return load_facts_file(PROFILES / f"{name}.json")


def _codes(result: Assessment, severity: str) -> set[str]:
    return {f.code for f in result.findings if f.severity == severity}


def test_a_hand_install_without_the_runtime_is_named_by_check() -> None:
    # Windows 4090, SageAttention and triton-windows right: the plan bundles the runtime, so
    # check says so (it said "No problems found" while the plan installed and verified)
    result = assess(_profile("windows-4090-unverified"), INDEX)
    assert isinstance(result.plan, Plan)
    assert [s.action for s in result.plan.steps] == ["bundle-runtime", "verify"]
    assert "SD191" in _codes(result, "error") and exit_code(result.findings) == 1
    with_it = with_runtime(_profile("windows-4090-unverified"))
    assert with_it is not None
    ready = assess(with_it, INDEX)
    assert isinstance(ready.plan, Plan) and not ready.plan.steps
    assert exit_code(ready.findings) == 0


def test_an_ignored_v100_asks_nothing_of_torch() -> None:
    result = assess(_profile("linux-h100-plus-v100"), INDEX)
    sd144 = [f for f in result.findings if f.code == "SD144"]
    assert [(f.severity, f.fix) for f in sd144] == [("info", "")]
    assert not any("torch==" in f.fix for f in result.findings)


def test_invokeai_that_would_refuse_to_start_blocks_the_plan() -> None:
    result = assess(_profile("windows-invokeai-backend-set-but-unsupported"), INDEX)
    assert isinstance(result.plan, Blocked)
    assert [f.code for f in result.plan.findings] == ["SD184"]
    assert plan_exit_code(result.plan) == exit_code(result.findings) == 1


def test_b300_is_the_same_sd205_in_check_and_plan() -> None:
    facts = gpus("10.3")(_profile("wsl-rtx3090-needs-install"))
    assert facts is not None
    result = assess(facts, INDEX)
    assert isinstance(result.plan, Blocked)
    assert [f.code for f in result.plan.findings] == ["SD205"]
    sd205 = [f for f in result.findings if f.code == "SD205"]
    assert len(sd205) == 1 and sd205[0].severity == "error" and "sm103" in sd205[0].detail
    assert exit_code(result.findings) == plan_exit_code(result.plan) == 1
    sd161 = next(f for f in result.findings if f.code == "SD161")
    assert sd161.fix.startswith("first fix SD205")  # not `sagedoctor install`, which refuses


def test_a_blocked_build_points_the_install_fix_at_the_blocker() -> None:
    result = assess(_profile("linux-nvcc-major-mismatch-no-gcc"), INDEX)
    assert isinstance(result.plan, Blocked)
    assert {f.code for f in result.plan.findings} == {"SD204"}
    assert "SD204" in _codes(result, "error")  # check shows what the plan blocks on
    installs = [f for f in result.findings if "sagedoctor install" in f.fix]
    assert installs and all(f.fix.startswith("first fix SD204") for f in installs)


def test_plain_triton_on_windows_says_triton_windows_comes_back() -> None:
    result = assess(_profile("windows-plain-triton"), INDEX)
    fix = next(f.fix for f in result.findings if f.code == "SD153")
    assert "uninstall" in fix and '--reinstall-package triton-windows "triton-windows' in fix
    assert isinstance(result.plan, Plan)
    assert [s.action for s in result.plan.steps][:2] == ["uninstall", "install"]


def test_a_hooked_venv_after_a_torch_rewrite_is_a_fixable_error() -> None:
    facts = _verified(hooked=True, stale=True)(_profile("linux-h200-ready"))
    assert facts is not None
    result = assess(facts, INDEX)
    sd168 = next(f for f in result.findings if f.code == "SD168")
    assert sd168.severity == "error" and "start-up hook is on" in sd168.detail
    assert exit_code(result.findings) == 1
    assert isinstance(result.plan, Plan) and [s.action for s in result.plan.steps] == ["verify"]
    stale = _verified(hooked=False, stale=True)(_profile("linux-h200-ready"))
    assert stale is not None
    unhooked = assess(stale, INDEX)
    assert exit_code(unhooked.findings) == 0  # without the hook it stays a warning
    assert isinstance(unhooked.plan, Plan) and not unhooked.plan.steps


def test_the_gtx_1080_message_names_the_capability_it_needs() -> None:
    result = assess(_profile("linux-gtx1080-cu128"), INDEX)
    sd112 = next(f for f in result.findings if f.code == "SD112")
    assert "compute capability 6.1" in sd112.detail and "needs 8.0 or newer" in sd112.detail
    assert "8.0" in sd112.fix


def test_a_pending_journal_on_a_ready_venv_is_sd199_and_a_recover_only_plan() -> None:
    ready = [f for p, _m in _cases() if (f := _facts(p, "verified-hooked")) is not None
             and isinstance((r := assess(f, INDEX)).plan, Plan) and not r.plan.steps
             and exit_code(r.findings) == 0]
    assert ready, "no profile is ready once verified"
    facts = interrupted(lambda f: f)(ready[0])
    assert facts is not None
    result = assess(facts, INDEX)
    assert exit_code(result.findings) == 1 and _codes(result, "error") == {"SD199"}
    assert isinstance(result.plan, Plan)
    assert [s.action for s in result.plan.steps] == ["recover"]
    assert any("planned again" in n for n in result.plan.notes)
    assert apply_plan(facts, result.plan).interrupted_install is None
