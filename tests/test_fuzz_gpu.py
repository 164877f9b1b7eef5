"""Fuzzing the GPU and toolchain parsers: nvidia-smi's CSV, NVML's values, the driver's
/proc/driver/nvidia/version and the tools' version lines. Each input gives GPUs and a driver
that make sense, or a probe note (GpuProbeError), never a crash."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from sagedoctor.facts import Gpu
from sagedoctor.probe.gpu import (
    GpuProbeError,
    gpu_from_nvml,
    nvml_driver,
    parse_nvidia_smi_csv,
    parse_proc_driver_version,
    probe_gpu,
)
from sagedoctor.probe.roots import HostRoots
from sagedoctor.probe.toolchain import parse_gcc_version, parse_ninja_version, parse_nvcc_version
from tests.fuzz_support import TRICKY, byte_mutations, fuzz, mutations, outcome, text_or_junk
from tests.standins import FIXTURES, fake_nvidia_smi

SMI = (FIXTURES / "h200-linux" / "nvidia-smi-query.csv").read_text(encoding="utf-8")
PROC = (FIXTURES / "h200-linux" / "proc-driver-nvidia-version.txt").read_text(encoding="utf-8")
NVCC = (FIXTURES / "h200-linux" / "nvcc-version.txt").read_text(encoding="utf-8")
DRIVER = re.compile(r"[0-9]+(\.[0-9]+)+")


def sane_gpu(gpu: Gpu) -> None:
    assert isinstance(gpu.index, int) and gpu.index >= 0
    assert gpu.name and isinstance(gpu.name, str)
    assert gpu.compute_capability is None or re.fullmatch(r"[0-9]+\.[0-9]+",
                                                          gpu.compute_capability)
    assert gpu.memory_mib is None or gpu.memory_mib >= 0


@st.composite
def smi_lines(draw: st.DrawFn) -> str:
    """CSV rows built from plausible and hostile fields (names with commas, odd digits)."""
    field = st.one_of(st.sampled_from(["0", "1", "12", "9.0", "12.0", "580.159.04", "470.182",
                                       "143771 MiB", "[N/A]", "[Not Supported]", "NVIDIA H200",
                                       "NVIDIA GeForce RTX 4090, Laptop", "²", "١", "٥٨٠.١",
                                       "", " "]),
                      st.text(alphabet=TRICKY + "0123456789.MiB", max_size=12))
    rows = draw(st.lists(st.lists(field, min_size=1, max_size=7), max_size=5))
    return "\n".join(", ".join(r) for r in rows)


@fuzz(400)
@given(text_or_junk(st.one_of(mutations(SMI), smi_lines())), st.booleans())
@example("², NVIDIA H200, 9.0, 580.159.04, 143771 MiB", True)  # isdigit() but not int()
@example("0, NVIDIA H200, 9.0, ٥٨٠.١٥٩, 143771 MiB", True)  # \d but not a version
@example("0, NVIDIA H200, ٩.٠, 580.159.04, ٥ MiB", True)
def test_nvidia_smi_csv_parses_or_is_a_probe_note(text: str, with_cc: bool) -> None:
    def parse() -> None:
        gpus, driver = parse_nvidia_smi_csv(text, with_compute_cap=with_cc)
        assert gpus
        for gpu in gpus:
            sane_gpu(gpu)
        assert driver is None or DRIVER.fullmatch(driver)

    outcome("nvidia-smi CSV", parse, (GpuProbeError,))


nvml_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                        st.binary(max_size=40), st.text(max_size=40),
                        st.tuples(st.integers(), st.integers()),
                        st.tuples(st.booleans(), st.integers(-5, 200)),
                        st.lists(st.integers(0, 20), max_size=3).map(tuple))


@fuzz(300)
@given(st.integers(0, 64), nvml_values, nvml_values, nvml_values, nvml_values)
@example(0, b"NVIDIA H200", (9, 0), 150754820096, b"580.159.04")
@example(0, b"\xff\xfe junk", (True, False), -1, b"\x00")
def test_nvml_values_give_a_gpu_with_only_trusted_fields(index: int, name: object, cc: object,
                                                         memory: object, driver: object) -> None:
    def parse() -> None:
        sane_gpu(gpu_from_nvml(index, name, cc, memory))
        found = nvml_driver(driver)
        assert found is None or DRIVER.fullmatch(found)

    outcome("NVML values", parse)


@fuzz(300)
@given(text_or_junk(mutations(PROC)))
@example("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  ٥٨٠.١٥٩  Release Build")
def test_proc_driver_version_is_a_version_or_unknown(text: str) -> None:
    def parse() -> str:
        driver = parse_proc_driver_version(text)
        assert driver is None or DRIVER.fullmatch(driver)
        return "parsed" if driver else "unknown"

    outcome("/proc/driver/nvidia/version", parse)


@fuzz(300)
@given(text_or_junk(st.one_of(mutations(NVCC), mutations("gcc (Ubuntu 13.3.0) 13.3.0\n"),
                              mutations("1.11.1\n"))))
@example("Cuda compilation tools, release ١٣.٠, V١٣.٠.٨٨")
def test_tool_version_lines_give_a_version_or_unknown(text: str) -> None:
    def parse() -> str:
        found = [parse_nvcc_version(text), parse_gcc_version(text), parse_ninja_version(text)]
        for version in found:
            assert version is None or DRIVER.fullmatch(version)
        return "parsed" if any(found) else "unknown"

    outcome("nvcc/gcc/ninja --version", parse)


# --- the real probe over a fake host: bytes from a fake nvidia-smi and a fake /proc ---------

@fuzz(25)
@given(st.one_of(byte_mutations(SMI.encode()), st.binary(max_size=400)),
       st.one_of(byte_mutations(PROC.encode()), st.binary(max_size=200)))
@example(b"\xff\xfe0\x00,\x00 \x00H\x00", b"\x00" * 100)
def test_probe_gpu_over_hostile_tool_output_and_driver_file(smi: bytes, proc: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tools = root / "bin"
        fake_nvidia_smi(tools, "replay")
        (tools / "nvidia-smi.out").write_bytes(smi)
        (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
        (root / "proc" / "driver" / "nvidia" / "version").write_bytes(proc)
        roots = HostRoots(proc=root / "proc", sys=root / "sys", path=str(tools), nvml=False)

        def parse() -> str:
            facts = probe_gpu("linux", "x86_64", roots)
            for gpu in facts.gpus:
                sane_gpu(gpu)
            assert facts.driver_version is None or DRIVER.fullmatch(facts.driver_version)
            return facts.source  # "nvidia-smi", "proc" or "none", each a documented finding

        outcome("probe_gpu (fake nvidia-smi + /proc)", parse)
