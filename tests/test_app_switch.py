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
from sagedoctor.runtime.decisions import Calibration

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


def test_jetson_with_the_switch_already_on_is_an_error_the_blocked_install_cannot_fix() -> None:
    from sagedoctor.decide.assess import assess

    facts = profile("linux-orin-invokeai-switch-on")
    [found] = switch_findings(facts)
    assert (found.code, found.severity) == ("SD194", "error")
    assert "is on but has no kernel here: SDPA serves" in found.detail
    assert found.detail.endswith("The install sets attention_backend: auto")
    assert found.fix == "sagedoctor install --venv /home/ana/app/.venv"
    # SageAttention cannot work on a Jetson at all (SD114): the fix points there instead
    [said] = [f for f in assess(facts, INDEX).findings if f.code == "SD194"]
    assert said.fix == "none here: SageAttention cannot work on this machine (SD114)"


def with_switch_on(facts: Facts, choices: tuple[str, ...] = ("auto", "torch-sdp", "sage")
                   ) -> Facts:
    """invokeai.yaml selects InvokeAI's own switch (`attention_backend: sage`)."""
    assert facts.target is not None and facts.target.invokeai is not None
    assert facts.invokeai is not None
    package = replace(facts.target.invokeai, attention_backend_choices=choices)
    return replace(facts, target=replace(facts.target, invokeai=package),
                   invokeai=replace(facts.invokeai, attention_backend="sage"))


@pytest.mark.parametrize(("name", "use"), [
    ("linux-h100-invokeai-rule-slower", None),  # verify measured its rule's shapes slower
    ("windows-rtx2080-invokeai-switch", None),  # no kernel for sm75 in InvokeAI's table
    ("windows-invokeai-backend-not-set", "sagedoctor")])  # served, but --use sagedoctor
def test_where_the_hook_is_chosen_the_plan_sets_invokeais_switch_back(
        name: str, use: str | None) -> None:
    from sagedoctor.decide.assess import assess
    from sagedoctor.decide.findings import exit_code

    facts = with_switch_on(profile(name))
    options = ResolveOptions(use=use)
    result = assess(facts, INDEX, options)
    plan = result.plan
    assert isinstance(plan, Plan)
    [step] = [s for s in plan.steps if s.action == "enable-invokeai"]
    assert step.config == (("attention_backend", "auto"),)
    assert facts.invokeai is not None and step.paths == (facts.invokeai.config_path,)
    assert step.title == ("Set attention_backend: auto in invokeai.yaml (was sage: "
                          "sagedoctor's hook routes instead)")
    assert choose_invokeai_switch(facts, use).why in step.reason
    assert not any("is not written" in n for n in plan.notes)  # the step says it now
    [sd194] = [f for f in result.findings if f.code == "SD194"]
    assert sd194.severity == "error" and exit_code(result.findings) == 1
    assert "The install sets attention_backend: auto" in sd194.detail
    assert sd194.fix.startswith("sagedoctor install --venv ")
    # with the switch set back, nothing is left to do about it: one router, the hook
    after = replace(facts, invokeai=replace(facts.invokeai, attention_backend="auto"))
    again = assess(after, INDEX, options)
    assert isinstance(again.plan, Plan)
    assert "enable-invokeai" not in [s.action for s in again.plan.steps]
    assert [f.severity for f in again.findings if f.code == "SD194"] == ["info"]


def test_the_switch_goes_back_to_a_choice_this_invokeai_offers() -> None:
    from sagedoctor.decide.requirements import invokeai_switch_reset

    facts = profile("windows-rtx2080-invokeai-switch")
    assert invokeai_switch_reset(with_switch_on(facts)) == "auto"
    assert invokeai_switch_reset(with_switch_on(facts, ("torch-sdp", "sage"))) == "torch-sdp"
    assert invokeai_switch_reset(with_switch_on(facts, ("sage",))) is None  # nothing else
    only_sage = resolve_plan(with_switch_on(facts, ("sage",)), INDEX)
    assert isinstance(only_sage, Plan)
    assert "enable-invokeai" not in [s.action for s in only_sage.steps]
    assert any("offers no other value to set" in n for n in only_sage.notes)
    # where InvokeAI's own switch is the better one, a yaml that selects it is left alone
    served = with_switch_on(profile("windows-invokeai-backend-not-set"))
    assert invokeai_switch_reset(served) is None
    assert invokeai_switch_reset(served, "sagedoctor") == "auto"
    # --enable-invokeai off (the TUI's toggle): the yaml is not touched
    untouched = resolve_plan(with_switch_on(facts), INDEX,
                             ResolveOptions(enable_invokeai=False))
    assert isinstance(untouched, Plan)
    assert "enable-invokeai" not in [s.action for s in untouched.steps]


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
    from sagedoctor.apps.invokeai import choose_route
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


# --- verify's measurements at InvokeAI's shapes against its fixed rule ----------------------

