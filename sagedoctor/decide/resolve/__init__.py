"""Facts + index + options -> one immutable Plan, or the findings that block it. Pure.

Every step says why it is there; `plan`, `install --dry-run` and the executor read the same
object, so what is shown is what is done.
"""

from __future__ import annotations

from ...facts import Facts
from ...index import WheelIndex
from ...plan import Blocked, Plan
from ..checks import diagnose
from ..checks.pytorch import torch_kernel_findings
from ..findings import finding
from ..matrix import (
    usable_gpus,
)
from .linux import resolve_linux
from .steps import (
    ResolveOptions,
    app_switches,
    cleanup_steps,
    final_steps,
    nvidia_gpus,
    recover_steps,
)
from .windows import resolve_windows

# Findings from `check` that no install step can fix: the plan stops and shows them, at the
# severity check gives them (SD144 is an error only for a GPU SageAttention would use; SD183
# and SD197 only where the plan would edit that invokeai.yaml; SD184: InvokeAI would not
# start).
_BLOCKING_CODES = frozenset({
    "SD101", "SD111", "SD112", "SD113", "SD114", "SD116", "SD120", "SD131", "SD132", "SD133",
    "SD141", "SD142", "SD143", "SD144", "SD145", "SD183", "SD184", "SD190", "SD197", "SD228",
})


def resolve_plan(facts: Facts, index: WheelIndex,
                 options: ResolveOptions | None = None) -> Plan | Blocked:
    options = options or ResolveOptions()
    target = facts.target
    if facts.system is None or target is None:
        # What could not be checked, and what no target could change (no GPU): exit 2 then,
        # as check says for the same machine.
        failures = [f for f in diagnose(facts, index) if f.code == "SD190" or f.fatal]
        return Blocked(tuple(failures) or (finding(
            "SD190", "error", "the target environment was not inspected", area="python",
            title="Could not check python"),))
    os_name = facts.system.os
    blockers = [f for f in diagnose(facts, index, options.runtime_version, use=options.use)
                if f.fatal or (f.code in _BLOCKING_CODES and f.severity == "error")]
    if blockers:
        return Blocked(tuple(blockers))
    gpus = usable_gpus(nvidia_gpus(facts), os_name)
    # torch without kernels for a GPU SageAttention would serve: nothing to install fixes it
    # (the same SD144 as `check`, with the torch build that does serve it).
    no_kernels = torch_kernel_findings(target, gpus, os_name, nvidia_gpus(facts),
                                       facts.system.machine,
                                       facts.toolchain.nvcc_version if facts.toolchain else None)
    if no_kernels:
        return Blocked(tuple(no_kernels))
    steps = cleanup_steps(target)
    if os_name == "windows":
        more, notes, problems = resolve_windows(facts, target, index, gpus, options.rebuild)
        if options.source_dir:
            notes.append(f"--source {options.source_dir} is not used on Windows: the fork's "
                         "prebuilt wheels need no compiler")
    else:
        more, notes, problems = resolve_linux(facts, target, index, gpus, options)
    if problems:
        return Blocked(tuple(problems))
    steps += more
    final, final_notes = final_steps(facts, target, options, changed=bool(steps))
    recover, recover_notes = recover_steps(facts)
    return Plan(python=target.executable, prefix=target.prefix, os=os_name,
                steps=tuple(recover + steps + final),
                notes=tuple(recover_notes + notes + final_notes),
                switches=app_switches(facts, options))
