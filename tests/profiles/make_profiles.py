"""Writes the machine profiles in this folder (facts files, as `check --json` saves them).

Each profile is a base machine plus the differences that make it what it is. Values come from
../shared/fixtures/h200-linux (the H200) and ../shared/facts/ (Windows wheels, drivers, triton).
Run it after a facts schema change, or a version bump (the ready profiles carry the runtime
this sagedoctor bundles): `python tests/profiles/make_profiles.py`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from packaging import tags as wheel_tags

HERE = Path(__file__).parent
# The sagedoctor-runtime version a "ready" venv has: the one this sagedoctor bundles.
RUNTIME = "0.1.0"

# glibc of the recorded H200 host (Ubuntu 24.04); the probe lists what packaging lists there.
LINUX_GLIBC = (2, 39)
# Where packaging names a manylinux_2_x platform by its older PEP 513/571/599 alias too.
_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def _platforms(os_name: str, machine: str, os_release: str) -> list[str]:
    """The platform tags packaging's sys_tags() gives an interpreter on that machine."""
    if os_name == "windows":
        return ["win_arm64" if machine == "arm64" else "win_amd64"]
    if os_name == "darwin":
        darwin_major = int(os_release.split(".")[0])  # Darwin 24 is macOS 15
        arch = "arm64" if machine == "arm64" else "x86_64"
        return list(wheel_tags.mac_platforms((darwin_major - 9, 0), arch))
    arch = "aarch64" if machine == "arm64" else machine
    oldest = 17 if arch == "aarch64" else 5  # manylinux starts at glibc 2.17 on aarch64
    out = []
    for minor in range(LINUX_GLIBC[1], oldest - 1, -1):
        out.append(f"manylinux_2_{minor}_{arch}")
        legacy = _LEGACY_MANYLINUX.get((2, minor))
        if legacy:
            out.append(f"{legacy}_{arch}")
    return [*out, f"linux_{arch}"]


def target_tags(system: dict[str, Any], target: dict[str, Any]) -> list[str]:
    """The target's wheel tags, most preferred first, as `packaging.tags` makes them for its
    CPython version and platform (hand-written lists once missed cp39-abi3)."""
    major, minor = (int(p) for p in target["python_version"].split(".")[:2])
    platforms = _platforms(system["os"], system["machine"], system["os_release"])
    found = list(wheel_tags.cpython_tags((major, minor), platforms=platforms))
    found += wheel_tags.compatible_tags((major, minor), f"cp{major}{minor}", platforms)
    return [str(t) for t in found]


LINUX_H200: dict[str, Any] = {
    "schema_version": 1,
    "sagedoctor_version": "0.1.0",
    "areas": ["system", "gpu", "python", "torch", "triton", "sageattention", "toolchain",
              "invokeai"],
    "probe_failures": [],
    "system": {"os": "linux", "os_release": "6.8.0-49-generic", "os_version": "#49-Ubuntu SMP",
               "windows_build": None, "machine": "x86_64", "wsl": False, "cpu_count": 16,
               "memory_gib": 125.7},
    # nvidia-smi-query.csv from the lent H200
    "gpu": {"gpus": [{"index": 0, "vendor": "nvidia", "name": "NVIDIA H200",
                      "compute_capability": "9.0", "memory_mib": 143771, "cc_source": "driver"}],
            "driver_version": "580.159.04", "source": "nvidia-smi", "notes": []},
    "target": {
        "executable": "/home/ana/app/.venv/bin/python", "python_version": "3.12.3",
        "implementation": "cpython", "tags": [],  # main() fills every profile's from packaging
        "is_venv": True, "prefix": "/home/ana/app/.venv", "base_prefix": "/usr",
        "site_packages": "/home/ana/app/.venv/lib/python3.12/site-packages",
        "site_packages_writable": True, "include_dir": "/usr/include/python3.12",
        "has_python_h": True, "libs_dir": None, "has_python_lib": None,
        # torch-version.py fixture: dist says 2.11.0, version.py says +cu130
        "torch": {"version": "2.11.0", "full_version": "2.11.0+cu130", "cuda": "13.0",
                  "hip": None},
        "triton": "3.6.0", "triton_windows": None,
        "sageattention": {"version": "2.2.0", "package_dir": "/home/ana/app/.venv/lib/python3.12/"
                          "site-packages/sageattention",
                          "compiled_modules": ["_fused", "_qattn_sm80", "_qattn_sm89",
                                               "_qattn_sm90"], "leftovers": []},
        "invokeai": None, "pip": "24.0", "uv": None, "runtime": None, "pip_importable": True},
    "toolchain": {"cuda_home": "/usr/local/cuda", "nvcc_path": "/usr/local/cuda/bin/nvcc",
                  "nvcc_version": "13.0.88", "gcc_version": "13.3.0", "ninja_version": "1.11.1",
                  "cuda_home_rejected": []},
    "invokeai": {"root": None, "root_source": "none", "installed": False, "venv": None,
                 "config_path": None, "config_exists": False, "schema_version": None,
                 "attention_type": None, "attention_backend": None, "config_error": None},
}
LINUX_H200["target"]["tags"] = target_tags(LINUX_H200["system"], LINUX_H200["target"])