def test_invokeai_rule_is_its_published_thresholds() -> None:
    from sagedoctor.decide.app_switch import invokeai_rule_routes

    assert invokeai_rule_routes(64, 4096, 4096) and invokeai_rule_routes(128, 1536, 512)
    assert not invokeai_rule_routes(128, 1535, 4096)  # query below 1536
    assert not invokeai_rule_routes(128, 4096, 511)  # key below 512
    assert not invokeai_rule_routes(80, 4096, 4096)  # SD1.5's head sizes stay on SDPA


def test_where_verify_measured_its_shapes_slower_the_hook_is_chosen_and_said() -> None:
    facts = profile("linux-h100-invokeai-rule-slower")
    choice = choose_invokeai_switch(facts)
    assert choice.use == "sagedoctor" and choice.app_serves
    assert choice.why.startswith(
        "InvokeAI's rule would send SDXL 1024x1024 (4096 tokens) to SageAttention, and verify "
        "measured the kernel there (sage_fp8_sm90) at 0.68x SDPA on NVIDIA H100 80GB HBM3")
    assert "FLUX 1024x1024 (4608 tokens) 0.75x" in choice.why
    assert choice.why.endswith("sagedoctor's hook keeps them on SDPA")
    result = resolve_plan(facts, INDEX)
    assert isinstance(result, Plan)
    assert "enable-invokeai" not in [s.action for s in result.steps]
    assert any("0.68x SDPA" in n and n.endswith("the start-up hook is on")
               for n in result.notes)
    forced = choose_invokeai_switch(facts, "app")
    assert (forced.use, forced.forced) == ("app", True) and "--use app: " in forced.why
    assert invokeai_switch_pending(facts, "app") == "sage"


def test_measurements_that_agree_keep_invokeais_switch_and_stale_ones_are_not_used() -> None:
    facts = profile("linux-h100-invokeai-rule-slower")
    record = facts.verification
    assert record is not None
    faster = tuple(replace(s, speedup=1.12, route=True) for s in record.app_shapes)
    agree = replace(facts, verification=replace(record, app_shapes=faster))
    choice = choose_invokeai_switch(agree)
    assert choice.use == "app"
    assert choice.why.endswith("verify measured its shapes faster here: SDXL 1024x1024 (4096 "
                               "tokens) 1.12x on NVIDIA H100 80GB HBM3, FLUX 1024x1024 (4608 "
                               "tokens) 1.12x on NVIDIA H100 80GB HBM3")
    # a record of another SageAttention build says nothing about this one
    stale = replace(facts, verification=replace(record, sageattention="2.1.1"))
    assert choose_invokeai_switch(stale).use == "app"
    assert choose_invokeai_switch(stale).why.endswith("no verify measurements at its shapes yet")
    # Wan is no InvokeAI model: its shape does not count
    wan = replace(record.app_shapes[0], shape="Wan 2.1 720p", head_dim=128, tokens=32760)
    only_wan = replace(facts, verification=replace(record, app_shapes=(wan,)))
    assert choose_invokeai_switch(only_wan).use == "app"


def test_the_probe_reads_verifys_app_shape_decisions_from_the_venv(tmp_path: Path) -> None:
    from sagedoctor.probe.verification import app_shape_speeds
    from sagedoctor.runtime.decisions import (
        Calibration,
        Decision,
        GpuDecisions,
        save_calibration,
        shape_key,
    )
    from sagedoctor.runtime.files import CALIBRATION, record_file

    assert app_shape_speeds(tmp_path) == ()  # no file: nothing
    slow = Decision(False, "sage_fp8_sm90", 0.6812, 0.66, 0.70, 5, "verify")
    other = Decision(True, "sage_fp8_sm90", 1.2, 1.1, 1.3, 5, "verify")
    decisions = {shape_key("bfloat16", 64, 20, 4096, 4096, False): slow,
                 shape_key("bfloat16", 128, 24, 3000, 3000, False): other}  # no app shape
    path = Path(record_file(str(tmp_path), CALIBRATION))
    path.parent.mkdir()
    save_calibration(str(path), Calibration(gpus={"GPU-1": GpuDecisions(
        "NVIDIA H100 80GB HBM3", "9.0", decisions)}))
    [found] = app_shape_speeds(tmp_path)
    assert (found.shape, found.head_dim, found.tokens, found.speedup, found.route) == (
        "SDXL 1024x1024", 64, 4096, 0.681, False)
    path.write_bytes(b"{not json")
    assert app_shape_speeds(tmp_path) == ()  # a corrupt file: nothing, no crash


def test_plan_json_carries_the_choice_and_its_reason() -> None:
    import json

    from sagedoctor.render.plan import render_plan_json

    result = resolve_plan(profile("linux-h100-invokeai-rule-slower"), INDEX,
                          ResolveOptions(use="app"))
    assert isinstance(result, Plan)
    [switch] = json.loads(render_plan_json(result, "index"))["plan"]["switches"]
    assert (switch["app"], switch["use"], switch["forced"]) == ("InvokeAI", "app", True)
    assert switch["why"].startswith("--use app: InvokeAI's rule would send SDXL 1024x1024")
    plain = resolve_plan(profile("linux-h200-ready"), INDEX)
    assert isinstance(plain, Plan) and plain.switches == ()  # no app with a switch


