"""The commands a finding's fix tells the user to run, quoted for their shell: one place for
how a target is named (--venv DIR) and how pip or uv is called in it. Pure."""

from __future__ import annotations

import shlex

from ..facts import ComfyUIFacts, TargetFacts
from .matrix import torch_index_url
from .versions import torch_build_of


def recovery_fix(venv_arg: str) -> str:
    return (f"`sagedoctor install {venv_arg}` (it rolls the venv back first) or "
            f"`sagedoctor uninstall {venv_arg}`")


def quote(arg: str, os_name: str) -> str:
    """Quote a path or argument for the user's shell (cmd/PowerShell on Windows)."""
    if os_name == "windows":
        return f'"{arg}"' if any(c in arg for c in ' &()[]{}^=;!\'+,`~') else arg
    return shlex.quote(arg)


def has_pip(target: TargetFacts) -> bool:
    """`python -m pip` works in the target (older facts files only know pip's version)."""
    if target.pip_importable is not None:
        return target.pip_importable
    return target.pip is not None


def installer_command(target: TargetFacts, os_name: str, verb: str) -> str:
    """`<python> -m pip <verb>`, or `uv pip <verb> --python <python>` where the venv has no pip
    (uv and launcher venvs); the arguments follow."""
    python = quote(target.executable, os_name)
    if has_pip(target):
        return f"{python} -m pip {verb}"
    return f"uv pip {verb} --python {python}"


def uninstall_command(target: TargetFacts, os_name: str, names: str) -> str:
    # pip asks for confirmation without -y; uv pip never asks and has no -y.
    if has_pip(target):
        return f"{installer_command(target, os_name, 'uninstall')} -y {names}"
    return f"{installer_command(target, os_name, 'uninstall')} {names}"


def torch_fix(target: TargetFacts, os_name: str, requirement: str, index_url: str,
              force: bool) -> str:
    """A torch command that always names its index, so the CUDA variant cannot change behind
    the user's back; an InvokeAI venv is repaired by its launcher, which knows the pins."""
    if force:
        flag = "--force-reinstall" if has_pip(target) else "--reinstall-package torch"
        args = f"{flag} {requirement}"
    else:
        args = requirement
    command = (f"{installer_command(target, os_name, 'install')} {args} "
               f"--index-url {index_url}")
    if target.invokeai is not None:
        return (f"InvokeAI venv: run the Invoke launcher's Repair (it reinstalls the torch "
                f"InvokeAI {target.invokeai.version} pins), or: {command}")
    return command


def quoted_prefix(target: TargetFacts, os_name: str) -> str:
    return quote(target.prefix, os_name)


def verify_command(target: TargetFacts, os_name: str) -> str:
    """`sagedoctor verify` runs the runtime's self-test: without a runtime in the venv it
    cannot start, and the install (which verifies at its end) is the command to give."""
    if target.runtime is None:
        return (f"sagedoctor install --venv {quoted_prefix(target, os_name)} (it bundles the "
                "runtime, then verifies)")
    return f"sagedoctor verify --venv {quoted_prefix(target, os_name)}"


def linux_triton_fix(target: TargetFacts, want: str | None) -> str:
    """torch on Linux pins one triton: installing the same torch build again from its own
    index brings that triton back without changing torch."""
    assert target.torch is not None
    build = torch_build_of(target.torch)
    url = torch_index_url(build, target.torch.version)
    if url is None:
        spec = f'"triton=={want}.*"' if want else "triton"
        return f"{installer_command(target, 'linux', 'install')} {spec}"
    return (torch_fix(target, "linux", f"torch=={build.label}", url, force=False)
            + " (this torch build again, which brings the triton it pins)")


def target_arg(target: TargetFacts, os_name: str, comfyui: ComfyUIFacts | None = None) -> str:
    """How a fix names this target: --comfyui, --venv or --python, quoted for its shell."""
    if comfyui is not None:
        return f"--comfyui {quote(comfyui.root, os_name)}"
    if target.is_venv:
        return f"--venv {quote(target.prefix, os_name)}"
    return f"--python {quote(target.executable, os_name)}"