WIN_4090: dict[str, Any] = {
    **copy.deepcopy(LINUX_H200),
    "system": {"os": "windows", "os_release": "11", "os_version": "10.0.22631",
               "windows_build": 22631, "machine": "x86_64", "wsl": False, "cpu_count": 24,
               "memory_gib": 63.8},
    "gpu": {"gpus": [{"index": 0, "vendor": "nvidia", "name": "NVIDIA GeForce RTX 4090",
                      "compute_capability": "8.9", "memory_mib": 24564, "cc_source": "driver"}],
            "driver_version": "581.57", "source": "nvml", "notes": []},
    "target": {
        "executable": "C:\\Users\\Ana\\invokeai\\.venv\\Scripts\\python.exe",
        "python_version": "3.12.10", "implementation": "cpython",
        "tags": [],
        "is_venv": True, "prefix": "C:\\Users\\Ana\\invokeai\\.venv",
        "base_prefix": "C:\\Users\\Ana\\AppData\\Roaming\\uv\\python\\cpython-3.12.10",
        "site_packages": "C:\\Users\\Ana\\invokeai\\.venv\\Lib\\site-packages",
        "site_packages_writable": True,
        "include_dir": "C:\\Users\\Ana\\AppData\\Roaming\\uv\\python\\cpython-3.12.10\\Include",
        "has_python_h": True,
        "libs_dir": "C:\\Users\\Ana\\AppData\\Roaming\\uv\\python\\cpython-3.12.10\\libs",
        "has_python_lib": True,
        "torch": {"version": "2.10.0+cu130", "full_version": "2.10.0+cu130", "cuda": "13.0",
                  "hip": None},
        "triton": None, "triton_windows": "3.6.0.post25",
        # a post6 wheel name from facts/sageattention.md section 2.4
        "sageattention": {"version": "2.2.0+cu130torch2.10.0andhigher.post6",
                          "package_dir": "C:\\Users\\Ana\\invokeai\\.venv\\Lib\\site-packages"
                                         "\\sageattention",
                          "compiled_modules": ["_fused", "_qattn_sm80", "_qattn_sm89",
                                               "_qattn_sm90"], "leftovers": []},
        "invokeai": {"version": "6.14.2", "attention_backend_supported": False,
                     "attention_backend_choices": []},
        # the launcher makes its venv with `uv venv`: no pip in it
        "pip": None, "uv": None, "runtime": None, "pip_importable": False},
    "toolchain": {"cuda_home": None, "nvcc_path": None, "nvcc_version": None,
                  "gcc_version": None, "ninja_version": None, "cuda_home_rejected": []},
    "invokeai": {"root": "C:\\Users\\Ana\\invokeai", "root_source": "INVOKEAI_ROOT",
                 "installed": True, "venv": "C:\\Users\\Ana\\invokeai\\.venv",
                 "config_path": "C:\\Users\\Ana\\invokeai\\invokeai.yaml", "config_exists": True,
                 "schema_version": "4.0.3", "attention_type": "auto", "attention_backend": None,
                 "config_error": None},
}
WIN_4090["target"]["tags"] = target_tags(WIN_4090["system"], WIN_4090["target"])


def gpu(index: int, name: str, cc: str | None, mem: int | None = 24564,
        vendor: str = "nvidia", source: str = "driver") -> dict[str, Any]:
    return {"index": index, "vendor": vendor, "name": name, "compute_capability": cc,
            "memory_mib": mem, "cc_source": source}


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


PORTABLE = "D:\\ComfyUI_windows_portable"
NO_GPU: dict[str, Any] = {"gpus": [], "driver_version": None, "source": "none", "notes": []}
SAGE_WIN = WIN_4090["target"]["sageattention"]

