"""`sagedoctor enable` / `disable`: the venv-wide start-up hook for apps with no attention
setting of their own (InvokeAI without `attention_backend`, plain scripts), and for ComfyUI
the choice between that hook and its own `--use-sage-attention` flag."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from ..apps.comfyui import (
    DESKTOP_LAUNCH_ARGS,
    DESKTOP_SETTINGS,
    FLAG_LAUNCHER,
    SAGE_FLAG,
    comfyui_ways,
    read_bytes_as_text,
    sageattn_table,
    with_sage_flag,
)
from ..decide.fixes import target_arg
from ..facts import ComfyUIFacts, TargetFacts, VerificationFacts
from ..file_meta import write_atomic
from ..hook import EnableError, HookChange, hook_on
from ..probe.target import current_os


def run_enable(target: TargetFacts, out: TextIO | None = None, *,
               comfyui: ComfyUIFacts | None = None, launch_flag: bool = False,
               verification: VerificationFacts | None = None) -> int:
    stream = out or sys.stdout
    if launch_flag:
        from ..install.pending import refuse_if_pending

        # A killed install's journal: the venv is half-installed; the next install rolls it back.
        refuse_if_pending(Path(target.prefix), "enable", _named(target, comfyui))
        return _enable_launch_flag(target, comfyui, verification, stream)
    from ..hook import enable

    change = enable(target, comfyui)
    stream.write(change.message + "\n")
    if target.invokeai is not None:
        stream.write(_invokeai_switch_note(target))
    if comfyui is not None:
        stream.write(comfyui_ways(comfyui, hook_on=True, table=_verify_table(target)))
    return 0


def _invokeai_switch_note(target: TargetFacts) -> str:
    """Where the InvokeAI root beside the venv selects InvokeAI's own SageAttention switch, the
    hook stands aside in that venv (one router at a time): said now, not only at its start."""
    from ..runtime.app_switch import configured_backend

    config = Path(target.prefix).parent / "invokeai.yaml"
    value = configured_backend(str(config))
    if value is None or "sage" not in value.lower():
        return ""
    return (f"Note: {config} sets attention_backend: {value}, InvokeAI's own switch: the hook "
            "stands aside while it does (one router at a time). Set it to auto to let the hook "
            "route.\n")


def _named(target: TargetFacts, comfyui: ComfyUIFacts | None) -> str:
    return target_arg(target, current_os(), comfyui)


def _verify_table(target: TargetFacts) -> str:
    from ..state import load_record

    record = load_record(Path(target.prefix))
    if record is None:
        return "verify's record: none (run `sagedoctor verify`)\n"
    return (f"verify's record ({record.verified_at}, verdict {record.verdict}):\n"
            + sageattn_table(record.results))


def _enable_launch_flag(target: TargetFacts, comfyui: ComfyUIFacts | None,
                        verification: VerificationFacts | None, stream: TextIO) -> int:
    """Write run_nvidia_gpu_sageattention.bat beside run_nvidia_gpu.bat (never over it)."""
    if comfyui is None:
        raise EnableError("--launch-flag is ComfyUI's switch, and no ComfyUI was found",
                          "pass --comfyui DIR (the ComfyUI_windows_portable folder)")
    if target.sageattention is None:
        raise EnableError(f"SageAttention is not installed in {target.prefix}",
                          f"run `sagedoctor install {_named(target, comfyui)}` first")
    if comfyui.sage_flag_supported is False:
        raise EnableError(f"ComfyUI {comfyui.version or ''} does not declare {SAGE_FLAG}; "
                          "it would stop at start", "update ComfyUI first")
    from ..decide.requirements import verification_is_current

    # What verify found about the build installed now (an older build's record says nothing).
    wrong = verification.wrong_sageattn if verification is not None and verification_is_current(
        verification, target) else ()
    if wrong:
        raise EnableError(f"verify found `sageattn()` wrong on {wrong[0].name}: with "
                          f"{SAGE_FLAG} every image would be garbage",
                          f"run `sagedoctor install {_named(target, comfyui)}` (it replaces "
                          "the build), then verify")
    if comfyui.layout != "portable":
        stream.write(comfyui_ways(comfyui, hook_on=hook_on(target),
                                  table=_verify_table(target)))
        stream.write(f"Nothing written: only the portable build has a .bat file to copy. "
                     f"{_how_to_set_flag(comfyui)}\n")
        return 0
    source = Path(comfyui.root) / "run_nvidia_gpu.bat"
    text = read_bytes_as_text(source)
    if text is None:
        raise EnableError(f"{source} is missing or unreadable",
                          f"add {SAGE_FLAG} to the line of your launcher that runs main.py")
    flagged = with_sage_flag(text)
    if flagged == text:
        raise EnableError(f"{source} has no line running ComfyUI/main.py to add {SAGE_FLAG} to",
                          f"add {SAGE_FLAG} by hand to the line that starts ComfyUI")
    dest = Path(comfyui.root) / FLAG_LAUNCHER
    if dest.exists() and read_bytes_as_text(dest) != flagged:
        raise EnableError(f"{dest} exists and is not what sagedoctor would write",
                          "move it away (or keep it: it is yours), then run this again")
    write_atomic(dest, flagged.encode("latin-1"))
    stream.write(f"Wrote {dest}: run_nvidia_gpu.bat with {SAGE_FLAG}. Start ComfyUI with it "
                 "to use ComfyUI's own switch; run_nvidia_gpu.bat is unchanged.\n")
    if verification is None or verification.status != "verified":
        stream.write(f"No verify has checked sageattn() in this Python: run `sagedoctor verify "
                     f"{_named(target, comfyui)}` before starting ComfyUI with it.\n")
    now = replace(comfyui, sage_flag_in=tuple(dict.fromkeys((*comfyui.sage_flag_in,
                                                             FLAG_LAUNCHER))))
    stream.write(comfyui_ways(now, hook_on=hook_on(target),
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
    if comfyui is not None and comfyui.layout == "portable":
        launcher = Path(comfyui.root) / FLAG_LAUNCHER
        source = read_bytes_as_text(Path(comfyui.root) / "run_nvidia_gpu.bat")
        if source is not None and read_bytes_as_text(launcher) == with_sage_flag(source):
            launcher.unlink()  # only the copy enable wrote; one the user edited stays
            stream.write(f"Removed {launcher}\n")
    from ..hook import disable

    change: HookChange = disable(target)
    stream.write(change.message + "\n")
    return 0


def disable_without_interpreter(paths: list[Path], why: str, out: TextIO | None = None) -> int:
    """Remove the hook files whatever is in them (binary bytes, not UTF-8, empty): the
    file is ours, and reading it is not needed to know that."""
    from ..hook import remove_hook_files

    stream = out or sys.stdout
    for path in remove_hook_files(paths):
        stream.write(f"Disabled: removed {path} without reading it: this venv's Python did "
                     f"not start ({why})\n")
    return 0
