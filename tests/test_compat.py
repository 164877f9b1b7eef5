"""The pure compatibility rules, as tables."""

from __future__ import annotations

import pytest

from sagedoctor.decide.fixes import quote
from sagedoctor.decide.matrix import (
    min_driver_for_cuda,
    required_sage_modules,
)
from sagedoctor.decide.versions import (
    parse_sage_local,
    sage_serves_torch,
    torch_build,
)
from sagedoctor.probe.gpu import (
    GpuProbeError,
    compute_capability_from_name,
    nvidia_smi_candidates,
    parse_nvidia_smi_csv,
    parse_proc_driver_version,
)
from sagedoctor.probe.roots import HostRoots
from sagedoctor.probe.system import is_wsl, normalise_machine, windows_build_from_version
from sagedoctor.probe.target import venv_python
from sagedoctor.probe.toolchain import parse_gcc_version, parse_nvcc_version
from tests.standins import H200


@pytest.mark.parametrize(("version", "cuda", "torch", "and_higher", "post"), [
    ("2.2.0+cu130torch2.10.0andhigher.post6", 13, (2, 10, 0), True, 6),
    ("2.2.0+cu128torch2.9.1.post6", 12, (2, 9, 1), False, 6),
    ("2.2.0+cu128torch2.9.0andhigher.post4", 12, (2, 9, 0), True, 4),
    ("2.2.0+cu124torch2.5.1.post3", 12, (2, 5, 1), False, 3),
    ("2.1.1+cu126torch2.6.0", 12, (2, 6, 0), False, None),
    ("2.2.0.post3+cu130torch2.10.0", 13, (2, 10, 0), False, None),  # wildminder's scheme
    ("2.2.0+cu12.8torch2.10.0cxx11abiTRUE", 12, (2, 10, 0), False, None),  # Astral's scheme
])
def test_parse_sage_local(version: str, cuda: int, torch: tuple[int, int, int],
                          and_higher: bool, post: int | None) -> None:
    build = parse_sage_local(version)
    assert build is not None
    assert (build.cuda_major, build.torch, build.and_higher, build.post) == (
        cuda, torch, and_higher, post)


@pytest.mark.parametrize("version", ["2.2.0", "1.0.6", "not a version", "2.2.0+local"])
def test_unlabelled_sage_versions(version: str) -> None:
    assert parse_sage_local(version) is None


@pytest.mark.parametrize(("sage", "torch", "ok"), [
    ("2.2.0+cu130torch2.10.0andhigher.post6", "2.13.0+cu130", True),
    ("2.2.0+cu130torch2.10.0andhigher.post6", "2.9.1+cu130", False),
    ("2.2.0+cu128torch2.7.1.post3", "2.7.0", True),  # exact minor, any patch
    ("2.2.0+cu128torch2.7.1.post3", "2.8.0", False),
])
def test_sage_serves_torch(sage: str, torch: str, ok: bool) -> None:
    build = parse_sage_local(sage)
    assert build is not None
    assert sage_serves_torch(build, torch) is ok


@pytest.mark.parametrize(("major", "os_name", "minimum"), [
    (13, "linux", "580"), (13, "windows", "580"), (12, "linux", "525.60.13"),
    (12, "windows", "528.33"), (11, "linux", "450.80.02"), (10, "linux", None),
])
def test_min_driver(major: int, os_name: str, minimum: str | None) -> None:
    assert min_driver_for_cuda(major, os_name) == minimum


@pytest.mark.parametrize(("version", "full", "cuda", "hip", "kind", "cuda_out"), [
    ("2.11.0", "2.11.0+cu130", "13.0", None, "cuda", "13.0"),  # the H200's torch
    ("2.7.1+cu128", None, None, None, "cuda", "12.8"),
    ("2.7.1+cpu", "2.7.1+cpu", None, None, "cpu", None),
    ("2.10.0+rocm7.1", "2.10.0+rocm7.1", None, "7.1", "rocm", None),
    ("2.13.0", "2.13.0", None, None, "cpu", None),
])
def test_torch_build(version: str, full: str | None, cuda: str | None, hip: str | None,
                     kind: str, cuda_out: str | None) -> None:
    build = torch_build(version, full, cuda, hip)
    assert (build.kind, build.cuda) == (kind, cuda_out)


@pytest.mark.parametrize(("cc", "modules"), [
    ("8.0", ("_qattn_sm80",)), ("8.6", ("_qattn_sm80",)), ("8.9", ("_qattn_sm89",)),
    ("9.0", ("_qattn_sm90",)), ("12.0", ("_qattn_sm89",)), ("7.5", ()),
])
def test_compiled_modules_per_arch(cc: str, modules: tuple[str, ...]) -> None:
    assert required_sage_modules(cc) == modules


@pytest.mark.parametrize(("name", "cc"), [
    ("NVIDIA GeForce RTX 4090", "8.9"), ("NVIDIA GeForce RTX 3060 Laptop GPU", "8.6"),
    ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA H200", "9.0"), ("Tesla T4", "7.5"),
    ("NVIDIA GeForce RTX 5090", "12.0"), ("NVIDIA RTX A6000", "8.6"),
    ("Tesla V100-SXM2-16GB", "7.0"), ("NVIDIA L40S", "8.9"), ("NVIDIA Graphics Device", None),
])
def test_name_table(name: str, cc: str | None) -> None:
    assert compute_capability_from_name(name) == cc


def test_nvidia_smi_csv_from_the_h200() -> None:
    gpus, driver = parse_nvidia_smi_csv(
        (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8"), with_compute_cap=True)
    assert driver == "580.159.04"
    assert [(g.index, g.name, g.compute_capability, g.memory_mib) for g in gpus] == [
        (0, "NVIDIA H200", "9.0", 143771)]


def test_nvidia_smi_csv_name_with_comma_and_na_memory() -> None:
    gpus, _ = parse_nvidia_smi_csv("3, NVIDIA Foo, Rev 2, 8.0, 550.1, [N/A]\n", True)
    assert (gpus[0].index, gpus[0].name, gpus[0].memory_mib) == (3, "NVIDIA Foo, Rev 2", None)


def test_nvidia_smi_garbage_raises() -> None:
    with pytest.raises(GpuProbeError):
        parse_nvidia_smi_csv("No devices were found\n", True)


def test_driver_files_from_the_h200() -> None:
    text = (H200 / "proc-driver-nvidia-version.txt").read_text(encoding="utf-8")
    assert parse_proc_driver_version(text) == "580.159.04"
    assert parse_nvcc_version((H200 / "nvcc-version.txt").read_text(encoding="utf-8")) == "13.0.88"
    assert parse_gcc_version("gcc (Debian 12.2.0-14+deb12u1) 12.2.0\n") == "12.2.0"


def test_windows_paths_and_names() -> None:
    assert str(venv_python(__import__("pathlib").PureWindowsPath("C:/My Apps/venv"), "windows")
               ) == "C:\\My Apps\\venv\\Scripts\\python.exe"
    smi = nvidia_smi_candidates("windows", HostRoots(path="", system_root="D:\\Win"))
    assert smi[0] == "D:\\Win\\System32\\nvidia-smi.exe"
    assert smi[1].endswith("NVIDIA Corporation\\NVSMI\\nvidia-smi.exe")
    assert windows_build_from_version("10.0.22631") == 22631
    assert normalise_machine("AMD64") == "x86_64"
    assert is_wsl("5.15.167.4-microsoft-standard-WSL2", "")
    assert quote("C:\\Program Files\\x", "windows") == '"C:\\Program Files\\x"'
    assert quote("/home/a b/x", "linux") == "'/home/a b/x'"
