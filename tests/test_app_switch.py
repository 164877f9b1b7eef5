"""Which switch routes InvokeAI: its own attention_backend where its kernel table serves every
GPU here, sagedoctor's start-up hook where it has none (sm75, sm87, sm103, sm110: InvokeAI then
stays on SDPA); `--use` overrides. Over the saved machine profiles (facts files)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sagedoctor.decide.app_switch import choose_invokeai_switch, invokeai_kernel
from sagedoctor.decide.checks.apps import switch_findings
from sagedoctor.decide.requirements import invokeai_switch_pending
from sagedoctor.decide.resolve import resolve_plan
from sagedoctor.decide.resolve.steps import ResolveOptions
from sagedoctor.facts import Facts, Gpu, load_facts_file
from sagedoctor.index import shipped_index
from sagedoctor.plan import Plan

PROFILES = Path(__file__).parent / "profiles"
INDEX = shipped_index()


def profile(name: str) -> Facts:
    return load_facts_file(PROFILES / f"{name}.json")


def with_gpu(facts: Facts, name: str, cc: str) -> Facts:
    assert facts.gpu is not None
    return replace(facts, gpu=replace(facts.gpu, gpus=(Gpu(0, "nvidia", name, cc, 8192),)))


@pytest.mark.parametrize(("cc", "cuda", "kernel"), [
    ("8.0", "13.0", "fp16 CUDA (fp32 accumulation)"), ("8.6", "13.0", "fp16 Triton"),
    ("8.9", "12.8", "fp8 CUDA (fp32+fp16 accumulation)"),
    ("8.9", "12.6", "fp8 CUDA (fp32+fp32 accumulation)"),
    ("9.0", "13.0", "sm90 fp8 (fp32+fp32 accumulation)"), ("10.0", "13.0", "fp8 per-warp"),
    ("12.0", "13.0", "fp8 per-warp"), ("12.1", "13.0", "fp8 per-warp"),
    ("7.5", "13.0", None), ("8.7", "12.6", None), ("10.3", "13.0", None),
    ("11.0", "13.0", None), ("7.0", "13.0", None), (None, "13.0", None)])
def test_invokeai_kernel_table(cc: str | None, cuda: str, kernel: str | None) -> None:
    assert invokeai_kernel(cc, cuda) == kernel


def test_turing_never_gets_the_setting_written_and_the_plan_says_why() -> None:
    facts = profile("windows-rtx2080-invokeai-switch")
    plan = resolve_plan(facts, INDEX)
    assert isinstance(plan, Plan)
    assert "enable-invokeai" not in [s.action for s in plan.steps]
    note = next(n for n in plan.notes if "attention_backend: sage is not written" in n)
    assert "no kernel for NVIDIA GeForce RTX 2080 SUPER (sm75)" in note
    assert "sagedoctor's start-up hook routes instead" in note
    assert invokeai_switch_pending(facts) is None


@pytest.mark.parametrize(("name", "cc"), [("Orin (nvgpu)", "8.7"), ("NVIDIA B300", "10.3"),
                                          ("NVIDIA Thor", "11.0"), ("Tesla T4", "7.5")])
def test_no_kernel_gpus_choose_the_hook(name: str, cc: str) -> None:
    facts = with_gpu(profile("windows-invokeai-backend-not-set"), name, cc)
    choice = choose_invokeai_switch(facts)
    assert (choice.use, choice.app_serves) == ("sagedoctor", False)
    assert f"{name} (sm{cc.replace('.', '')})" in choice.why
    assert invokeai_switch_pending(facts) is None
    result = resolve_plan(facts, INDEX)
    steps = result.steps if isinstance(result, Plan) else []
    assert "enable-invokeai" not in [s.action for s in steps]


def test_jetson_with_the_switch_already_on_is_a_warning_with_the_fix() -> None:
    [found] = switch_findings(profile("linux-orin-invokeai-switch-on"))
    assert (found.code, found.severity) == ("SD194", "warn")
    assert "is on but has no kernel here: SDPA serves" in found.detail
    assert found.fix.startswith("set attention_backend: auto")


def test_a_gpu_it_serves_gets_its_own_switch_and_the_kernel_is_named() -> None:
    facts = profile("windows-invokeai-backend-not-set")
    plan = resolve_plan(facts, INDEX)
    assert isinstance(plan, Plan)
    step = next(s for s in plan.steps if s.action == "enable-invokeai")
    assert "RTX 4090 (sm89) with its fp8 CUDA (fp32+fp16 accumulation) kernel" in step.reason


def test_one_gpu_without_a_kernel_beside_one_with_chooses_the_hook() -> None:
    facts = profile("windows-invokeai-backend-not-set")
    assert facts.gpu is not None
    both = replace(facts, gpu=replace(facts.gpu, gpus=(
        Gpu(0, "nvidia", "NVIDIA GeForce RTX 3090", "8.6", 24576),
        Gpu(1, "nvidia", "NVIDIA GeForce RTX 2080", "7.5", 8192))))
    choice = choose_invokeai_switch(both)
    assert choice.use == "sagedoctor" and "RTX 2080 (sm75)" in choice.why
    assert "RTX 3090" not in choice.why


def test_use_overrides_either_way_and_says_so() -> None:
    served = profile("windows-invokeai-backend-not-set")
    turing = profile("windows-rtx2080-invokeai-switch")
    forced_hook = resolve_plan(served, INDEX, ResolveOptions(use="sagedoctor"))
    assert isinstance(forced_hook, Plan)
    assert "enable-invokeai" not in [s.action for s in forced_hook.steps]
    assert any("--use sagedoctor" in n for n in forced_hook.notes)
    forced_app = resolve_plan(turing, INDEX, ResolveOptions(use="app"))
    assert isinstance(forced_app, Plan)
    step = next(s for s in forced_app.steps if s.action == "enable-invokeai")
    assert "--use app: InvokeAI's own scope has no kernel" in step.reason


def test_the_tui_line_and_its_switch_take_the_hook_where_invokeai_has_no_kernel() -> None:
    from sagedoctor.invokeai import choose_route
    from sagedoctor.tui.invokeai_switch import state_line

    facts = profile("windows-rtx2080-invokeai-switch")
    assert facts.target is not None
    route = choose_route(facts.target, facts)
    assert (route.kind, route.choice) == ("hook", None)
    assert choose_route(facts.target).kind == "setting"  # without the GPU facts: the setting
    line = state_line(facts.target, facts.invokeai, facts)
    assert line.startswith("InvokeAI 6.15.0: start-up hook off (InvokeAI's own scope has no "
                           "kernel for NVIDIA GeForce RTX 2080 SUPER (sm75)")


def test_diffusers_backend_is_read_from_the_environment_and_noted() -> None:
    from sagedoctor.decide.checks.apps import check_diffusers
    from sagedoctor.probe.system import diffusers_backend, probe_system

    assert diffusers_backend({}) is None
    assert diffusers_backend({"DIFFUSERS_ATTN_BACKEND": " sage_hub "}) == "sage_hub"
    assert diffusers_backend({"DIFFUSERS_ATTN_BACKEND": "sage\x1b[2J; rm"}) == \
        "(a value that is no backend name)"
    seen = probe_system(env={"DIFFUSERS_ATTN_BACKEND": "_sage_qk_int8_pv_fp8_cuda"})
    assert seen.diffusers_attn_backend == "_sage_qk_int8_pv_fp8_cuda"

    facts = profile("windows-invokeai-backend-not-set")
    assert facts.system is not None and check_diffusers(facts) == []
    sage = replace(facts, system=replace(facts.system, diffusers_attn_backend="sage"))
    [note] = check_diffusers(sage)
    assert note.code == "SD155" and "SageAttention itself (sage)" in note.detail
    assert note.detail.endswith("start-up hook is off")
    from sagedoctor.facts import VerificationFacts

    hooked = replace(sage, verification=VerificationFacts("verified", "routing", hooked=True))
    assert check_diffusers(hooked)[0].detail.endswith("stands aside in processes started "
                                                      "with it")
    native = replace(hooked, system=replace(facts.system, diffusers_attn_backend="flash"))
    assert check_diffusers(native)[0].detail == ("DIFFUSERS_ATTN_BACKEND=flash: diffusers uses "
                                                 "its flash backend; sagedoctor's start-up "
                                                 "hook routes what reaches SDPA")