PROFILES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "linux-h200-ready": (LINUX_H200, {"target": {"runtime": RUNTIME}}),
    # The ready H200 after an install was SIGKILLed mid-change: its journal is pending (SD199).
    "linux-h200-install-interrupted": (LINUX_H200, {"target": {"runtime": RUNTIME},
        "interrupted_install": {
            "journal": "/home/user/.local/state/sagedoctor/venvs/3f2a9c1d0b7e4a56.install/"
                       "journal.json", "pid": 48213, "phase": "changing", "running": False}}),
    "linux-cpu-machine-no-torch": (LINUX_H200, {"gpu": NO_GPU, "target": {
        "torch": None, "triton": None, "sageattention": None}}),
    "linux-amd-gpu": (LINUX_H200, {"gpu": {**NO_GPU, "gpus": [
        gpu(0, "AMD GPU (card0)", None, None, "amd", "unknown")]}}),
    "macos-apple": (LINUX_H200, {"system": {"os": "darwin", "os_release": "24.1.0",
                                            "machine": "arm64"},
                                 "gpu": {**NO_GPU, "gpus": [gpu(0, "Apple GPU (arm64)", None,
                                                                None, "apple", "unknown")]}}),
    "windows-arm64": (WIN_4090, {"system": {"machine": "arm64"}}),
    "wsl-rtx3090-needs-install": (LINUX_H200, {
        "system": {"os_release": "5.15.167.4-microsoft-standard-WSL2", "wsl": True},
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 3090", "8.6")], "driver_version": "576.88"},
        "target": {"torch": {"version": "2.7.1+cu128", "full_version": "2.7.1+cu128",
                             "cuda": "12.8"}, "triton": "3.3.1", "sageattention": None},
        "toolchain": {"cuda_home": None, "nvcc_path": None, "nvcc_version": None}}),
    "linux-v100": (LINUX_H200, {"gpu": {"gpus": [gpu(0, "Tesla V100-SXM2-32GB", "7.0", 32768)],
                                        "driver_version": "575.57.08"},
                                "target": {"torch": {"version": "2.7.1+cu128",
                                                     "full_version": "2.7.1+cu128",
                                                     "cuda": "12.8"}, "triton": "3.3.1"},
                                "toolchain": {"nvcc_version": "12.8.93"}}),
    "linux-t4-turing": (LINUX_H200, {"gpu": {"gpus": [gpu(0, "Tesla T4", "7.5", 15360)]}}),
    "windows-rtx2080-turing": (WIN_4090, {"gpu": {"gpus": [
        gpu(0, "NVIDIA GeForce RTX 2080 SUPER", "7.5", 8192)]}}),
    "linux-orin-sm87": (LINUX_H200, {"system": {"machine": "arm64"}, "gpu": {"gpus": [
        gpu(0, "Orin (nvgpu)", "8.7", None)], "driver_version": "540.4.0"},
        "target": {"torch": {"version": "2.5.0a0+872d972e41.nv24.08",
                             "full_version": "2.5.0a0+872d972e41.nv24.08", "cuda": "12.6"},
                   "triton": "3.1.0"},
        "toolchain": {"nvcc_version": "12.6.68"}}),
    "linux-r470-unknown-gpu": (LINUX_H200, {
        "gpu": {"gpus": [gpu(0, "NVIDIA Graphics Device", None, 24268, source="unknown")],
                "driver_version": "470.182.03"},
        "target": {"torch": {"version": "2.4.1+cu118", "full_version": "2.4.1+cu118",
                             "cuda": "11.8"}, "triton": "3.0.0", "sageattention": None}}),
    "linux-gpu-listing-hung": (LINUX_H200, {"gpu": {**NO_GPU, "notes": [
        "`nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total "
        "--format=csv,noheader` did not answer within 5 s"]}}),
    "linux-driver-too-old-for-cu130": (LINUX_H200, {"gpu": {"driver_version": "550.54.15"}}),
    "windows-driver-unknown": (WIN_4090, {"gpu": {"driver_version": None}}),
    "windows-embedded-python-no-headers": (WIN_4090, {"target": {
        "has_python_h": False, "has_python_lib": False}}),
    "linux-system-python-readonly": (LINUX_H200, {"target": {
        "is_venv": False, "prefix": "/usr", "executable": "/usr/bin/python3",
        "site_packages": "/usr/lib/python3/dist-packages", "site_packages_writable": False}}),
    "windows-python38": (WIN_4090, {"target": {"python_version": "3.8.10"}}),
    "linux-no-torch": (LINUX_H200, {"target": {"torch": None, "triton": None}}),
    "windows-cpu-torch": (WIN_4090, {"target": {"torch": {
        "version": "2.7.1+cpu", "full_version": "2.7.1+cpu", "cuda": None}}}),
    "linux-rocm-torch": (LINUX_H200, {"target": {"torch": {
        "version": "2.10.0+rocm7.1", "full_version": "2.10.0+rocm7.1", "cuda": None,
        "hip": "7.1.25424"}}}),
    "linux-gtx1080-cu128": (LINUX_H200, {"gpu": {"gpus": [
        gpu(0, "NVIDIA GeForce GTX 1080 Ti", "6.1", 11264)], "driver_version": "575.64"},
        "target": {"torch": {"version": "2.7.1+cu128", "full_version": "2.7.1+cu128",
                             "cuda": "12.8"}, "triton": "3.3.1"}}),
    "windows-torch23": (WIN_4090, {"target": {"torch": {
        "version": "2.3.1+cu121", "full_version": "2.3.1+cu121", "cuda": "12.1"},
        "sageattention": None}}),
    "windows-triton-missing": (WIN_4090, {"target": {"triton_windows": None}}),
    "windows-triton-mismatch": (WIN_4090, {"target": {
        "torch": {"version": "2.7.1+cu128", "full_version": "2.7.1+cu128", "cuda": "12.8"},
        "sageattention": {**SAGE_WIN, "version": "2.2.0+cu128torch2.7.1.post3"},
        "triton_windows": "3.6.0.post25"}}),
    "windows-plain-triton": (WIN_4090, {"target": {"triton": "3.6.0"}}),
    "windows-sageattention1": (WIN_4090, {"target": {"sageattention": {
        "version": "1.0.6", "compiled_modules": [], "package_dir": None, "leftovers": []}}}),
    "windows-sage-cuda-major-mismatch": (WIN_4090, {"target": {"sageattention": {
        **SAGE_WIN, "version": "2.2.0+cu128torch2.10.0andhigher.post6"}}}),
    "windows-sage-torch-mismatch": (WIN_4090, {"target": {
        "torch": {"version": "2.9.1+cu128", "full_version": "2.9.1+cu128", "cuda": "12.8"},
        "triton_windows": "3.5.1.post24",
        "sageattention": {**SAGE_WIN, "version": "2.2.0+cu128torch2.8.0.post3"}}}),
    "linux-4090-sm80-only-build-old-nvcc": (LINUX_H200, {
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 4090", "8.9")], "driver_version": "570.86"},
        "target": {"torch": {"version": "2.7.1+cu128", "full_version": "2.7.1+cu128",
                             "cuda": "12.8"}, "triton": "3.3.1",
                   "sageattention": {"version": "2.2.0", "package_dir": None,
                                     "compiled_modules": ["_fused", "_qattn_sm80"],
                                     "leftovers": []}},
        "toolchain": {"nvcc_version": "12.2.140"}}),
    "linux-egg-leftovers": (LINUX_H200, {"target": {"sageattention": {
        "leftovers": ["/home/ana/app/.venv/lib/python3.12/site-packages/"
                      "sageattention-2.2.0-py3.12-linux-x86_64.egg"]}}}),
    "linux-nvcc-major-mismatch-no-gcc": (LINUX_H200, {
        "target": {"sageattention": None},
        "toolchain": {"nvcc_version": "12.8.93", "gcc_version": None, "ninja_version": None}}),
    "windows-invokeai-backend-set-but-unsupported": (WIN_4090, {"invokeai": {
        "attention_backend": "sage"}}),
    "windows-invokeai-yaml-broken": (WIN_4090, {"invokeai": {
        "schema_version": None, "attention_type": None, "config_error":
        "C:\\Users\\Ana\\invokeai\\invokeai.yaml is not valid YAML: mapping values are not "
        "allowed here"}}),
    "linux-target-probe-failed": (LINUX_H200, {"target": None, "probe_failures": [
        {"area": "target", "message": "/home/ana/app/.venv/bin/python failed to report (exit 1):"
         " ModuleNotFoundError: No module named 'encodings'"}]}),
    "linux-h100-plus-v100": (LINUX_H200, {"gpu": {"gpus": [
        gpu(0, "NVIDIA H100 80GB HBM3", "9.0", 81559), gpu(1, "Tesla V100-PCIE-16GB", "7.0",
                                                           16384)]}}),
    # uv venvs have no pip: fixes go through `uv pip --python`
    "linux-uv-venv-triton-mismatch": (LINUX_H200, {"target": {
        "pip": None, "pip_importable": False, "triton": "3.5.1"}}),
    # a pip dist-info left behind without its package: pip cannot start
    "linux-stale-pip-cpu-torch": (LINUX_H200, {"target": {
        "pip_importable": False, "torch": {"version": "2.11.0+cpu", "full_version": "2.11.0+cpu",
                                           "cuda": None}}}),
    # /usr/local/bin/nvcc is a wrapper script: /usr/local has no include/cuda_runtime.h
    "linux-wrapper-nvcc-no-toolkit": (LINUX_H200, {
        "target": {"sageattention": None},
        "toolchain": {"cuda_home": None, "nvcc_path": "/usr/local/bin/nvcc",
                      "cuda_home_rejected": [
                          "/usr/local (from nvcc on PATH): no include/cuda_runtime.h"]}}),
    "linux-cuda-home-points-nowhere": (LINUX_H200, {"toolchain": {"cuda_home_rejected": [
        "/opt/cuda-12.4 (from CUDA_HOME): no bin/nvcc, no include/cuda_runtime.h"]}}),
    # What the last `sagedoctor verify` recorded (the state store), as the probe reads it.
    "linux-h200-sageattn-wrong": (LINUX_H200, {"verification": {
        "status": "verified", "verdict": "sdpa-only", "verified_at": "2026-12-02T10:00:00+00:00",
        "sageattention": "2.2.0", "torch": "2.11.0", "wrong_sageattn": [
            {"gpu": "GPU-5b2d9d0e-0000-0000-0000-000000000000", "name": "NVIDIA H200",
             "arch": "9.0", "kernel": "sage_fp8_sm90"}]}}),
    "linux-h200-verify-stale": (LINUX_H200, {"verification": {
        "status": "verified", "verdict": "routing", "verified_at": "2026-11-01T10:00:00+00:00",
        "sageattention": "2.1.1", "torch": "2.10.0", "wrong_sageattn": []}}),
    "windows-4090-unverified": (WIN_4090, {"verification": {"status": "corrupt"}}),
    # A folder where `enable` wrote the start-up hook (issue 34, D12): every Python of the
    # venv skips it, so the hook is off though the verify passed.
    "linux-h200-hook-path-a-folder": (LINUX_H200, {"verification": {
        "status": "verified", "verdict": "routing", "verified_at": "2026-12-02T10:00:00+00:00",
        "sageattention": "2.2.0", "torch": "2.11.0", "wrong_sageattn": [],
        "hook_problem": "/home/ana/app/.venv/lib/python3.12/site-packages/"
                        "sagedoctor-runtime.pth is a folder, not a file"}}),
    "windows-invokeai-sliced": (WIN_4090, {"invokeai": {"attention_type": "sliced"}}),
    # The launcher updated InvokeAI after the last verify: .first_run is back and
    # .launcher-bootstrap/ was rewritten (facts/invokeai.md 1.2).
    "windows-invokeai-launcher-updated": (WIN_4090, {
        "invokeai": {"first_run_at": "2026-12-03T09:30:00+00:00",
                     "bootstrap_changed_at": "2026-12-03T09:29:58+00:00"},
        "verification": {"status": "verified", "verdict": "routing",
                         "verified_at": "2026-12-01T18:00:00+00:00",
                         "sageattention": "2.2.0+cu130torch2.10.0andhigher.post6",
                         "torch": "2.10.0+cu130", "wrong_sageattn": []}}),
    # post5 wheels give NaN on short sequence lengths (index: problems); post6 replaces them
    "windows-4090-post5-nan-wheel": (WIN_4090, {"target": {"runtime": RUNTIME, "sageattention": {
        **SAGE_WIN, "version": "2.2.0+cu130torch2.10.0andhigher.post5"}}}),
    # An InvokeAI whose config class declares attention_backend (test_check_cli's stand-in has
    # these choices): `install` sets it, so check names it until then.
    "windows-invokeai-backend-not-set": (WIN_4090, {"target": {"runtime": RUNTIME, "invokeai": {
        "version": "6.15.0", "attention_backend_supported": True,
        "attention_backend_choices": ["auto", "torch-sdp", "sage"]}}}),
    # InvokeAI's own scope has no kernel for sm75 or sm87 (facts/apps.md): the plan never
    # writes attention_backend: sage there, and check warns where it is already on (issue 36).
    "windows-rtx2080-invokeai-switch": (WIN_4090, {"schema_version": 2,
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 2080 SUPER", "7.5", 8192)]},
        "target": {"torch": {"version": "2.5.1+cu124", "full_version": "2.5.1+cu124",
                             "cuda": "12.4", "triton_pin": "==3.1.0", "cxx_standard": 17},
                   "triton_windows": "3.3.1.post21", "sageattention": None, "invokeai": {
            "version": "6.15.0", "attention_backend_supported": True,
            "attention_backend_choices": ["auto", "torch-sdp", "sage"]}}}),
    "linux-orin-invokeai-switch-on": (LINUX_H200, {
        "system": {"machine": "arm64"},
        "gpu": {"gpus": [gpu(0, "Orin (nvgpu)", "8.7", None)], "driver_version": "540.4.0"},
        "target": {"torch": {"version": "2.5.0a0+872d972e41.nv24.08",
                             "full_version": "2.5.0a0+872d972e41.nv24.08", "cuda": "12.6"},
                   "triton": "3.1.0",
                   "invokeai": {"version": "6.15.0", "attention_backend_supported": True,
                                "attention_backend_choices": ["auto", "torch-sdp", "sage"]}},
        "toolchain": {"nvcc_version": "12.6.68"},
        "invokeai": {"root": "/home/ana/invokeai", "root_source": "INVOKEAI_ROOT",
                     "installed": True, "venv": "/home/ana/invokeai/.venv",
                     "config_path": "/home/ana/invokeai/invokeai.yaml", "config_exists": True,
                     "schema_version": "4.0.3", "attention_backend": "sage"}}),
    # An H100 where verify measured the kernel slower than SDPA at InvokeAI's shapes (issue 36:
    # SDXL 1024 at 0.68x, FLUX 1024 at 0.75x): InvokeAI's fixed rule would route them, so
    # sagedoctor's hook, which keeps them on SDPA, is the better switch.
    "linux-h100-invokeai-rule-slower": (LINUX_H200, {
        "gpu": {"gpus": [gpu(0, "NVIDIA H100 80GB HBM3", "9.0", 81559)]},
        "target": {"runtime": RUNTIME, "invokeai": {
            "version": "6.15.0", "attention_backend_supported": True,
            "attention_backend_choices": ["auto", "torch-sdp", "sage"]}},
        "invokeai": {"root": "/home/ana/invokeai", "root_source": "INVOKEAI_ROOT",
                     "installed": True, "venv": "/home/ana/app/.venv",
                     "config_path": "/home/ana/invokeai/invokeai.yaml", "config_exists": True,
                     "schema_version": "4.0.3"},
        "verification": {
            "status": "verified", "verdict": "routing",
            "verified_at": "2026-12-05T10:00:00+00:00", "sageattention": "2.2.0",
            "torch": "2.11.0", "wrong_sageattn": [], "hooked": True, "app_shapes": [
                {"gpu": "GPU-6a1f0c2e-0000-0000-0000-000000000000",
                 "name": "NVIDIA H100 80GB HBM3", "arch": "9.0", "shape": "SDXL 1024x1024",
                 "head_dim": 64, "tokens": 4096, "kernel": "sage_fp8_sm90", "speedup": 0.68,
                 "route": False},
                {"gpu": "GPU-6a1f0c2e-0000-0000-0000-000000000000",
                 "name": "NVIDIA H100 80GB HBM3", "arch": "9.0", "shape": "FLUX 1024x1024",
                 "head_dim": 128, "tokens": 4608, "kernel": "sage_fp8_sm90", "speedup": 0.75,
                 "route": False}]}}),
    # An InvokeAI whose attention_backend type is an enum: the choices are not guessed (SD189)
    "windows-invokeai-choices-unreadable": (WIN_4090, {"target": {"runtime": RUNTIME,
        "invokeai": {"version": "6.15.0", "attention_backend_supported": True,
                     "attention_backend_choices": [], "attention_backend_unread":
                     "its type `AttentionBackend` names no fixed choices this check can read"}}}),
    # check run from a shell with diffusers' own switch on (SD155)
    "linux-h200-diffusers-sage-backend": (LINUX_H200, {
        "system": {"diffusers_attn_backend": "sage"}, "target": {"runtime": RUNTIME}}),
    # `--root` names an empty folder: the edit would create an invokeai.yaml InvokeAI never reads
    "windows-invokeai-root-not-a-root": (WIN_4090, {
        "target": {"runtime": RUNTIME, "invokeai": {
            "version": "6.15.0", "attention_backend_supported": True,
            "attention_backend_choices": ["auto", "torch-sdp", "sage"]}},
        "invokeai": {"root": "D:\\Downloads", "root_source": "--root", "installed": False,
                     "venv": None, "config_path": "D:\\Downloads\\invokeai.yaml",
                     "config_exists": False, "schema_version": None, "attention_type": None}}),
    "windows-rtx5090-torch213-ready": (WIN_4090, {
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 5090", "12.0", 32607)],
                "driver_version": "581.57"},
        "target": {"torch": {"version": "2.13.0+cu130", "full_version": "2.13.0+cu130",
                             "cuda": "13.0"}, "triton_windows": "3.7.1.post27",
                   "runtime": RUNTIME}}),
    # --- today's torch and the rules derived from it (issue 18); facts schema 2 ---------------
    # torch 2.14.1 METADATA: `Requires-Dist: triton~=3.8.0; platform_system == "Linux" ...` on
    # win_amd64 and manylinux alike; its ATen.h demands C++20 (both read from PyPI, 2026-12-04).
    "windows-torch214-today": (WIN_4090, {"schema_version": 2, "target": {
        "torch": {"version": "2.14.1+cu130", "full_version": "2.14.1+cu130", "cuda": "13.0",
                  "triton_pin": "~=3.8.0", "cxx_standard": 20},
        "triton_windows": "3.7.1.post27", "sageattention": None}}),
    # torch 2.15.0 pins triton~=3.9.0; triton-windows has no 3.9 yet
    "windows-torch215-no-triton-windows-yet": (WIN_4090, {"schema_version": 2, "target": {
        "torch": {"version": "2.15.0+cu132", "full_version": "2.15.0+cu132", "cuda": "13.2",
                  "triton_pin": "~=3.9.0", "cxx_standard": 20},
        "triton_windows": "3.8.0.post29", "sageattention": None}}),
    "linux-h200-torch214-cxx20-build": (LINUX_H200, {"schema_version": 2, "target": {
        "torch": {"version": "2.14.1", "full_version": "2.14.1+cu130", "cuda": "13.0",
                  "triton_pin": "~=3.8.0", "cxx_standard": 20},
        "triton": "3.8.0", "sageattention": None}}),
    # cu126 builds stop at sm90: an RTX 5090 gets no torch kernels at all
    "linux-rtx5090-torch-cu126": (LINUX_H200, {"schema_version": 2,
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 5090", "12.0", 32607)],
                "driver_version": "580.95.05"},
        "target": {"torch": {"version": "2.14.1+cu126", "full_version": "2.14.1+cu126",
                             "cuda": "12.6", "triton_pin": "~=3.8.0", "cxx_standard": 20},
                   "triton": "3.8.0", "sageattention": None},
        "toolchain": {"nvcc_version": "12.8.93"}}),
    # Turing with torch 2.5: the pairing (3.1) intersected with the Turing cap (< 3.3) is 3.1
    "windows-rtx2080-turing-torch25": (WIN_4090, {"schema_version": 2,
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 2080 SUPER", "7.5", 8192)]},
        "target": {"torch": {"version": "2.5.1+cu124", "full_version": "2.5.1+cu124",
                             "cuda": "12.4", "triton_pin": "==3.1.0", "cxx_standard": 17},
                   "triton_windows": "3.3.1.post21", "sageattention": None}}),
    # An RTX 2080 beside an RTX 3090 with torch 2.10: the 3090 gets Triton 3.6, the 2080 stays
    # on PyTorch attention
    "windows-turing-beside-3090-torch210": (WIN_4090, {"gpu": {"gpus": [
        gpu(0, "NVIDIA GeForce RTX 3090", "8.6"),
        gpu(1, "NVIDIA GeForce RTX 2080 SUPER", "7.5", 8192)]}}),
    # torch 2.14's headers demand C++20, which gcc 9 cannot compile
    "linux-rtx4090-torch214-gcc9": (LINUX_H200, {"schema_version": 2,
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 4090", "8.9")], "driver_version": "580.95.05"},
        "target": {"torch": {"version": "2.14.1", "full_version": "2.14.1+cu130", "cuda": "13.0",
                             "triton_pin": "~=3.8.0", "cxx_standard": 20},
                   "triton": "3.8.0", "sageattention": None},
        "toolchain": {"gcc_version": "9.4.0"}}),
    # Astral's builds have no 8.9: an RTX 4090 is built from source instead
    "linux-rtx4090-optional-index": (LINUX_H200, {"schema_version": 2,
        "gpu": {"gpus": [gpu(0, "NVIDIA GeForce RTX 4090", "8.9")], "driver_version": "570.86"},
        "target": {"torch": {"version": "2.10.0+cu128", "full_version": "2.10.0+cu128",
                             "cuda": "12.8", "triton_pin": "==3.6.0", "cxx_standard": 17},
                   "triton": "3.6.0", "sageattention": None},
        "toolchain": {"nvcc_version": "12.8.93"}}),
    # INVOKEAI_ROOT left pointing at a project folder with a .venv but none of InvokeAI's marks.
    "linux-invokeai-root-not-invokeai": (LINUX_H200, {"invokeai": {
        "root": "/home/ana/projects/site", "root_source": "INVOKEAI_ROOT", "installed": True,
        "venv": "/home/ana/projects/site/.venv",
        "config_path": "/home/ana/projects/site/invokeai.yaml", "config_exists": False,
        "marked": False}}),
    # ComfyUI's portable build (facts of `check --comfyui`, tests/fixtures/comfyui/portable): its
    # embedded Python with pip (get-pip.py at release), no include/libs, a copy of
    # run_nvidia_gpu.bat with --use-sage-attention, and a verify that found sageattn() wrong.
    "windows-comfyui-portable-sage-flag-wrong": (WIN_4090, {
        "areas": [*WIN_4090["areas"], "comfyui"],
        "target": {"executable": f"{PORTABLE}\\python_embeded\\python.exe", "is_venv": False,
                   "prefix": f"{PORTABLE}\\python_embeded",
                   "base_prefix": f"{PORTABLE}\\python_embeded",
                   "site_packages": f"{PORTABLE}\\python_embeded\\Lib\\site-packages",
                   "include_dir": f"{PORTABLE}\\python_embeded\\Include",
                   "has_python_h": False, "libs_dir": f"{PORTABLE}\\python_embeded\\libs",
                   "has_python_lib": False, "invokeai": None, "pip": "25.0.1",
                   "pip_importable": True,
                   "sageattention": {"package_dir": f"{PORTABLE}\\python_embeded\\Lib\\"
                                                    "site-packages\\sageattention"}},
        "invokeai": {"root": None, "root_source": "none", "installed": False, "venv": None,
                     "config_path": None, "config_exists": False, "schema_version": None,
                     "attention_type": None},
        "comfyui": {"layout": "portable", "root": PORTABLE, "source": "--comfyui",
                    "python": f"{PORTABLE}\\python_embeded\\python.exe",
                    "code_dir": f"{PORTABLE}\\ComfyUI", "version": "0.8.1",
                    "version_source": "comfyui_version.py", "sage_flag_supported": True,
                    "sage_flag_in": ["run_nvidia_gpu_sage.bat"],
                    "launchers": ["run_nvidia_gpu.bat", "run_nvidia_gpu_sage.bat"],
                    "pth_file": f"{PORTABLE}\\python_embeded\\python312._pth",
                    "pth_imports_site": True, "problem": None},
        "verification": {"status": "verified", "verdict": "sdpa-only",
                         "verified_at": "2026-12-03T20:15:00+00:00",
                         "sageattention": "2.2.0+cu130torch2.10.0andhigher.post6",
                         "torch": "2.10.0+cu130", "wrong_sageattn": [
                             {"gpu": "GPU-1f0c1e55-0000-0000-0000-000000000000",
                              "name": "NVIDIA GeForce RTX 4090", "arch": "8.9",
                              "kernel": "sage_fp8_cuda_sm89"}]}}),
}


def main(only: set[str] | None = None) -> None:
    for name, (base, changes) in PROFILES.items():
        if only and name not in only:
            continue
        data = merge(base, changes)
        if changes.get("target", ...) is None:
            data["target"] = None
        if data["target"] is not None:
            data["target"]["tags"] = target_tags(data["system"], data["target"])
        (HERE / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    import sys

    main(set(sys.argv[1:]) or None)  # names: write only those profiles
