"""`sagedoctor enable` / `disable`: the venv-wide start-up hook for apps with no attention
setting of their own (InvokeAI without `attention_backend`, plain scripts), and for ComfyUI
the choice between that hook and its own `--use-sage-attention` flag."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from .. import exit_codes
from ..comfyui import (
    DESKTOP_LAUNCH_ARGS,
    DESKTOP_SETTINGS,
    FLAG_LAUNCHER,
    SAGE_FLAG,
    comfyui_ways,
    pth_file_for,
    pth_imports_site,
    read_bytes_as_text,
    read_small,
    sageattn_table,
    with_sage_flag,
)
from ..errors import SagedoctorError
from ..facts import ComfyUIFacts, TargetFacts, VerificationFacts
from ..state import HOOK_FILE as HOOK_FILE  # re-exported: where enable writes it

# The .pth line defines a finder inline instead of importing the runtime: an import from
# site-packages at every start was most of the hook's cost in `python -c pass` (about 0.6 ms of
# 10). The finder waits for torch.nn.functional, then hands over to sagedoctor_runtime.start;
# a runtime removed by hand makes it step aside (the import of torch goes on as without it).
# Once only: site reads the .pth twice where lib64 links to lib.
_FINDER = (
    "class _SagedoctorFinder:\n"
    "    @staticmethod\n"
    "    def find_spec(name, path=None, target=None):\n"
    "        if name != 'torch.nn.functional':\n"
    "            return None\n"
    "        if _SagedoctorFinder in sys.meta_path:\n"
    "            sys.meta_path.remove(_SagedoctorFinder)\n"
    "        try:\n"
    "            from sagedoctor_runtime.start import find_functional\n"
    "            return find_functional(name, path, target)\n"
    "        except Exception:\n"
    "            return None\n"
    "sys.meta_path.insert(0, _SagedoctorFinder)\n")
# The guard skips compiling the finder again (0.15 ms) on the .pth's second read.
HOOK_LINE = ("import sys; any(getattr(f, '__name__', '') == '_SagedoctorFinder' for f in "
             f"sys.meta_path) or exec({_FINDER!r}, {{'sys': sys}})\n")


class EnableError(SagedoctorError):
    """enable's precondition (the runtime, a passing verify) is missing: fixable."""

    code = "SD930"
    exit_status = exit_codes.FIXABLE


def hook_path(target: TargetFacts) -> Path:
    return Path(target.site_packages) / HOOK_FILE


