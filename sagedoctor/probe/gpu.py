"""Every GPU of the machine and the NVIDIA driver version.

Sources, in order: NVML (the stable API), ``nvidia-smi`` (PATH, then the Windows install
paths; R470 drivers reject ``compute_cap``, so a second query without it and a name table),
then ``/proc/driver/nvidia/version`` for the driver alone. Non-NVIDIA GPUs are found well
enough to say they are not supported.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import sys
from pathlib import PureWindowsPath

from ..facts import Gpu, GpuFacts
from ..proc import ToolMissing, ToolTimeout, run_tool
from .roots import HostRoots, read_head

QUERY_FIELDS = "index,name,compute_cap,driver_version,memory.total"
QUERY_FIELDS_R470 = "index,name,driver_version,memory.total"

# Ordered: the first pattern that matches a name wins (so "RTX 4090" is not read as "RTX 40").
_NAME_TABLE: tuple[tuple[str, str], ...] = (
    (r"\bGB200\b|\bB200\b|\bB100\b", "10.0"),
    (r"RTX (PRO )?50\d0|RTX PRO \d+ Blackwell|RTX 5\d\d\d", "12.0"),
    (r"\bH100\b|\bH200\b|\bH800\b|\bH20\b|GH200", "9.0"),
    (r"RTX 40\d0|\bL4\b|\bL40S?\b|RTX \d000 Ada|RTX 4\d\d\d", "8.9"),
    (r"\bA100\b|\bA800\b|\bA30\b", "8.0"),
    (r"RTX 30\d0|RTX A\d{4}|\bA10G?\b|\bA16\b|\bA2\b|\bA40\b|RTX 3\d\d\d", "8.6"),
    (r"Orin", "8.7"),
    (r"RTX 20\d0|GTX 16\d0|\bT4\b|TITAN RTX|Quadro RTX|RTX 2\d\d\d", "7.5"),
    (r"\bV100\b|TITAN V\b", "7.0"),
    (r"\bP100\b", "6.0"),
    (r"GTX 10\d0|\bP40\b|\bP4\b|TITAN Xp?\b", "6.1"),
)

_PCI_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}


class GpuProbeError(Exception):
    pass


def compute_capability_from_name(name: str) -> str | None:
    for pattern, cc in _NAME_TABLE:
        if re.search(pattern, name, re.IGNORECASE):
            return cc
    return None


def nvidia_smi_candidates(os_name: str, roots: HostRoots) -> list[str]:
    """Where nvidia-smi may be: PATH first, then the Windows driver's own locations."""
    found = shutil.which("nvidia-smi", path=roots.path)
    candidates = [found] if found else []
    if os_name == "windows":
        candidates += [
            str(PureWindowsPath(roots.system_root, "System32", "nvidia-smi.exe")),
            str(PureWindowsPath(roots.program_files, "NVIDIA Corporation", "NVSMI",
                                "nvidia-smi.exe")),
        ]
    return candidates


def _parse_memory_mib(text: str) -> int | None:
    match = re.fullmatch(r"([0-9]+)\s*MiB", text.strip())
    return int(match.group(1)) if match else None


def parse_nvidia_smi_csv(text: str, with_compute_cap: bool) -> tuple[list[Gpu], str | None]:
    """Parse ``--format=csv,noheader`` output; raises GpuProbeError if no line makes sense."""
    gpus: list[Gpu] = []
    driver: str | None = None
    width = 5 if with_compute_cap else 4
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < width:
            continue
        # A GPU name can hold a comma: take the fixed fields from both ends.
        index_s, tail = parts[0], parts[-(width - 2):]
        name = ", ".join(parts[1 : len(parts) - (width - 2)])
        # [0-9], not isdigit()/\d: "²" is a digit to str but not to int(), "٥" to both.
        if not re.fullmatch(r"[0-9]+", index_s) or not name:
            continue
        if with_compute_cap:
            cc_s, driver_s, mem_s = tail
        else:
            driver_s, mem_s = tail
            cc_s = ""
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)+", driver_s):
            continue
        cc: str | None = cc_s if re.fullmatch(r"[0-9]+\.[0-9]+", cc_s) else None
        cc_source = "driver"
        if cc is None:
            cc = compute_capability_from_name(name)
            cc_source = "name-table" if cc else "unknown"
        gpus.append(Gpu(int(index_s), "nvidia", name, cc, _parse_memory_mib(mem_s), cc_source))
        driver = driver or driver_s
    if not gpus:
        raise GpuProbeError(f"nvidia-smi printed nothing usable: {text.strip()[:120]!r}")
    return gpus, driver