def test_use_on_the_command_line_reaches_check_and_plan(tmp_path: Path) -> None:
    import json

    from tests.standins import clean_env, run_cli

    facts = str(PROFILES / "linux-h100-invokeai-rule-slower.json")
    env = clean_env(tmp_path)
    report = json.loads(run_cli(["check", "--json", "--facts", facts, "--use", "app"],
                                env).stdout)
    [pair] = [f for f in report["findings"] if f["code"] == "SD194"]
    assert "Better here: InvokeAI's own switch: --use app: InvokeAI's rule" in pair["detail"]
    assert any(f["code"] == "SD193" for f in report["findings"])  # now it is to be set
    plan = json.loads(run_cli(["plan", "--json", "--facts", facts], env).stdout)
    assert plan["plan"]["switches"][0]["use"] == "sagedoctor"
    bad = run_cli(["plan", "--facts", facts, "--use", "both"], env)
    assert bad.returncode == 64 and "invalid choice: 'both'" in bad.stderr


# --- verify: what InvokeAI's fixed rule does at its shapes on this GPU ------------------------

def _calibration(arch: str, name: str,
                 speeds: dict[tuple[int, int, int], float]) -> Calibration:
    from sagedoctor.runtime.decisions import Decision, GpuDecisions, shape_key

    decisions = {shape_key("bfloat16", d, bh, n, n, False):
                 Decision(x >= 1.0, "sage_fp8_sm90", x, x - 0.02, x + 0.02, 5, "verify")
                 for (d, bh, n), x in speeds.items()}
    return Calibration(gpus={"GPU-1": GpuDecisions(name, arch, decisions)})


def test_verify_says_what_invokeais_rule_does_at_its_shapes_for_an_invokeai_venv(
        tmp_path: Path) -> None:
    from sagedoctor.commands.verify import render_run
    from sagedoctor.verify import VerifyRun

    data = _calibration("9.0", "NVIDIA H100 80GB HBM3", {(64, 20, 4096): 0.68,
                                                         (128, 24, 4608): 0.75,
                                                         (128, 24, 9728): 1.09,
                                                         (128, 40, 32760): 1.3})
    run = VerifyRun(1, {"torch_cuda": "13.0"}, (), data, tmp_path / "c.json", "routing", 1.0,
                    "")
    text = render_run(run, 1, invokeai=True)
    assert ("InvokeAI's own switch (attention_backend: sage) on NVIDIA H100 80GB HBM3 (sm90):\n"
            "  SDXL 1024x1024 (4096 tokens): its rule sends it to its sm90 fp8 (fp32+fp32 "
            "accumulation) kernel; verify measured sage_fp8_sm90 there at 0.68x SDPA (slower); "
            "sagedoctor's hook keeps it on SDPA\n") in text
    assert ("  FLUX 1536x1536 (9728 tokens): its rule sends it to its sm90 fp8 (fp32+fp32 "
            "accumulation) kernel; verify measured sage_fp8_sm90 there at 1.09x SDPA (faster); "
            "sagedoctor's hook routes it too\n") in text
    assert "Wan" not in text.split("InvokeAI's own switch")[1]  # no InvokeAI model
    assert "InvokeAI's own switch" not in render_run(run, 1, invokeai=False)


def test_verify_on_a_gpu_invokeai_has_no_kernel_for() -> None:
    from sagedoctor.verify import render_app_rules

    data = _calibration("8.7", "Orin (nvgpu)", {(64, 20, 4096): 1.2})
    assert render_app_rules(data, "12.6") == (
        "InvokeAI's own switch (attention_backend: sage) on Orin (nvgpu) (sm87):\n"
        "  no kernel for this GPU in its table: every call stays on SDPA; sagedoctor's hook "
        "is the switch that can route here\n")


def test_a_measurement_of_another_kernel_than_invokeais_is_said_as_such() -> None:
    facts = profile("linux-h100-invokeai-rule-slower")
    record = facts.verification
    assert record is not None and facts.gpu is not None
    # an RTX 3090: InvokeAI calls the Triton kernel, verify timed the CUDA fp16 one
    ampere = replace(facts, gpu=replace(facts.gpu, gpus=(
        Gpu(0, "nvidia", "NVIDIA GeForce RTX 3090", "8.6", 24576),)),
        verification=replace(record, app_shapes=tuple(
            replace(s, name="NVIDIA GeForce RTX 3090", arch="8.6", kernel="sage_fp16_cuda")
            for s in record.app_shapes)))
    why = choose_invokeai_switch(ampere).why
    assert "(sage_fp16_cuda) at 0.68x SDPA on NVIDIA GeForce RTX 3090; InvokeAI's own fp16 " \
           "Triton kernel was not timed" in why
    assert "was not timed" not in choose_invokeai_switch(facts).why  # the H100: the same one
