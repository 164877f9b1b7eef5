"""The venv-wide start-up hook, as the tool sees it: the `.pth` line, turning it on (only where
the venv is still what a passing verify proved) and off (whatever is in the file), and the
post-update decisions over the same records. `commands/enable.py`, the TUI, InvokeAI's switch,
uninstall and post-update call these; what runs inside the venv is runtime/start.py."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import NotWritable, SagedoctorError, not_writable
from .facts import PYVENV_CFG_SAYS
from .file_meta import write_atomic
from .runtime.files import HOOK_FILE
from .runtime.hook import FINGERPRINT_DISTS
from .state import still_as_verified, venv_site_dirs

if TYPE_CHECKING:
    from .facts import ComfyUIFacts, TargetFacts

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


class InstallInterrupted(SagedoctorError):
    """A journal is pending: what verify or enable would prove is the half-installed venv."""

    code = "SD199"


def refuse_if_pending(prefix: Path, what: str, venv_arg: str,
                      state_root: Path | None = None) -> None:
    """The commands that arm the runtime (`verify`, `enable`, `post-update`) refuse a venv a
    killed install left half-done, which the next install would roll back. Whether one did is
    read by state.pending_install (the journal's read side); the install itself recovers it
    (transaction.recover_interrupted). Here, not in install/: InvokeAI's switch (which
    install uses) enables the hook, and the hook must not import the install back."""
    from .decide.fixes import recovery_fix
    from .decide.requirements import describe_pending
    from .state import pending_install

    pending = pending_install(prefix, state_root)
    if pending is None:
        return
    fix = ("wait for it to finish, then run it again" if pending.running
           else "run " + recovery_fix(venv_arg))
    raise InstallInterrupted(f"{describe_pending(pending)}; {what} refuses to arm the runtime "
                             "until it is recovered", fix)


@dataclass(frozen=True)
class HookChange:
    """What enable or disable did to the hook file (or found already done)."""

    path: Path
    on: bool  # the hook is on afterwards
    changed: bool  # the file was written or removed now
    message: str  # one or two sentences, for the CLI and the TUI alike


def hook_path(target: TargetFacts) -> Path:
    return Path(target.site_packages) / HOOK_FILE


def hook_on(target: TargetFacts) -> bool:
    """state.hook_on for a probed target (its own site-packages included)."""
    from .state import hook_on as on

    return on(Path(target.prefix), Path(target.site_packages))


def refuse_where_site_never_runs(target: TargetFacts, comfyui: ComfyUIFacts | None) -> None:
    """An embedded Python's ._pth without `import site`: no .pth file there ever runs."""
    from .apps.comfyui import SAGE_FLAG, pth_file_for, pth_imports_site, read_small
    from .decide.fixes import target_arg
    from .probe.target import current_os

    pth = pth_file_for(Path(target.executable))
    if pth is None:
        return
    text = read_small(pth)
    if text is None or pth_imports_site(text):
        return
    portable = comfyui is not None and comfyui.layout == "portable"
    where = target_arg(target, current_os(), comfyui)
    flag = (f"`sagedoctor enable {where} --launch-flag`" if portable
            else f"start ComfyUI with {SAGE_FLAG}")
    raise EnableError(f"{pth} has no `import site` line, so this Python never imports site "
                      "and never runs a .pth file: the start-up hook cannot run here",
                      f"add the line `import site` to {pth} (ComfyUI's portable build ships "
                      f"it), then enable again; or use ComfyUI's own switch: {flag}")


def enable(target: TargetFacts, comfyui: ComfyUIFacts | None = None) -> HookChange:
    """Write the hook, where the runtime is installed and the venv is still what a passing
    verify proved (the same answer check and post-update give); EnableError says the fix."""
    from .decide.fixes import target_arg
    from .probe.target import current_os

    where = target_arg(target, current_os(), comfyui)
    # A killed install's journal: the venv is half-installed and the next install rolls it back.
    refuse_if_pending(Path(target.prefix), "enable", where)
    refuse_where_site_never_runs(target, comfyui)  # first: it is why nothing else is seen
    if target.runtime is None:
        raise EnableError(f"the runtime is not installed in {target.prefix}",
                          f"run `sagedoctor install {where}` first")
    same, changes = still_as_verified(Path(target.prefix))
    lies = [c for c in changes if c.startswith(PYVENV_CFG_SAYS)]
    if lies:
        raise EnableError(f"{target.prefix}: {lies[0]}",
                          f"fix the version line of {Path(target.prefix) / 'pyvenv.cfg'} to "
                          "the Python the venv runs (or recreate the venv); verify cannot "
                          "change what it says")
    if not same:
        raise EnableError(f"{target.prefix} is not what a passing verify proved: "
                          f"{'; '.join(changes)}",
                          f"run `sagedoctor verify {where}`; enable needs a kernel that was "
                          "proven correct and faster on what is installed now")
    path = hook_path(target)
    before = path.is_file() and path.read_bytes() == HOOK_LINE.encode()
    if path.is_dir() and not path.is_symlink():  # ours by its name; a rename cannot replace it
        _remove(path)
    try:
        write_atomic(path, HOOK_LINE.encode("utf-8"))
    except OSError as exc:
        if not_writable(exc):  # a read-only mount, another user's venv
            raise NotWritable.from_error(path.parent, exc, "the hook stays off") from exc
        raise
    who = "ComfyUI's Python" if comfyui is not None else "Every Python of this venv"
    return HookChange(path, True, not before,
                      f"Enabled: {path}\n{who} now routes attention through SageAttention "
                      "where it was verified faster, while torch, triton and SageAttention "
                      "stay as verified. Turn it off with `sagedoctor disable` or "
                      "SAGEDOCTOR_RUNTIME=off.")


