"""`sagedoctor enable` / `disable`: the venv-wide start-up hook for apps with no attention
setting of their own (InvokeAI without `attention_backend`, plain scripts), and for ComfyUI
the choice between that hook and its own `--use-sage-attention` flag. The enable flow
changes the venv; this module says what changed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..apps.comfyui import (
    DESKTOP_LAUNCH_ARGS,
    DESKTOP_SETTINGS,
    SAGE_FLAG,
    comfyui_ways,
    sageattn_table,
)
from ..facts import ComfyUIFacts, TargetFacts, VerificationFacts
from ..flows import enable as flow
from ..hook import hook_on


def run_enable(target: TargetFacts, out: TextIO | None = None, *,
               comfyui: ComfyUIFacts | None = None, launch_flag: bool = False,
               verification: VerificationFacts | None = None) -> int:
    stream = out or sys.stdout
    options = flow.EnableOptions(target, comfyui, launch_flag, verification)
    if launch_flag:
        return _enable_launch_flag(options, stream)
    change = flow.enable_hook(options)
    stream.write(change.message + "\n")
    if target.invokeai is not None:
        stream.write(_invokeai_switch_note(target))
    if comfyui is not None:
        stream.write(comfyui_ways(comfyui, hook_on=True, table=_verify_table(target)))
    return 0


def _invokeai_switch_note(target: TargetFacts) -> str:
    """Where the InvokeAI root beside the venv selects InvokeAI's own SageAttention switch, the
    hook stands aside in that venv (one router at a time): said now, not only at its start."""
    switch = flow.invokeai_switch(target)
    if switch is None:
        return ""
    config, value = switch
    return (f"Note: {config} sets attention_backend: {value}, InvokeAI's own switch: the hook "
            "stands aside while it does (one router at a time). Set it to auto to let the hook "
            "route.\n")


def _verify_table(target: TargetFacts) -> str:
    record = flow.verify_record(target)
    if record is None:
        return "verify's record: none (run `sagedoctor verify`)\n"
    return (f"verify's record ({record.verified_at}, verdict {record.verdict}):\n"
            + sageattn_table(record.results))


def _enable_launch_flag(options: flow.EnableOptions, stream: TextIO) -> int:
    target, verification = options.target, options.verification
    done = flow.write_flag_launcher(options)
    if done.written is None:
        stream.write(comfyui_ways(done.comfyui, hook_on=hook_on(target),
                                  table=_verify_table(target)))
        stream.write(f"Nothing written: only the portable build has a .bat file to copy. "
                     f"{_how_to_set_flag(done.comfyui)}\n")
        return 0
    stream.write(f"Wrote {done.written}: run_nvidia_gpu.bat with {SAGE_FLAG}. Start ComfyUI "
                 "with it to use ComfyUI's own switch; run_nvidia_gpu.bat is unchanged.\n")
    if verification is None or verification.status != "verified":
        stream.write(f"No verify has checked sageattn() in this Python: run `sagedoctor verify "
                     f"{flow.named(target, options.comfyui)}` before starting ComfyUI with "
                     "it.\n")
    stream.write(comfyui_ways(done.comfyui, hook_on=hook_on(target),
                              table=_verify_table(target)))
    return 0


def _how_to_set_flag(comfyui: ComfyUIFacts) -> str:
    if comfyui.layout == "desktop":
        return (f"ComfyUI Desktop: add `use-sage-attention` to its server launch arguments "
                f"(Settings > Server-Config; saved as {DESKTOP_LAUNCH_ARGS} in "
                f"{Path(comfyui.root).joinpath(*DESKTOP_SETTINGS)}).")
    return f"Add {SAGE_FLAG} to the command that starts main.py."


def run_disable(target: TargetFacts, out: TextIO | None = None, *,
                comfyui: ComfyUIFacts | None = None) -> int:
    stream = out or sys.stdout
    removed = flow.remove_flag_launcher(comfyui)
    if removed is not None:
        stream.write(f"Removed {removed}\n")
    change = flow.disable_hook(target)
    stream.write(change.message + "\n")
    return 0


def disable_without_interpreter(paths: list[Path], why: str, out: TextIO | None = None) -> int:
    """Remove the hook files whatever is in them (binary bytes, not UTF-8, empty)."""
    stream = out or sys.stdout
    for path in flow.disable_without_interpreter(paths):
        stream.write(f"Disabled: removed {path} without reading it: this venv's Python did "
                     f"not start ({why})\n")
    return 0
