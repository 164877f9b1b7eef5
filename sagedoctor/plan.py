"""The Plan: one immutable value of ordered steps, and the one step vocabulary.

`resolve` makes it, `render_plan` shows it, `install.execute` carries it out: all three read
the types and the action names from here, so the executor never imports the resolver.
"""

from __future__ import annotations

from dataclasses import dataclass

from .decide.findings import Finding

# Every action a Step may name: an install plan's in the order it lists them, then those only
# an uninstall plan has (hook, invokeai.yaml, the replaced version back, records last).
ACTIONS = ("recover", "uninstall", "remove-leftovers", "install", "install-wheel",
           "install-from-index", "build-from-source", "bundle-runtime", "enable-invokeai",
           "verify", "remove-hook", "restore-invokeai", "unset-invokeai-key", "put-back",
           "remove-records")
# The steps that put a SageAttention build in place (and are smoke-checked after).
SAGE_ACTIONS = frozenset({"install-wheel", "install-from-index", "build-from-source"})
# The steps that install a wheel prepared before the venv is touched.
PACKAGE_ACTIONS = SAGE_ACTIONS | {"install", "bundle-runtime"}
# The steps that change the venv or its files (recover runs on entry; verify after the proof).
CHANGING_ACTIONS = frozenset(ACTIONS) - {"recover", "verify"}


@dataclass(frozen=True)
class WheelDownload:
    file: str
    url: str
    sha256: str | None
    sha256_source: str | None


@dataclass(frozen=True)
class BuildSettings:
    source: str  # a local folder, or the pinned archive URL
    commit: str | None  # None for a user's own folder
    arch_list: str  # "8.9;9.0": semicolons, since upstream reads a space-separated list as one
    cuda_home: str
    max_jobs: int
    ext_parallel: int
    nvcc_threads: int
    build_requires: tuple[str, ...]  # installed into a private folder, not the venv
    source_sha256: str | None = None  # the archive's digest, where the index knows it
    # The C++ standard torch's headers demand: the build's temporary copy of setup.py gets
    # its -std= flags raised to it (source_build.patch_cxx_standard); None: left as it is.
    cxx_standard: int | None = None

    @property
    def label(self) -> str:
        """What this build is made for, as the install output names it: "archs 8.9;9.0, C++20"
        (the standard only where the build raises it; the cache key carries it too)."""
        return f"archs {self.arch_list}" + (f", C++{self.cxx_standard}" if self.cxx_standard
                                             else "")

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return (
            ("TORCH_CUDA_ARCH_LIST", self.arch_list),
            ("CUDA_HOME", self.cuda_home),
            ("MAX_JOBS", str(self.max_jobs)),
            ("EXT_PARALLEL", str(self.ext_parallel)),
            ("NVCC_APPEND_FLAGS", f"--threads {self.nvcc_threads}"),
        )


@dataclass(frozen=True)
class Step:
    action: str  # one of ACTIONS
    title: str
    reason: str
    distributions: tuple[str, ...] = ()  # every distribution this step adds, replaces or removes
    requirement: str | None = None
    wheel: WheelDownload | None = None
    index_url: str | None = None
    build: BuildSettings | None = None  # build-from-source, or the fallback of install-from-index
    paths: tuple[str, ...] = ()
    config: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Switch:
    """Which switch routes an app that has its own (InvokeAI's attention_backend): "app" or
    "sagedoctor" (the start-up hook), and why; forced where --use chose it."""

    app: str
    use: str
    why: str
    forced: bool = False


@dataclass(frozen=True)
class Plan:
    python: str
    prefix: str
    os: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    purpose: str = "install"  # or "uninstall": what the executor and the renderer say it is
    switches: tuple[Switch, ...] = ()  # one per app with a switch of its own

    @property
    def changed_distributions(self) -> frozenset[str]:
        return frozenset(d for s in self.steps for d in s.distributions)


@dataclass(frozen=True)
class Blocked:
    findings: tuple[Finding, ...]