def run_enable(target: TargetFacts, out: TextIO | None = None, *,
               comfyui: ComfyUIFacts | None = None, launch_flag: bool = False,
               verification: VerificationFacts | None = None) -> int:
    stream = out or sys.stdout
    from ..install.pending import refuse_if_pending

    # A killed install's journal: the venv is half-installed and the next install rolls it back.
    refuse_if_pending(Path(target.prefix), "enable", _target_arg(target, comfyui))
    if launch_flag:
        return _enable_launch_flag(target, comfyui, verification, stream)
    _refuse_where_site_never_runs(target, comfyui)  # first: it is why nothing else is seen
    venv = target.prefix
    if target.runtime is None:
        raise EnableError(f"the runtime is not installed in {venv}",
                          f"run `sagedoctor install {_target_arg(target, comfyui)}` first")
    verified = Path(target.prefix) / "sagedoctor" / "verified.json"
    from ..runtime.records import read_record_bytes

    try:  # a regular file only, never blocking: a FIFO there must not hang enable
        data = json.loads(read_record_bytes(str(verified)).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        raise EnableError(f"{venv} has no passing verification",
                          f"run `sagedoctor verify {_target_arg(target, comfyui)}`; enable "
                          "needs a kernel that was proven correct and faster") from None
    if not isinstance(data, dict) or data.get("verdict") != "routing":
        raise EnableError(f"{verified} does not record a passing verification",
                          f"run `sagedoctor verify {_target_arg(target, comfyui)}`")
    path = hook_path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(HOOK_LINE, encoding="utf-8")
    tmp.replace(path)
    who = "ComfyUI's Python" if comfyui is not None else "Every Python of this venv"
    stream.write(f"Enabled: {path}\n"
                 f"{who} now routes attention through SageAttention where "
                 "it was verified faster, while torch, triton and SageAttention stay as "
                 "verified. Turn it off with `sagedoctor disable` or SAGEDOCTOR_RUNTIME=off.\n")
    if comfyui is not None:
        stream.write(comfyui_ways(comfyui, hook_on=True, table=_verify_table(target)))
    return 0


def _target_arg(target: TargetFacts, comfyui: ComfyUIFacts | None) -> str:
    from ..diagnose import quote
    from ..probe.target import current_os

    os_name = current_os()
    if comfyui is not None:
        return f"--comfyui {quote(comfyui.root, os_name)}"
    if target.is_venv:
        return f"--venv {quote(target.prefix, os_name)}"
    return f"--python {quote(target.executable, os_name)}"


def _refuse_where_site_never_runs(target: TargetFacts, comfyui: ComfyUIFacts | None) -> None:
    """An embedded Python's ._pth without `import site`: no .pth file there ever runs."""
    pth = pth_file_for(Path(target.executable))
    if pth is None:
        return
    text = read_small(pth)
    if text is None or pth_imports_site(text):
        return
    portable = comfyui is not None and comfyui.layout == "portable"
    flag = (f"`sagedoctor enable {_target_arg(target, comfyui)} --launch-flag`" if portable
            else f"start ComfyUI with {SAGE_FLAG}")
    raise EnableError(f"{pth} has no `import site` line, so this Python never imports site "
                      "and never runs a .pth file: the start-up hook cannot run here",
                      f"add the line `import site` to {pth} (ComfyUI's portable build ships "
                      f"it), then enable again; or use ComfyUI's own switch: {flag}")


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
                          f"run `sagedoctor install {_target_arg(target, comfyui)}` first")
    if comfyui.sage_flag_supported is False:
        raise EnableError(f"ComfyUI {comfyui.version or ''} does not declare {SAGE_FLAG}; "
                          "it would stop at start", "update ComfyUI first")
    from ..requirements import verification_is_current

    # What verify found about the build installed now (an older build's record says nothing).
    wrong = verification.wrong_sageattn if verification is not None and verification_is_current(
        verification, target) else ()
    if wrong:
        raise EnableError(f"verify found `sageattn()` wrong on {wrong[0].name}: with "
                          f"{SAGE_FLAG} every image would be garbage",
                          f"run `sagedoctor install {_target_arg(target, comfyui)}` (it replaces "
                          "the build), then verify")
    if comfyui.layout != "portable":
        stream.write(comfyui_ways(comfyui, hook_on=hook_path(target).exists(),
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
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_bytes(flagged.encode("latin-1"))
    tmp.replace(dest)
    stream.write(f"Wrote {dest}: run_nvidia_gpu.bat with {SAGE_FLAG}. Start ComfyUI with it "
                 "to use ComfyUI's own switch; run_nvidia_gpu.bat is unchanged.\n")
    if verification is None or verification.status != "verified":
        stream.write(f"No verify has checked sageattn() in this Python: run `sagedoctor verify "
                     f"{_target_arg(target, comfyui)}` before starting ComfyUI with it.\n")
    now = replace(comfyui, sage_flag_in=tuple(dict.fromkeys((*comfyui.sage_flag_in,
                                                             FLAG_LAUNCHER))))
    stream.write(comfyui_ways(now, hook_on=hook_path(target).exists(),
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
    path = hook_path(target)
    if path.exists():
        path.unlink()
        stream.write(f"Disabled: removed {path}\n")
    else:
        stream.write(f"Nothing to do: {path} does not exist\n")
    return 0


def hook_files_on_disk(venv: Path | None, python: Path | None,
                       comfyui: Path | None = None) -> list[Path]:
    """The hook files in the venv named by --venv, --python or --comfyui, found by the file
    system alone: when the venv's Python does not start (a .pth of binary bytes kills every
    interpreter of the venv at `import site`), `disable` must still find its own file."""
    from ..state import venv_site_dirs

    prefixes = [venv] if venv is not None else []
    if python is not None:  # bin/python or Scripts\\python.exe of a venv; python.exe embedded
        prefixes += [python.parent.parent, python.parent]
    if comfyui is not None:  # the portable build's Python, Desktop's or a clone's .venv
        prefixes += [comfyui / "python_embeded", comfyui / ".venv", comfyui.parent / ".venv"]
    found: list[Path] = []
    for prefix in prefixes:
        for site in venv_site_dirs(prefix):
            path = Path(site) / HOOK_FILE
            if (path.is_file() or path.is_symlink()) and path not in found:
                found.append(path)
    return found


def disable_without_interpreter(paths: list[Path], why: str, out: TextIO | None = None) -> int:
    """Remove the hook files whatever is in them (binary bytes, not UTF-8, empty): the
    file is ours, and reading it is not needed to know that."""
    stream = out or sys.stdout
    for path in paths:
        path.unlink()
        stream.write(f"Disabled: removed {path} without reading it: this venv's Python did "
                     f"not start ({why})\n")
    return 0