def disable(target: TargetFacts) -> HookChange:
    """Remove the hook file, whatever is in it: it is ours by its name."""
    path = hook_path(target)
    if os.path.lexists(path):
        _remove(path)
        return HookChange(path, False, True, f"Disabled: removed {path}")
    return HookChange(path, False, False, f"Nothing to do: {path} does not exist")


def hook_files_on_disk(venv: Path | None, python: Path | None,
                       comfyui: Path | None = None) -> list[Path]:
    """The hook files in the venv named by --venv, --python or --comfyui, found by the file
    system alone: when the venv's Python does not start (a .pth of binary bytes kills every
    interpreter of the venv at `import site`), `disable` must still find its own file."""
    prefixes = [venv] if venv is not None else []
    if python is not None:  # bin/python or Scripts\\python.exe of a venv; python.exe embedded
        prefixes += [python.parent.parent, python.parent]
    if comfyui is not None:  # the portable build's Python, Desktop's or a clone's .venv
        prefixes += [comfyui / "python_embeded", comfyui / ".venv", comfyui.parent / ".venv"]
    found: list[Path] = []
    for prefix in prefixes:
        for site in venv_site_dirs(prefix):
            path = Path(site) / HOOK_FILE
            if os.path.lexists(path) and path not in found:  # whatever it is: ours by name
                found.append(path)
    return found


def remove_hook_files(paths: list[Path]) -> list[Path]:
    """Remove the hook files without reading them (binary bytes, not UTF-8, empty): the
    file is ours, and reading it is not needed to know that. Returns what it removed."""
    for path in paths:
        _remove(path)
    return paths


def clear_non_files(paths: list[Path]) -> list[tuple[Path, str]]:
    """Remove what is at a hook's path and is no file (a FIFO hangs every start of the
    venv's Python at `import site`, the probe's too; a folder cannot be replaced by enable's
    rename): before the venv's Python is started. Returns each with what it was."""
    removed = []
    for path in paths:
        try:
            mode = path.lstat().st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            continue
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a device")
        _remove(path)
        removed.append((path, kind))
    return removed


def _remove(path: Path) -> None:
    """The hook file, or a folder in its place (ours by its name)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError as exc:
        if not_writable(exc):  # a read-only mount, another user's venv
            raise NotWritable.from_error(path.parent, exc,
                                        f"the hook {path} stays on") from exc
        raise


# --- post-update's decisions over the same records -------------------------------------------

def unchanged_since_verify(prefix: Path) -> tuple[bool, str]:
    """(True, what was verified) where the venv is still what a passing verify proved (the
    fast path: post-update has nothing to do); else (False, why the slow path runs)."""
    from .state import load_record

    same, changes = still_as_verified(prefix)
    if not same:
        if changes and all(c in FINGERPRINT_DISTS or c.startswith("python ") for c in changes):
            return False, ", ".join(changes) + " changed"
        return False, "; ".join(changes)
    record = load_record(prefix)
    dists = record.typed_fingerprint.dists if record is not None else {}
    what = ", ".join(f"{n} {v}" for n, v in sorted(dists.items()) if v)
    when = record.verified_at if record is not None else "?"
    return True, f"verified {when}" + (f" ({what})" if what else "")


def needs_rebuild(verdict: str | None, crashed: bool, has_sageattention: bool) -> bool:
    """A build that no longer imports (or crashes the self-test) after an update was made
    for the old torch: it is rebuilt (Linux) or its wheel reinstalled (Windows), even where
    its files look complete. A wrong `sageattn()` is the plan's own business (SD167)."""
    return has_sageattention and (crashed or verdict == "broken")