def parse_proc_driver_version(text: str) -> str | None:
    match = re.search(r"Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text)
    return match.group(1) if match else None


def _nvml_text(value: object) -> str:
    # pynvml returns bytes on old versions, str on new ones; a broken driver may return junk.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def gpu_from_nvml(index: int, name: object, capability: object, memory_total: object) -> Gpu:
    """One NVML device record -> Gpu; values that do not fit are left unknown, not trusted."""
    cc: str | None = None
    if (isinstance(capability, tuple) and len(capability) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 100
                    for v in capability)):
        cc = f"{capability[0]}.{capability[1]}"
    memory = (memory_total // (1024 * 1024)
              if isinstance(memory_total, int) and not isinstance(memory_total, bool)
              and memory_total >= 0 else None)
    text = _nvml_text(name).strip() or "NVIDIA GPU"
    if cc is None:
        cc = compute_capability_from_name(text)
        return Gpu(index, "nvidia", text, cc, memory, "name-table" if cc else "unknown")
    return Gpu(index, "nvidia", text, cc, memory)


def nvml_driver(value: object) -> str | None:
    text = _nvml_text(value).strip()
    return text if re.fullmatch(r"[0-9]+(\.[0-9]+)+", text) else None


def _probe_nvml(roots: HostRoots) -> tuple[list[Gpu], str | None] | None:
    if not roots.nvml:
        return None
    if sys.platform.startswith("linux"):
        # Loading the library is the cheap test; importing pynvml costs ~20 ms for nothing
        # on machines without the driver.
        try:
            ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: fall back to nvidia-smi
        return None
    try:
        driver = nvml_driver(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(gpu_from_nvml(i, pynvml.nvmlDeviceGetName(handle),
                                      tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                                      pynvml.nvmlDeviceGetMemoryInfo(handle).total))
        return gpus, driver
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _probe_nvidia_smi(os_name: str, notes: list[str],
                      roots: HostRoots) -> tuple[list[Gpu], str | None] | None:
    for exe in nvidia_smi_candidates(os_name, roots):
        try:
            result = run_tool([exe, f"--query-gpu={QUERY_FIELDS}", "--format=csv,noheader"])
        except ToolMissing:
            continue
        except ToolTimeout as exc:
            notes.append(str(exc))
            return None
        if result.returncode == 0:
            try:
                return parse_nvidia_smi_csv(result.stdout, with_compute_cap=True)
            except GpuProbeError as exc:
                notes.append(str(exc))
                return None
        if "compute_cap" in (result.stdout + result.stderr):
            # R470 and older: no compute_cap field. Ask again without it.
            try:
                retry = run_tool([exe, f"--query-gpu={QUERY_FIELDS_R470}", "--format=csv,noheader"])
                if retry.returncode == 0:
                    return parse_nvidia_smi_csv(retry.stdout, with_compute_cap=False)
            except (ToolTimeout, GpuProbeError) as exc:
                notes.append(str(exc))
                return None
        message = (result.stderr or result.stdout).strip().splitlines()
        notes.append(f"nvidia-smi exited {result.returncode}: {message[0] if message else ''}")
        return None
    return None


def _other_vendor_gpus(os_name: str, machine: str, roots: HostRoots) -> list[Gpu]:
    """AMD, Intel and Apple GPUs, found only well enough to name them."""
    if os_name == "darwin":
        return [Gpu(0, "apple", f"Apple GPU ({machine or 'Metal'})", None, None, "unknown")]
    found: list[Gpu] = []
    drm = roots.sys / "class" / "drm"
    if os_name == "linux" and drm.is_dir():
        for index, card in enumerate(sorted(drm.glob("card[0-9]*"))):
            if "-" in card.name:
                continue
            try:
                vendor_id = (card / "device" / "vendor").read_text(
                    encoding="ascii", errors="replace").strip()
            except OSError:
                continue
            vendor = _PCI_VENDORS.get(vendor_id.lower())
            if vendor in ("amd", "intel"):
                found.append(Gpu(index, vendor, f"{vendor.upper()} GPU ({card.name})", None, None,
                                 "unknown"))
    return found


def probe_gpu(os_name: str | None = None, machine: str = "",
              roots: HostRoots | None = None) -> GpuFacts:
    os_name = os_name or sys.platform.replace("win32", "windows")
    roots = roots or HostRoots.from_env(os.environ)
    notes: list[str] = []
    nvidia = _probe_nvml(roots)
    source = "nvml"
    if nvidia is None:
        nvidia = _probe_nvidia_smi(os_name, notes, roots)
        source = "nvidia-smi"
    gpus: list[Gpu] = list(nvidia[0]) if nvidia else []
    driver = nvidia[1] if nvidia else None
    if not nvidia:
        source = "none"
        if os_name == "linux":
            try:
                text = read_head(roots.proc / "driver" / "nvidia" / "version")
            except OSError:
                text = ""
            driver = parse_proc_driver_version(text)
            if driver:
                source = "proc"
                notes.append("the NVIDIA driver is loaded but no tool listed its GPUs")
    gpus += _other_vendor_gpus(os_name, machine, roots)
    return GpuFacts(tuple(gpus), driver, source, tuple(notes))
