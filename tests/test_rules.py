"""The rules derived from today's torch (issue 18): PyTorch's CUDA matrix, the one Triton
requirement `check` and `plan` share, and the C++ standard of a source build, compiled for
real against torch 2.14's own headers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.findings import Finding
from sagedoctor.decide.matrix import (
    TORCH_CUDA_MATRIX,
    index_urls_for,
    newest_torch_serving,
    pick_variant,
    torch_index_url,
    torch_release,
)
from sagedoctor.decide.resolve import resolve_plan
from sagedoctor.decide.toolchain import (
    cxx_standard_for,
    cxx_toolchain_problems,
)
from sagedoctor.decide.triton import triton_requirement
from sagedoctor.decide.versions import parse_sage_local, sage_serves_torch, torch_build
from sagedoctor.facts import Facts, Gpu, TorchFacts, facts_from_dict, load_facts_file
from sagedoctor.index import shipped_index
from sagedoctor.install.source_build import cxx_std_flag, prepare_tree
from sagedoctor.plan import Blocked, BuildSettings, Plan
from sagedoctor.probe.target import probe_target
from tests.profiles.make_profiles import WIN_4090, merge
from tests.standins import add_torch, make_venv, venv_python

PROFILES = Path(__file__).parent / "profiles"
INDEX = shipped_index()
POST6_130 = "sageattention-2.2.0+cu130torch2.10.0andhigher.post6-cp310-abi3-win_amd64.whl"


def _gpu(cc: str, index: int = 0) -> Gpu:
    return Gpu(index, "nvidia", f"GPU sm{cc}", cc, 8192)


def _torch(version: str, pin: str | None = None) -> TorchFacts:
    local = version.partition("+")[2]
    cuda = f"{local[2:-1]}.{local[-1]}" if local.startswith("cu") else None
    return TorchFacts(version, version, cuda, None, triton_pin=pin)


# --- PyTorch's CUDA matrix -------------------------------------------------------------------

def test_cu126_stops_at_hopper_and_blackwell_needs_cuda_12_8() -> None:
    release = torch_release("2.14.1")
    assert release is not None
    cu126, cu130 = release.variant("cu126"), release.variant("cu130")
    assert cu126 is not None and cu130 is not None
    assert cu126.serves("9.0") and cu126.serves("6.1") and not cu126.serves("12.0")
    assert cu130.serves("12.0") and cu130.serves("8.9") and not cu130.serves("7.0")
    assert not any(v.serves("12.0") for r in TORCH_CUDA_MATRIX.values()
                   for v in r.variants if v.cuda_major == 12 and v.cuda < "12.8")


@pytest.mark.parametrize(("torch", "labels", "default"), [
    ("2.7.1", {"cu118", "cu126", "cu128"}, "cu126"),
    ("2.11.0", {"cu126", "cu128", "cu130"}, "cu130"),
    ("2.12.1", {"cu126", "cu130", "cu132"}, "cu130"),  # cu128 dropped (pytorch#178665)
    ("2.14.1", {"cu126", "cu130", "cu132"}, "cu130"),  # PyPI's METADATA: cuda-toolkit 13.0.3
    ("2.15.0", {"cu130", "cu132"}, "cu132"),  # cu126 gone (pytorch#190385); 13.2.2 on PyPI
])
def test_the_matrix_per_torch_minor(torch: str, labels: set[str], default: str) -> None:
    release = torch_release(torch)
    assert release is not None
    assert {v.label for v in release.variants} == labels
    assert release.default == default


def test_a_gtx_1080_is_sent_to_the_newest_torch_that_still_has_kernels_for_it() -> None:
    assert pick_variant("2.15.0", ["6.1"]) is None
    newest = newest_torch_serving(["6.1"])
    assert newest is not None and (newest[0], newest[1].label) == ("2.14", "cu126")


def test_an_index_the_matrix_lacks_is_never_named() -> None:

    build = torch_build("2.12.0+cu128", "2.12.0+cu128", "12.8", None)
    assert torch_index_url(build, "2.12.0") is None  # 2.12 has no cu128 build
    build = torch_build("2.12.0+cu130", "2.12.0+cu130", "13.0", None)
    assert torch_index_url(build, "2.12.0") == "https://download.pytorch.org/whl/cu130"


# --- the one Triton requirement ---------------------------------------------------------------

@pytest.mark.parametrize(("torch", "pin", "gpus", "want", "blocked"), [
    # Turing intersects the pairing with < 3.3: torch 2.4 and 2.5 -> 3.1, 2.6 -> 3.2
    ("2.4.1+cu124", None, ("7.5",), "triton-windows>=3.1,<3.2", None),
    ("2.5.1+cu124", "==3.1.0", ("7.5",), "triton-windows>=3.1,<3.2", None),
    ("2.6.0+cu126", None, ("7.5",), "triton-windows>=3.2,<3.3", None),
    # torch 2.7+ needs Triton >= 3.3, which has no Turing: one blocking finding
    ("2.10.0+cu130", None, ("7.5",), None, "SD146"),
    ("2.10.0+cu130", None, ("7.5", "8.6"), "triton-windows>=3.6,<3.7", None),
    ("2.14.1+cu130", "~=3.8.0", ("8.9",), "triton-windows>=3.8,<3.9", None),
    ("2.14.1+cu130", None, ("8.9",), "triton-windows>=3.8,<3.9", None),  # a v1 facts file
    ("2.15.0+cu130", "~=3.9.0", ("8.9",), None, "SD147"),
    ("2.16.0+cu130", None, ("8.9",), None, "SD202"),  # nothing to derive from
])
def test_windows_triton_requirement(torch: str, pin: str | None, gpus: tuple[str, ...],
                                    want: str | None, blocked: str | None) -> None:
    req = triton_requirement(_torch(torch, pin), [_gpu(cc, i) for i, cc in
                                                        enumerate(gpus)], "windows",
                                   INDEX.triton)
    assert req.requirement == want
    assert req.blocked_code == blocked


def test_a_torch_newer_than_the_table_is_derived_from_its_own_pin() -> None:
    from dataclasses import replace

    later = replace(INDEX.triton, windows_releases=(*INDEX.triton.windows_releases, (3, 10)))
    req = triton_requirement(_torch("2.16.0+cu130", "~=3.10.0"), [_gpu("8.9")],
                                   "windows", later)
    assert (req.requirement, req.source) == ("triton-windows>=3.10,<3.11", "torch-metadata")
    assert req.reason.startswith("derived: torch 2.16.0+cu130 pins Triton 3.10")


def test_torch_215_on_windows_says_which_torch_works_and_changes_nothing() -> None:
    facts = load_facts_file(PROFILES / "windows-torch215-no-triton-windows-yet.json")
    result = resolve_plan(facts, INDEX)
    assert isinstance(result, Blocked)
    [blocker] = result.findings
    assert blocker.code == "SD147"
    assert "torch 2.15.0+cu132 needs Triton 3.9" in blocker.detail
    assert "no 3.9 release yet" in blocker.detail and "2.14" in blocker.detail


def test_linux_uses_the_pin_torch_itself_declares() -> None:
    req = triton_requirement(_torch("2.15.0+cu130", "~=3.9.0"), [], "linux", INDEX.triton)
    assert (req.package, req.minor, req.source) == ("triton", (3, 9), "torch-metadata")
    assert req.satisfied_by("3.9.1") and not req.satisfied_by("3.8.0")


# --- check and plan agree on every new profile ----------------------------------------------

NEW_PROFILES = ("windows-torch214-today", "windows-torch215-no-triton-windows-yet",
                "linux-h200-torch214-cxx20-build", "linux-rtx5090-torch-cu126",
                "windows-rtx2080-turing-torch25", "windows-turing-beside-3090-torch210",
                "linux-rtx4090-optional-index", "linux-rtx4090-torch214-gcc9")


def _triton_fixes(findings: list[Finding]) -> set[str]:
    return {m.group(1) for f in findings if f.code in ("SD151", "SD152", "SD154")
            for m in [re.search(r'"(triton-windows[^"]*)"', f.fix)] if m}


@pytest.mark.parametrize("name", NEW_PROFILES)
def test_check_and_plan_agree(name: str) -> None:
    facts = load_facts_file(PROFILES / f"{name}.json")
    found = diagnose(facts, INDEX)
    result = resolve_plan(facts, INDEX)
    errors = {f.code for f in found if f.severity == "error"}
    if isinstance(result, Blocked):
        # what stops the plan is what check reports, word for word
        for blocker in result.findings:
            if blocker.code == "SD206":  # the plan's stop is check's SD149, word for word
                assert any(f.code == "SD149" and f.detail.startswith(blocker.detail)
                           for f in found)
                continue
            assert blocker.code in errors
            assert (blocker.detail, blocker.fix) in {(f.detail, f.fix) for f in found}
        return
    installs = {s.requirement for s in result.steps if s.action == "install"}
    assert _triton_fixes(found) == installs  # the same requirement, from one function
    if "SD161" in errors:
        assert any(s.distributions == ("sageattention",) for s in result.steps)


def test_todays_torch_on_windows_gets_triton_38_and_the_post6_cu130_wheel() -> None:
    plan = resolve_plan(load_facts_file(PROFILES / "windows-torch214-today.json"), INDEX)
    assert isinstance(plan, Plan)
    assert [(s.action, s.requirement or (s.wheel.file if s.wheel else None))
            for s in plan.steps[:2]] == [("install", "triton-windows>=3.8,<3.9"),
                                         ("install-wheel", POST6_130)]
    assert "the smoke check after the install decides" in plan.steps[1].reason


def test_todays_torch_on_linux_plans_a_cxx20_build() -> None:
    plan = resolve_plan(load_facts_file(PROFILES / "linux-h200-torch214-cxx20-build.json"),
                        INDEX)
    assert isinstance(plan, Plan)
    build = next(s for s in plan.steps if s.action == "build-from-source")
    assert build.build is not None and build.build.cxx_standard == 20
    assert "C++20 (torch 2.14 requires it; read from its ATen.h)" in build.reason


def test_an_rtx_40xx_is_not_served_by_a_build_without_sm89() -> None:
    plan = resolve_plan(load_facts_file(PROFILES / "linux-rtx4090-optional-index.json"), INDEX)
    assert isinstance(plan, Plan)
    assert not any(s.index_url for s in plan.steps)
    assert plan.steps[0].action == "build-from-source"
    assert any("no kernels for sm89" in n for n in plan.notes)


def test_blackwell_with_cu126_torch_is_sd144_with_the_cu130_build() -> None:
    facts = load_facts_file(PROFILES / "linux-rtx5090-torch-cu126.json")
    result = resolve_plan(facts, INDEX)
    assert isinstance(result, Blocked)
    assert [f.code for f in result.findings] == ["SD144"]
    assert result.findings[0].fix.endswith("torch==2.14.1 --index-url "
                                           "https://download.pytorch.org/whl/cu130")


# --- every PyTorch index sagedoctor prints exists for that torch ----------------------------

_TORCH_COMMAND = re.compile(r"torch==(?P<version>[\w.+*]+)\S* --index-url (?P<url>\S+)")


def _every_profile_fact() -> list[tuple[str, Facts]]:
    from tests.test_resolve import CASES

    out = [(p.stem, load_facts_file(p)) for p in sorted(PROFILES.glob("*.json"))]
    return out + [(name, facts) for name, (facts, _options, _expect) in sorted(CASES.items())]


def test_every_printed_pytorch_index_is_in_the_matrix_for_that_torch() -> None:
    seen = 0
    for name, facts in _every_profile_fact():
        texts = [f.fix for f in diagnose(facts, INDEX)]
        result = resolve_plan(facts, INDEX)
        if isinstance(result, Blocked):
            texts += [f.fix for f in result.findings]
        else:
            texts += [s.reason for s in result.steps] + list(result.notes)
            texts += [s.index_url or "" for s in result.steps]
        for text in texts:
            for url in re.findall(r"https://download\.pytorch\.org/\S+", text):
                command = _TORCH_COMMAND.search(text)
                assert command is not None and command.group("url") == url, (name, text)
                version = command.group("version").replace(".*", ".0")
                assert url in index_urls_for(version), (name, url, version)
                seen += 1
    assert seen >= 10  # the walk met real commands


# --- facts: schema 2, version 1 still loads, the probe reads the new facts ----------------------

def test_a_version_1_report_loads_without_the_new_facts_and_2_loads_with_them() -> None:
    old = load_facts_file(PROFILES / "windows-4090-unverified.json")
    assert old.schema_version == 1
    assert old.target is not None and old.target.torch is not None
    assert (old.target.torch.triton_pin, old.target.torch.cxx_standard) == (None, None)
    new = load_facts_file(PROFILES / "windows-torch214-today.json")
    assert new.schema_version == 2
    assert new.target is not None and new.target.torch is not None
    assert (new.target.torch.triton_pin, new.target.torch.cxx_standard) == ("~=3.8.0", 20)
    from sagedoctor.errors import FactsFileError

    for version in (3, True, "2"):
        with pytest.raises(FactsFileError, match="schema_version"):
            facts_from_dict(merge(WIN_4090, {"schema_version": version}))


ATEN_H_213 = ("#pragma once\n\n#if !defined(_MSC_VER) && __cplusplus < 201703L\n"
              "#error C++17 or later compatible compiler is required to use ATen.\n#endif\n")


@pytest.mark.parametrize(("requires", "header", "pin", "standard"), [
    (('triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"',
      "typing-extensions>=4.10.0"), "torch-2.14", "~=3.8.0", 20),
    (('triton==3.6.0; platform_system == "Linux" and platform_machine == "x86_64"',),
     ATEN_H_213, "==3.6.0", 17),
    (("triton-windows>=3.6", "filelock"), None, None, None),  # no pin, no headers
])
def test_the_probe_reads_torchs_triton_pin_and_header_standard(
        tmp_path: Path, requires: tuple[str, ...], header: str | None, pin: str | None,
        standard: int | None) -> None:
    if header == "torch-2.14":
        header = (torch_214_include(tmp_path) / "ATen" / "ATen.h").read_text(encoding="utf-8")
    venv = tmp_path / "venv é"
    site = make_venv(venv)
    add_torch(site, "__version__ = '2.14.1+cu130'\ncuda = '13.0'\nhip = None\n", "2.14.1",
              requires=requires, aten_h=header)
    target = probe_target(venv_python(venv))
    assert target.torch is not None
    assert (target.torch.triton_pin, target.torch.cxx_standard) == (pin, standard)


# --- C++20 for real: the flag logic against torch 2.14's own headers -------------------------

TORCH_WITH_CXX20 = "2.14.1"  # the first torch whose ATen.h demands C++20, on this disk for pip


def _local_pip_sources() -> list[list[str]]:
    """pip's own configured sources on this machine that are local folders or file:// indexes
    (never the network): each as the arguments that make pip use only it."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True, timeout=60).stdout
    out = []
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        for location in value.strip().strip("'\"").split():
            if key.endswith("index-url") and location.startswith("file://"):
                out.append(["--index-url", location])
            elif key.endswith("find-links") and (location.startswith("file://")
                                                  or Path(location).is_dir()):
                out.append(["--no-index", "--find-links", location])
    return out


