"""The enable and disable flows: the venv-wide start-up hook on or off, and for ComfyUI's
portable build the launcher copy with its own `--use-sage-attention` flag written or removed.
Each returns what it changed; commands/enable says it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..apps.comfyui import FLAG_LAUNCHER, SAGE_FLAG, read_bytes_as_text, with_sage_flag
from ..decide.fixes import target_arg
from ..facts import ComfyUIFacts, TargetFacts, VerificationFacts
from ..file_meta import write_atomic
from ..hook import EnableError, HookChange
from ..probe.target import current_os
from ..state import VerifyRecord


@dataclass(frozen=True)
class EnableOptions:
    target: TargetFacts
    comfyui: ComfyUIFacts | None = None
    launch_flag: bool = False  # --launch-flag: ComfyUI's own switch, not the hook
    verification: VerificationFacts | None = None


@dataclass(frozen=True)
class FlagLauncher:
    """What `enable --launch-flag` did: the launcher it wrote (None: only the portable build
    has a .bat file to copy, nothing was written), and ComfyUI as it is now."""

    written: Path | None
    comfyui: ComfyUIFacts


def named(target: TargetFacts, comfyui: ComfyUIFacts | None) -> str:
    """The target as a fix names it (`--venv DIR`, `--comfyui DIR`)."""
    return target_arg(target, current_os(), comfyui)


def enable_hook(options: EnableOptions) -> HookChange:
    from ..hook import enable

    return enable(options.target, options.comfyui)


def invokeai_switch(target: TargetFacts) -> tuple[Path, str] | None:
    """The InvokeAI root's invokeai.yaml beside the venv and its attention_backend, where it
    selects InvokeAI's own SageAttention switch (the hook then stands aside in that venv)."""
    from ..runtime.app_switch import configured_backend

    config = Path(target.prefix).parent / "invokeai.yaml"
    value = configured_backend(str(config))
    if value is None or "sage" not in value.lower():
        return None
    return config, value


def verify_record(target: TargetFacts) -> VerifyRecord | None:
    """verify's record of the venv, whose table ComfyUI's two ways are shown beside."""
    from ..state import load_record

    return load_record(Path(target.prefix))


def write_flag_launcher(options: EnableOptions) -> FlagLauncher:
    """Write run_nvidia_gpu_sageattention.bat beside run_nvidia_gpu.bat (never over it)."""
    from ..hook import refuse_if_pending

    target, comfyui, verification = options.target, options.comfyui, options.verification
    # A killed install's journal: the venv is half-installed; the next install rolls it back.
    refuse_if_pending(Path(target.prefix), "enable", named(target, comfyui))
    if comfyui is None:
        raise EnableError("--launch-flag is ComfyUI's switch, and no ComfyUI was found",
                          "pass --comfyui DIR (the ComfyUI_windows_portable folder)")
    if target.sageattention is None:
        raise EnableError(f"SageAttention is not installed in {target.prefix}",
                          f"run `sagedoctor install {named(target, comfyui)}` first")
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
                          f"run `sagedoctor install {named(target, comfyui)}` (it replaces "
                          "the build), then verify")
    if comfyui.layout != "portable":
        return FlagLauncher(None, comfyui)
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
    now = replace(comfyui, sage_flag_in=tuple(dict.fromkeys((*comfyui.sage_flag_in,
                                                             FLAG_LAUNCHER))))
    return FlagLauncher(dest, now)


def remove_flag_launcher(comfyui: ComfyUIFacts | None) -> Path | None:
    """The launcher copy enable wrote, removed (one the user edited stays); None: none."""
    if comfyui is None or comfyui.layout != "portable":
        return None
    launcher = Path(comfyui.root) / FLAG_LAUNCHER
    source = read_bytes_as_text(Path(comfyui.root) / "run_nvidia_gpu.bat")
    if source is not None and read_bytes_as_text(launcher) == with_sage_flag(source):
        launcher.unlink()  # only the copy enable wrote; one the user edited stays
        return launcher
    return None


def disable_hook(target: TargetFacts) -> HookChange:
    from ..hook import disable

    return disable(target)


def disable_without_interpreter(paths: list[Path]) -> list[Path]:
    """Remove the hook files whatever is in them (binary bytes, not UTF-8, empty): the
    file is ours, and reading it is not needed to know that."""
    from ..hook import remove_hook_files

    return remove_hook_files(paths)
