"""The resolver over a table of machine profiles: the exact wheel, specifier, build settings and
reasons for each; and properties that hold for every machine."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.tags import cpython_tags

from sagedoctor.decide.findings import CATALOG
from sagedoctor.decide.resolve import resolve_plan
from sagedoctor.decide.resolve.steps import ResolveOptions
from sagedoctor.facts import Facts, facts_from_dict
from sagedoctor.index import shipped_index, spec_text, wheel_supported_by
from sagedoctor.plan import Blocked, Plan
from tests.profiles.make_profiles import LINUX_H200, WIN_4090, gpu, merge

INDEX = shipped_index()
RUNTIME = "0.1.0"
POST6_130 = "sageattention-2.2.0+cu130torch2.10.0andhigher.post6-cp310-abi3-win_amd64.whl"
POST6_128 = "sageattention-2.2.0+cu128torch2.10.0andhigher.post6-cp310-abi3-win_amd64.whl"
GPUS = {
    "3090": ("NVIDIA GeForce RTX 3090", "8.6"), "4090": ("NVIDIA GeForce RTX 4090", "8.9"),
    "5090": ("NVIDIA GeForce RTX 5090", "12.0"), "2080": ("NVIDIA GeForce RTX 2080", "7.5"),
    "a100": ("NVIDIA A100-SXM4-80GB", "8.0"), "h100": ("NVIDIA H100 80GB HBM3", "9.0"),
    "h200": ("NVIDIA H200", "9.0"), "v100": ("Tesla V100-PCIE-16GB", "7.0"),
    "orin": ("Orin", "8.7"), "t4": ("Tesla T4", "7.5"), "b200": ("NVIDIA B200", "10.0"),
    "a6000": ("NVIDIA RTX A6000", "8.6"), "thor": ("NVIDIA Thor", "11.0"),
    "sm100win": ("NVIDIA B200", "10.0"),
}
SA2_MODULES = ["_fused", "_qattn_sm80", "_qattn_sm89", "_qattn_sm90"]


def machine(os_name: str = "windows", gpus: tuple[str, ...] = ("4090",),
            torch: str | None = "2.10.0+cu130", python: str = "3.12.10",
            triton: str | None = None, triton_windows: str | None = "auto",
            sage: str | None = None, runtime: str | None = None, nvcc: str | None = "13.0.88",
            gcc: str | None = "13.3.0", cpus: int = 16, mem: float | None = 125.7,
            invokeai_choices: tuple[str, ...] | None = None) -> Facts:
    """A facts file as `check --json` writes it, for one imagined machine."""
    base = WIN_4090 if os_name == "windows" else LINUX_H200
    platform = "win_amd64" if os_name == "windows" else "manylinux_2_39_x86_64"
    minor = tuple(int(p) for p in python.split(".")[:2])
    tags = [str(t) for t in cpython_tags(minor, platforms=[platform])]
    torch_facts = None
    if torch is not None:
        local = torch.partition("+")[2]
        cuda = f"{local[2:-1]}.{local[-1]}" if local.startswith("cu") else None
        torch_facts = {"version": torch, "full_version": torch, "cuda": cuda,
                       "hip": "7.1" if local.startswith("rocm") else None}
    if triton_windows == "auto":
        pair = INDEX.triton.pair_for(torch or "0.0")
        minor_w = pair.windows_minor if pair else None
        triton_windows = (f"{minor_w[0]}.{minor_w[1]}.0.post26" if minor_w and
                          os_name == "windows" else None)
    if os_name == "linux" and triton is None and torch is not None:
        pair = INDEX.triton.pair_for(torch)
        triton = f"{pair.linux[0]}.{pair.linux[1]}.0" if pair and pair.linux else None
    sage_facts = None if sage is None else {
        "version": sage, "package_dir": "/x/sageattention", "leftovers": [],
        "compiled_modules": [] if sage.startswith("1.") else SA2_MODULES}
    changes: dict[str, Any] = {
        "gpu": {"gpus": [gpu(i, *GPUS[name]) for i, name in enumerate(gpus)]},
        "system": {"cpu_count": cpus, "memory_gib": mem},
        "target": {"python_version": python, "tags": tags, "torch": torch_facts,
                   "triton": triton, "triton_windows": triton_windows,
                   "sageattention": sage_facts, "runtime": runtime},
        "toolchain": {"nvcc_version": nvcc, "gcc_version": gcc,
                      "nvcc_path": "/usr/local/cuda/bin/nvcc" if nvcc else None,
                      "cuda_home": "/usr/local/cuda" if nvcc else None},
    }
    data = merge(base, changes)
    data["target"]["torch"] = copy.deepcopy(torch_facts)
    data["target"]["sageattention"] = sage_facts
    if invokeai_choices is not None:
        data["target"]["invokeai"] = {"version": "6.20.0", "attention_backend_supported": True,
                                      "attention_backend_choices": list(invokeai_choices)}
    return facts_from_dict(data)


def on_arm64(facts: Facts) -> Facts:
    assert facts.system is not None
    return replace(facts, system=replace(facts.system, machine="arm64"))


@dataclass(frozen=True)
class Expect:
    actions: tuple[str, ...] = ()  # the step actions, in order
    wheel: str | None = None
    triton: str | None = None  # the triton-windows requirement
    arch_list: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()  # substrings somewhere in the steps' reasons
    notes: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()  # finding codes
    index_url: str | None = None


W = ("install", "install-wheel", "bundle-runtime", "verify")  # a fresh Windows install
WNT = ("install-wheel", "bundle-runtime", "verify")  # triton-windows already right
BUILD = ("build-from-source", "bundle-runtime", "verify")
NOIDX = ResolveOptions(use_linux_indexes=False)

CASES: dict[str, tuple[Facts, ResolveOptions, Expect]] = {
    # --- Windows: torch 2.7.1+cu128, Python 3.9 to 3.13, RTX 30/40/50 -------------------------
    "win-4090-t271-py312": (machine(torch="2.7.1+cu128", triton_windows=None), ResolveOptions(),
                            Expect(W, "sageattention-2.2.0+cu128torch2.7.1.post3-cp39-abi3-"
                                   "win_amd64.whl", "triton-windows>=3.3,<3.4",
                                   reasons=("cu128 wheel: torch 2.7.1+cu128 is CUDA 12; "
                                            "torch2.7.1.post3: torch 2.7.x only, Python 3.12",))),
    "win-4090-t271-py39": (machine(torch="2.7.1+cu128", python="3.9.13"), ResolveOptions(),
                           Expect(WNT, "sageattention-2.2.0+cu128torch2.7.1.post3-cp39-abi3-"
                                  "win_amd64.whl", reasons=("Python 3.9",))),
    "win-3090-t271-py310": (machine(gpus=("3090",), torch="2.7.1+cu128", python="3.10.11"),
                            ResolveOptions(),
                            Expect(WNT, "sageattention-2.2.0+cu128torch2.7.1.post3-cp39-abi3-"
                                   "win_amd64.whl")),
    "win-5090-t271-py313": (machine(gpus=("5090",), torch="2.7.1+cu128", python="3.13.1"),
                            ResolveOptions(),
                            Expect(WNT, "sageattention-2.2.0+cu128torch2.7.1.post3-cp39-abi3-"
                                   "win_amd64.whl")),
    "win-4090-t280-py311": (machine(torch="2.8.0+cu128", python="3.11.9", triton_windows=None),
                            ResolveOptions(),
                            Expect(W, "sageattention-2.2.0+cu128torch2.8.0.post3-cp39-abi3-"
                                   "win_amd64.whl", "triton-windows>=3.4,<3.5")),
    # --- Windows: torch 2.9.1 ---------------------------------------------------------------
    "win-4090-t291-cu128-py312": (machine(torch="2.9.1+cu128", triton_windows="3.4.0.post21"),
                                  ResolveOptions(),
                                  Expect(W, "sageattention-2.2.0+cu128torch2.9.1.post6-cp310-"
                                         "abi3-win_amd64.whl", "triton-windows>=3.5,<3.6",
                                         reasons=("you have 3.4.0.post21",
                                                  "torch2.9.1.post6: torch 2.9.x only"))),
    "win-4090-t291-cu128-py39": (machine(torch="2.9.1+cu128", python="3.9.13"),
                                 ResolveOptions(),
                                 Expect(WNT, "sageattention-2.2.0+cu128torch2.9.0andhigher."
                                        "post4-cp39-abi3-win_amd64.whl",
                                        reasons=("andhigher.post4: torch >= 2.9, Python 3.9",
                                                 "no digest known yet"))),
    "win-3090-t291-cu130-py311": (machine(gpus=("3090",), torch="2.9.1+cu130", python="3.11.9"),
                                  ResolveOptions(),
                                  Expect(WNT, "sageattention-2.2.0+cu130torch2.9.1.post6-cp310-"
                                         "abi3-win_amd64.whl")),
    "win-5090-t291-cu130-py313": (machine(gpus=("5090",), torch="2.9.1+cu130", python="3.13.1"),
                                  ResolveOptions(),
                                  Expect(WNT, "sageattention-2.2.0+cu130torch2.9.1.post6-cp310-"
                                         "abi3-win_amd64.whl")),
    # --- Windows: torch 2.10 ----------------------------------------------------------------
    "win-4090-t210-cu128-py312": (machine(torch="2.10.0+cu128"), ResolveOptions(),
                                  Expect(WNT, POST6_128, reasons=(
                                      "cu128 wheel: torch 2.10.0+cu128 is CUDA 12; "
                                      "andhigher.post6: torch >= 2.10, Python 3.12",
                                      "third party"))),
    "win-3090-t210-cu130-py310": (machine(gpus=("3090",), python="3.10.11"), ResolveOptions(),
                                  Expect(WNT, POST6_130)),
    "win-5090-t210-cu130-py313": (machine(gpus=("5090",), python="3.13.1"), ResolveOptions(),
                                  Expect(WNT, POST6_130)),
    "win-4090-t210-py39-post4": (machine(python="3.9.13"), ResolveOptions(),
                                 Expect(WNT, "sageattention-2.2.0+cu130torch2.9.0andhigher."
                                        "post4-cp39-abi3-win_amd64.whl")),
    # --- Windows: torch 2.13+cu130 ------------------------------------------------------------
    "win-4090-t213-py312": (machine(torch="2.13.0+cu130", triton_windows="3.6.0.post26"),
                            ResolveOptions(),
                            Expect(W, POST6_130, "triton-windows>=3.7,<3.8", reasons=(
                                "cu130 wheel: torch 2.13.0+cu130 is CUDA 13; andhigher.post6: "
                                "torch >= 2.10, Python 3.12",))),
    "win-3090-t213-py311": (machine(gpus=("3090",), torch="2.13.0+cu130", python="3.11.9"),
                            ResolveOptions(), Expect(WNT, POST6_130)),
    "win-5090-t213-py313": (machine(gpus=("5090",), torch="2.13.0+cu130", python="3.13.1"),
                            ResolveOptions(), Expect(WNT, POST6_130)),
    # --- Windows: older torch, other GPUs, what is installed ---------------------------------
    "win-4090-t260": (machine(torch="2.6.0+cu126"), ResolveOptions(),
                      Expect(WNT, "sageattention-2.2.0+cu126torch2.6.0.post3-cp39-abi3-"
                             "win_amd64.whl")),
    "win-4090-t251": (machine(torch="2.5.1+cu124", triton_windows=None), ResolveOptions(),
                      Expect(W, "sageattention-2.2.0+cu124torch2.5.1.post3-cp39-abi3-"
                             "win_amd64.whl", "triton-windows>=3.1,<3.2")),
    "win-t241-no-wheel": (machine(torch="2.4.1+cu124"), ResolveOptions(),
                          Expect(blocked=("SD201",))),
    "win-cu118-no-wheel": (machine(torch="2.7.1+cu118"), ResolveOptions(),
                           Expect(blocked=("SD201",))),
    "win-cpu-torch": (machine(torch="2.10.0+cpu"), ResolveOptions(), Expect(blocked=("SD142",))),
    # torch 2.14 pins triton~=3.8.0 and triton-windows 3.8 is out: the index's row
    "win-t214-triton-38": (machine(torch="2.14.1+cu130", triton_windows="3.7.1.post27"),
                           ResolveOptions(), Expect(W, POST6_130, "triton-windows>=3.8,<3.9")),
    # a torch newer than every row, its pin unknown (a version-1 facts file): nothing to derive
    "win-t216-triton-unknown": (machine(torch="2.16.0+cu130"), ResolveOptions(),
                                Expect(blocked=("SD202",))),
    # torch 2.15's row pins Triton 3.9 on Linux; triton-windows has no 3.9 release yet
    "win-t215-no-triton-windows-yet": (machine(torch="2.15.0+cu130"), ResolveOptions(),
                                       Expect(blocked=("SD147",))),
    # Turing needs Triton < 3.3, torch 2.10 needs 3.6: nothing installs, said once
    "win-2080-turing": (machine(gpus=("2080",), torch="2.10.0+cu128"), ResolveOptions(),
                        Expect(blocked=("SD146",))),
    # Turing with torch 2.5: the pairing 3.1 intersected with < 3.3 is 3.1, not "< 3.3"
    "win-2080-turing-t251": (machine(gpus=("2080",), torch="2.5.1+cu124",
                                     triton_windows="3.2.0.post21"), ResolveOptions(),
                             Expect(W, "sageattention-2.2.0+cu124torch2.5.1.post3-cp39-abi3-"
                                    "win_amd64.whl", "triton-windows>=3.1,<3.2",
                                    reasons=("Triton dropped Turing in 3.3",))),
    "win-2080-beside-3090-t210": (machine(gpus=("3090", "2080")), ResolveOptions(),
                                  Expect(WNT, POST6_130, notes=(
                                      "(sm75) cannot run Triton >=3.6,<3.7",))),
    "win-b200-no-kernels": (machine(gpus=("sm100win",)), ResolveOptions(),
                            Expect(blocked=("SD203",))),
    "win-mixed-4090-3090": (machine(gpus=("4090", "3090")), ResolveOptions(),
                            Expect(WNT, POST6_130)),
    "win-sa1-installed": (machine(sage="1.0.6"), ResolveOptions(),
                          Expect(("uninstall", *WNT), POST6_130, reasons=("SageAttention 1",))),
    "win-post5-replaced": (machine(sage="2.2.0+cu130torch2.10.0andhigher.post5",
                                   runtime=RUNTIME), ResolveOptions(),
                           Expect(("install-wheel", "verify"), POST6_130,
                                  reasons=("replaces 2.2.0+cu130torch2.10.0andhigher.post5",))),
    "win-post4-kept": (machine(sage="2.2.0+cu130torch2.9.0andhigher.post4", runtime=RUNTIME),
                       ResolveOptions(), Expect(())),
    "win-correct-already": (machine(sage="2.2.0+cu130torch2.10.0andhigher.post6",
                                    runtime=RUNTIME), ResolveOptions(), Expect(())),
    "win-runtime-old": (machine(sage="2.2.0+cu130torch2.10.0andhigher.post6", runtime="0.0.9"),
                        ResolveOptions(), Expect(("bundle-runtime", "verify"),
                                                 reasons=("has 0.0.9",))),
    "win-plain-triton": (machine(triton="3.6.0", sage="2.2.0+cu130torch2.10.0andhigher.post6",
                                 runtime=RUNTIME), ResolveOptions(),
                         Expect(("uninstall", "install", "verify"),
                                triton="triton-windows>=3.6,<3.7",
                                reasons=("removing triton deletes its files",))),
    "win-sage-cuda-major-mismatch": (machine(sage="2.2.0+cu128torch2.10.0andhigher.post6",
                                             runtime=RUNTIME), ResolveOptions(),
                                     Expect(("install-wheel", "verify"), POST6_130)),
    "win-python38": (machine(python="3.8.10", torch="2.4.1+cu124"), ResolveOptions(),
                     Expect(blocked=("SD133",))),
    "win-source-ignored": (machine(), ResolveOptions(source_dir="C:\\src\\Sage"),
                           Expect(WNT, POST6_130, notes=("is not used on Windows",))),
    "win-invokeai-backend": (machine(sage="2.2.0+cu130torch2.10.0andhigher.post6",
                                     runtime=RUNTIME, invokeai_choices=("torch-sdp", "sage")),
                             ResolveOptions(), Expect(("enable-invokeai", "verify"))),
    # --- Linux ------------------------------------------------------------------------------
    # Astral's wheels are built from tag v2.2.0, whose sm90 kernel returns garbage: never on
    # Hopper; the pinned source build is the route there (issue 10).
    "linux-h200-never-the-v2.2.0-index": (machine("linux", ("h200",), "2.11.0+cu130"),
                                          ResolveOptions(),
                                          Expect(BUILD, arch_list="9.0",
                                                 notes=("at v2.2.0, known broken on sm90",))),
    "linux-3090-index-then-build": (machine("linux", ("3090",), "2.11.0+cu130"),
                                    ResolveOptions(),
                                    Expect(("install-from-index", "bundle-runtime", "verify"),
                                           index_url="https://wheels.astral.sh/simple/cu130/",
                                           arch_list="8.6",
                                           reasons=("build from source as below",))),
    # Astral's arch lists have no 8.9: no _qattn_sm89 for an RTX 4090, so it is built
    "linux-4090-never-an-index-without-sm89": (
        machine("linux", ("4090",), "2.11.0+cu130"), ResolveOptions(),
        Expect(BUILD, arch_list="8.9", notes=("carry no kernels for sm89",))),
    "linux-4090-plus-h100-never-the-v2.2.0-index": (
        machine("linux", ("4090", "h100"), "2.11.0+cu130"), ResolveOptions(),
        Expect(BUILD, arch_list="8.9;9.0")),
    "linux-h200-build": (machine("linux", ("h200",), "2.11.0+cu130"), NOIDX,
                         Expect(BUILD, arch_list="9.0",
                                env={"TORCH_CUDA_ARCH_LIST": "9.0", "MAX_JOBS": "4",
                                     "EXT_PARALLEL": "4", "NVCC_APPEND_FLAGS": "--threads 1",
                                     "CUDA_HOME": "/usr/local/cuda"},
                                reasons=("at d1a57a5", "not v2.2.0",
                                         "4 extensions x 4 jobs x 1 nvcc threads"))),
    "linux-h100-old-nvcc": (machine("linux", ("h100",), "2.10.0+cu128", nvcc="12.2.140"), NOIDX,
                            Expect(blocked=("SD204",))),
    "linux-3090-no-gcc-index-only": (machine("linux", ("3090",), "2.10.0+cu128", gcc=None),
                                     ResolveOptions(),
                                     Expect(("install-from-index", "bundle-runtime",
                                             "verify"), reasons=("the only way",))),
    # torch 2.14's headers demand C++20: the build says so, and gcc 9 cannot
    "linux-4090-t214-cxx20-build": (machine("linux", ("4090",), "2.14.1+cu130"),
                                    ResolveOptions(),
                                    Expect(BUILD, arch_list="8.9", reasons=(
                                        "C++20 (torch 2.14 requires it)",))),
    "linux-4090-t214-gcc9": (machine("linux", ("4090",), "2.14.1+cu130", gcc="9.4.0"),
                             ResolveOptions(), Expect(blocked=("SD206",))),
    # cu126 torch stops at sm90: an RTX 5090 gets SD144 with the cu130 build of that torch
    "linux-5090-torch-cu126": (machine("linux", ("5090",), "2.14.1+cu126", nvcc="12.8.93"),
                               ResolveOptions(), Expect(blocked=("SD144",))),
    # The broken index is not "the only way" either: blocked by the toolchain instead.
    "linux-h100-old-nvcc-no-broken-index": (machine("linux", ("h100",), "2.10.0+cu128",
                                                    nvcc="12.2.140"), ResolveOptions(),
                                            Expect(blocked=("SD204",))),
    "linux-a100-build": (machine("linux", ("a100",), "2.9.1+cu128", nvcc="12.8.93", cpus=32,
                                 mem=256.0), NOIDX,
                         Expect(BUILD, arch_list="8.0",
                                env={"MAX_JOBS": "8", "EXT_PARALLEL": "4",
                                     "NVCC_APPEND_FLAGS": "--threads 1"})),
    "linux-4090-t213-build": (machine("linux", ("4090",), "2.13.0+cu130"), ResolveOptions(),
                              Expect(BUILD, arch_list="8.9")),
    "linux-4090-no-nvcc": (machine("linux", ("4090",), "2.13.0+cu130", nvcc=None),
                           ResolveOptions(), Expect(blocked=("SD204",))),
    "linux-4090-nvcc-major-mismatch": (machine("linux", ("4090",), "2.13.0+cu130",
                                               nvcc="12.8.93"), ResolveOptions(),
                                       Expect(blocked=("SD204",))),
    "linux-4090-no-gcc": (machine("linux", ("4090",), "2.13.0+cu130", gcc=None),
                          ResolveOptions(), Expect(blocked=("SD204",))),
    "linux-mixed-4090-3090": (machine("linux", ("4090", "3090"), "2.13.0+cu130"),
                              ResolveOptions(),
                              Expect(BUILD, arch_list="8.6;8.9",
                                     env={"NVCC_APPEND_FLAGS": "--threads 2", "EXT_PARALLEL": "4",
                                          "MAX_JOBS": "2"})),
    "linux-h100-plus-v100": (machine("linux", ("h100", "v100"), "2.13.0+cu130"),
                             ResolveOptions(),
                             Expect(BUILD, arch_list="9.0",
                                    notes=("Tesla V100-PCIE-16GB (sm70): upstream builds no",))),
    "linux-a6000-small-ram": (machine("linux", ("a6000",), "2.13.0+cu130", cpus=8, mem=15.5),
                              ResolveOptions(),
                              Expect(BUILD, arch_list="8.6",
                                     env={"MAX_JOBS": "1", "EXT_PARALLEL": "2",
                                          "NVCC_APPEND_FLAGS": "--threads 1"},
                                     reasons=("15.5 GiB RAM: up to 2 nvcc threads",))),
    "linux-unknown-ram": (machine("linux", ("a6000",), "2.13.0+cu130", mem=None),
                          ResolveOptions(),
                          Expect(BUILD, env={"MAX_JOBS": "1", "EXT_PARALLEL": "2"},
                                 reasons=("RAM unknown",))),
    "linux-5090-sm120": (machine("linux", ("5090",), "2.13.0+cu130"), ResolveOptions(),
                         Expect(BUILD, arch_list="12.0")),
    "linux-5090-nvcc-126": (machine("linux", ("5090",), "2.13.0+cu128", nvcc="12.6.85"),
                            ResolveOptions(), Expect(blocked=("SD204",))),
    "linux-b200": (machine("linux", ("b200",), "2.13.0+cu130"), ResolveOptions(),
                   Expect(BUILD, arch_list="10.0")),
    "linux-orin-sm87": (machine("linux", ("orin",), "2.13.0+cu130"), ResolveOptions(),
                        Expect(blocked=("SD114",))),
    "linux-t4-turing": (machine("linux", ("t4",), "2.13.0+cu130"), ResolveOptions(),
                        Expect(blocked=("SD113",))),
    "linux-thor-no-arch": (on_arm64(machine("linux", ("thor",), "2.13.0+cu130")),
                           ResolveOptions(), Expect(blocked=("SD205",))),  # Thor is aarch64
    "linux-cpu-torch": (machine("linux", ("h200",), "2.11.0+cpu"), ResolveOptions(),
                        Expect(blocked=("SD142",))),
    "linux-no-gpu": (machine("linux", (), "2.11.0+cpu"), ResolveOptions(),
                     Expect(blocked=("SD111",))),
    "linux-rocm": (machine("linux", ("h200",), "2.10.0+rocm7.1"), ResolveOptions(),
                   Expect(blocked=("SD143",))),
    "linux-triton-mismatch": (machine("linux", ("h200",), "2.11.0+cu130", triton="3.5.0"),
                              ResolveOptions(), Expect(blocked=("SD152",))),
    "linux-correct-already": (machine("linux", ("h200",), "2.11.0+cu130", sage="2.2.0",
                                      runtime=RUNTIME), ResolveOptions(), Expect(())),
    "linux-sa1-installed": (machine("linux", ("h200",), "2.13.0+cu130", sage="1.0.6"),
                            ResolveOptions(), Expect(("uninstall", *BUILD))),
    "linux-source-folder": (machine("linux", ("h200",), "2.11.0+cu130", sage="2.2.0",
                                    runtime=RUNTIME),
                            ResolveOptions(source_dir="/home/ana/src/Sage Attention ü"),
                            Expect(("build-from-source", "verify"),
                                   reasons=("your source folder /home/ana/src/Sage Attention ü",
                                            "replaces 2.2.0"))),
}


def test_at_least_forty_profiles() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_for_profile(name: str) -> None:
    facts, options, expect = CASES[name]
    result = resolve_plan(facts, INDEX, options)
    if expect.blocked:
        assert isinstance(result, Blocked), f"expected blocked, got {result}"
        assert {f.code for f in result.findings} >= set(expect.blocked)
        assert all(f.fix for f in result.findings)
        return
    assert isinstance(result, Plan), [f"{f.code} {f.detail}" for f in result.findings]
    assert tuple(s.action for s in result.steps) == expect.actions
    reasons = " | ".join(s.reason for s in result.steps)
    wheels = [s.wheel.file for s in result.steps if s.wheel]
    assert wheels == ([expect.wheel] if expect.wheel else [])
    tritons = [s.requirement for s in result.steps if s.action == "install"]
    assert tritons == ([expect.triton] if expect.triton else [])
    builds = [s.build for s in result.steps if s.build]
    if expect.arch_list:
        assert [b.arch_list for b in builds] == [expect.arch_list]
    env = dict(builds[0].env) if builds else {}
    for key, value in expect.env.items():
        assert env[key] == value, f"{key}: {env.get(key)!r}"
    if expect.index_url:
        assert [s.index_url for s in result.steps if s.index_url] == [expect.index_url]
    for text in expect.reasons:
        assert text in reasons, f"{text!r} not in {reasons!r}"
    notes = " | ".join(result.notes)
    for text in expect.notes:
        assert text in notes


def test_every_plan_code_is_reachable_from_the_table() -> None:
    seen: set[str] = set()
    for facts, options, _expect in CASES.values():
        result = resolve_plan(facts, INDEX, options)
        if isinstance(result, Blocked):
            seen |= {f.code for f in result.findings}
    # SD2xx are the plan's codes, but for SD220-SD229: check's ComfyUI area (tests/test_comfyui)
    plan_codes = {c for c in CATALOG if c.startswith("SD2") and CATALOG[c].area != "comfyui"}
    assert plan_codes <= seen


def test_every_step_says_why() -> None:
    for facts, options, _expect in CASES.values():
        result = resolve_plan(facts, INDEX, options)
        if isinstance(result, Plan):
            assert all(s.reason and s.title for s in result.steps)


# --- properties over any machine ---------------------------------------------------------

PLANS_SEEN: list[Plan] = []
MAY_CHANGE = {"sageattention", "triton", "triton-windows", "sagedoctor-runtime"}
SAGE_VERSIONS = [None, "1.0.6", "2.2.0", *sorted({w.version for w in INDEX.windows_wheels})]


@st.composite
def machines(draw: st.DrawFn) -> tuple[Facts, ResolveOptions]:
    """Mostly machines a plan exists for, with every kind of trouble mixed in."""
    os_name = draw(st.sampled_from(["windows", "linux"]))
    common = ["3090", "4090", "5090", "a100", "h100", "h200"]
    gpus = tuple(draw(st.lists(st.sampled_from(common * 3 + sorted(GPUS)), min_size=1,
                               max_size=3)))
    minor = draw(st.integers(5, 14))
    cuda = draw(st.sampled_from(["cu126", "cu128", "cu130"] * 3 + ["cu118", "cpu"]))
    torch = f"2.{minor}.{draw(st.sampled_from([0, 1]))}+{cuda}"
    python = draw(st.sampled_from(["3.9.13", "3.10.11", "3.11.9", "3.12.10", "3.13.1"]))
    facts = machine(
        os_name, gpus, torch, python,
        triton=draw(st.sampled_from([None] * 4 + ["3.5.0", "3.6.0", "3.7.1"])),
        triton_windows=draw(st.sampled_from(["auto"] * 3 + [None, "3.2.0.post21",
                                                             "3.6.0.post26"])),
        sage=draw(st.sampled_from(SAGE_VERSIONS)),
        runtime=draw(st.sampled_from([None, RUNTIME])),
        nvcc=draw(st.sampled_from(["13.0.88", "12.8.93", "12.8.93", "13.0.88", "12.2.140",
                                   None])),
        gcc=draw(st.sampled_from(["13.3.0"] * 4 + [None])),
        cpus=draw(st.integers(1, 128)),
        mem=draw(st.one_of(st.none(), st.floats(1.0, 2048.0))),
    )
    options = ResolveOptions(use_linux_indexes=draw(st.booleans()))
    return facts, options


@settings(max_examples=300, deadline=None)
@given(machines())
def test_no_plan_touches_torch_or_anything_unnamed(case: tuple[Facts, ResolveOptions]) -> None:
    facts, options = case
    result = resolve_plan(facts, INDEX, options)
    if isinstance(result, Blocked):
        assert result.findings and all(f.severity == "error" for f in result.findings)
        return
    PLANS_SEEN.append(result)
    assert result.changed_distributions <= MAY_CHANGE
    for step in result.steps:
        changes_packages = step.action not in ("remove-leftovers", "enable-invokeai", "verify")
        assert bool(step.distributions) == changes_packages, step
    assert facts.system is not None and facts.target is not None
    target = facts.target
    assert target.torch is not None
    if facts.system.os == "linux":
        assert "triton" not in result.changed_distributions  # torch pins it on Linux
    for step in result.steps:
        if step.wheel is not None:  # the wheel meets the index's own constraints
            wheel = next(w for w in INDEX.windows_wheels if w.file == step.wheel.file)
            torch_cuda = target.torch.cuda or ""
            assert str(wheel.cuda_major) == torch_cuda.split(".")[0]
            assert wheel.torch.contains(target.torch.version.split("+")[0])
            assert wheel_supported_by(wheel, target.tags)
            assert not wheel.problems
        if step.action == "install" and facts.system.os == "windows":
            pair = INDEX.triton.pair_for(target.torch.version)
            assert pair is not None and step.requirement is not None
            # the pairing itself: a Turing cap only ever narrows it to itself or to nothing
            assert pair.windows is not None
            assert step.requirement == f"triton-windows{spec_text(pair.windows)}"
        if step.build is not None:
            archs = step.build.arch_list.split(";")
            assert archs and all(a in INDEX.build.archs for a in archs)
            assert " " not in step.build.arch_list
            threads = step.build.max_jobs * step.build.ext_parallel * step.build.nvcc_threads
            assert threads <= max(1, facts.system.cpu_count)


def test_the_property_test_met_real_plans() -> None:
    """Guards the strategy: most drawn machines must get a plan, or the property says little."""
    PLANS_SEEN.clear()
    test_no_plan_touches_torch_or_anything_unnamed()
    actions = {s.action for plan in PLANS_SEEN for s in plan.steps}
    assert len(PLANS_SEEN) >= 60
    assert {"install-wheel", "build-from-source", "install", "bundle-runtime"} <= actions