def torch_214_include(scratch: Path) -> Path:
    """torch/include of the torch 2.14.1 wheel pip holds on this disk, extracted once into a
    cache folder (40 MB; the 550 MB wheel is copied by pip and deleted again)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    include = cache / "sagedoctor-tests" / f"torch-{TORCH_WITH_CXX20}-include"
    if (include / "ATen" / "ATen.h").is_file():
        return include
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(scratch),
           "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    tried = []
    for source in _local_pip_sources():
        dest = scratch / "wheel"
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--only-binary=:all:", "--dest", str(dest), *source,
                               f"torch=={TORCH_WITH_CXX20}"],
                              capture_output=True, text=True, env=env, timeout=600)
        assert "Downloading http" not in done.stdout  # local sources only
        wheels = list(dest.glob("torch-*.whl")) if done.returncode == 0 else []
        tried.append(" ".join(source))
        if wheels:
            include.parent.mkdir(parents=True, exist_ok=True)
            partial = include.with_name(include.name + f".partial-{os.getpid()}")
            with zipfile.ZipFile(wheels[0]) as archive:
                for member in archive.namelist():
                    if member.startswith("torch/include/"):
                        archive.extract(member, partial)
            shutil.rmtree(dest)
            if not include.exists():  # another run may have finished first
                (partial / "torch" / "include").replace(include)
            shutil.rmtree(partial, ignore_errors=True)
            return include
    pytest.skip(f"no local pip source holds torch {TORCH_WITH_CXX20} (tried: "
                f"{'; '.join(tried) or 'pip lists none'}); this machine and CI have one")


FIXTURE_SETUP = '''\
# A stand-in for upstream's setup.py: its flag lists, as thu-ml/SageAttention writes them.
CXX_FLAGS = ["-g", "-O3", "-fopenmp", "-std=c++17", "-DENABLE_BF16"]
NVCC_FLAGS = ["-O3", '-std=c++17', "--use_fast_math"]
'''
TINY_EXTENSION = '''\
#include <ATen/ATen.h>
at::Tensor twice(const at::Tensor& x) { return x * 2; }
'''


def test_the_cxx_standard_logic_compiles_against_torch_214_headers(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ on PATH")
    include = torch_214_include(tmp_path)
    # The probe reads the standard from the headers, rules turn it into the build's standard...
    venv = tmp_path / "target venv"
    add_torch(make_venv(venv), "__version__ = '2.14.1'\ncuda = None\nhip = None\n", "2.14.1",
              aten_h=(include / "ATen" / "ATen.h").read_text(encoding="utf-8"))
    torch = probe_target(venv_python(venv)).torch
    assert torch is not None
    standard, _why = cxx_standard_for(torch)
    # ... and the build's copy of setup.py is patched to it; the user's folder is not.
    user_tree = tmp_path / "Sage Attention ü"
    user_tree.mkdir()
    (user_tree / "setup.py").write_text(FIXTURE_SETUP, encoding="utf-8")
    settings = BuildSettings(source=str(user_tree), commit=None, arch_list="8.9",
                             cuda_home="/usr/local/cuda", max_jobs=1, ext_parallel=1,
                             nvcc_threads=1, build_requires=(), cxx_standard=standard)
    work = tmp_path / "work"
    work.mkdir()
    tree, patches = prepare_tree(user_tree, work, settings)
    assert patches == [f"setup.py: -std=c++17 -> {cxx_std_flag(20)} (2x)"]
    assert (user_tree / "setup.py").read_text(encoding="utf-8") == FIXTURE_SETUP
    flags = set(re.findall(r"-std=c\+\+\d+", (tree / "setup.py").read_text(encoding="utf-8")))
    assert flags == {"-std=c++20"}
    source = tmp_path / "tiny.cpp"
    source.write_text(TINY_EXTENSION, encoding="utf-8")
    includes = ["-I", str(include), "-I", str(include / "torch" / "csrc" / "api" / "include")]
    # upstream's own flag: the headers' guard stops it at once
    old = subprocess.run([compiler, "-std=c++17", "-E", *includes, str(source), "-o",
                          os.devnull], capture_output=True, text=True, timeout=120)
    assert old.returncode != 0
    assert "C++20 or later compatible compiler is required" in old.stderr
    new = subprocess.run([compiler, *flags, "-fsyntax-only", *includes, str(source)],
                         capture_output=True, text=True, timeout=300)
    assert new.returncode == 0, new.stderr[-2000:]


def test_a_compiler_too_old_for_cxx20_is_named_before_the_build() -> None:
    assert cxx_toolchain_problems(20, "9.4.0", "13.0.88") == [
        "gcc 9.4.0 cannot compile C++20 (needs gcc >= 10)"]
    assert cxx_toolchain_problems(20, "13.3.0", "11.8.89") == [
        "nvcc 11.8.89 cannot compile C++20 (needs nvcc >= 12.0)"]
    assert cxx_toolchain_problems(17, "9.4.0", "11.8.89") == []


def test_a_source_build_for_torch_214_patches_its_copy_and_records_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole route in a real venv: the plan's C++ standard reaches the build's copy of
    setup.py, the user's folder stays as it was, and the install record says what was done."""
    import json
    from dataclasses import replace

    from sagedoctor.plan import Step
    from sagedoctor.state import read_install_record as read_record
    from tests.test_install import run_plan
    from tests.test_install_kit import fake_source, settings_for, torch_venv

    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")  # the stand-in kernels run on the CPU
    python, site = torch_venv(tmp_path / "venv ü")
    source = fake_source(tmp_path / "Sage src")
    upstream_like = ('CXX_FLAGS = ["-g", "-O3", "-std=c++17"]\n'
                     'NVCC_FLAGS = ["-O3", "-std=c++17", "--use_fast_math"]\n'
                     'with open("sageattention/flags.py", "w") as out:\n'
                     '    out.write(f"CXX = {CXX_FLAGS!r}\\nNVCC = {NVCC_FLAGS!r}\\n")\n')
    setup = source / "setup.py"
    setup.write_text(upstream_like + setup.read_text(encoding="utf-8"), encoding="utf-8")
    before = setup.read_text(encoding="utf-8")
    messages: list[str] = []
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=replace(settings_for(str(source)), cxx_standard=20))
    run_plan(python, tmp_path, step, messages=messages)
    built = (site / "sageattention" / "flags.py").read_text(encoding="utf-8")
    assert built == ("CXX = ['-g', '-O3', '-std=c++20']\n"
                     "NVCC = ['-O3', '-std=c++20', '--use_fast_math']\n")
    assert setup.read_text(encoding="utf-8") == before
    assert any("patched the build's copy (setup.py: -std=c++17 -> -std=c++20 (2x))" in m
               for m in messages)
    assert any(m.startswith("building: ") and " C++20 " in m for m in messages)
    record = read_record(python.parent.parent)
    assert record is not None
    assert record.built == {"sageattention": "source build, C++ standard of torch's headers: "
                                             "setup.py: -std=c++17 -> -std=c++20 (2x)"}
    raw = json.loads((python.parent.parent / "sagedoctor" / "installed.json").read_text())
    assert raw["installed"]["sageattention"] == "2.2.0"


# --- Astral's rows: both local-version forms, the arch lists ---------------------------------

@pytest.mark.parametrize(("version", "cuda_label", "torch"), [
    ("2.2.0+cu.12.8.torch.2.10", "cu128", (2, 10, 0)),  # since 2026-01-23
    ("2.2.0+cu12.8torch2.10.0cxx11abiTRUE", "cu128", (2, 10, 0)),  # before
    ("2.2.0+cu.13.0.torch.2.12", "cu130", (2, 12, 0)),
    ("2.2.0+cu130torch2.10.0andhigher.post6", "cu130", (2, 10, 0)),  # the fork's
])
def test_both_astral_local_version_forms_parse(version: str, cuda_label: str,
                                               torch: tuple[int, int, int]) -> None:
    from sagedoctor.decide.versions import parse_sage_local

    build = parse_sage_local(version)
    assert build is not None and (build.cuda_label, build.torch) == (cuda_label, torch)


def test_every_astral_row_makes_a_version_its_own_parser_reads() -> None:

    for entry in INDEX.linux_indexes:
        version = entry.version_for("2.11.1")
        assert version is not None and version.endswith("torch.2.11")
        build = parse_sage_local(version)
        assert build is not None and sage_serves_torch(build, "2.11.1")
        assert "8.9" not in entry.archs and entry.missing_for(["8.9", "8.6"]) == ["8.9"]


def test_an_index_row_whose_template_makes_no_label_is_rejected() -> None:
    from sagedoctor.index import SHIPPED_INDEX, IndexError_, parse_index, parse_toml

    data = parse_toml(SHIPPED_INDEX.read_text(encoding="utf-8"), "test")
    data["linux_indexes"][0]["version"] = "2.2.0+{cuda}"
    with pytest.raises(IndexError_, match=r"makes no cuXYtorchA\.B label"):
        parse_index(data, "test")
