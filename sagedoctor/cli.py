"""Argument parsing and exit codes only; each command lives in sagedoctor/commands/."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from . import __version__, exit_codes
from .decide.findings import AREAS
from .errors import (
    NotWritable,
    OutOfSpace,
    SagedoctorError,
    TargetError,
    disk_full,
    not_writable,
)

if TYPE_CHECKING:
    from .facts import Facts, TargetFacts
    from .flows.plan import PlanOptions
    from .tui import TuiOptions

EXIT_TOOL_FAILED = exit_codes.TOOL_FAILED
EXIT_USAGE = exit_codes.USAGE


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits EXIT_USAGE (subcommands inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _safe_streams() -> None:
    # A descriptor closed before we started (`sagedoctor check >&-`): Python gives None. The
    # work still runs and exits with its own status; its output goes nowhere.
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (held to exit)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    # A path the console's code page cannot show (cp1252 and Cyrillic) must not crash a report.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    # Escape sequences from outside (a GPU name, a tool's output) never reach the terminal.
    from .render.terminal_text import SafeTextStream

    if not isinstance(sys.stdout, SafeTextStream):
        sys.stdout = SafeTextStream(sys.stdout)
    if not isinstance(sys.stderr, SafeTextStream):
        sys.stderr = SafeTextStream(sys.stderr)


def _print_error(exc: SagedoctorError) -> int:
    print(f"sagedoctor: error {exc.code}: {exc.message}", file=sys.stderr)
    if exc.fix:
        print(f"  fix: {exc.fix}", file=sys.stderr)
    return exc.exit_status


def _output_outcome(code: int, argv: Sequence[str]) -> int:
    """What became of standard output. Closed (a pipe's reader quit, `>&-`): quietly the
    command's own status, as the work ran to its end (-v says SD923). Failed otherwise (a
    full disk under a redirect): the output is incomplete, so SD924 and exit 3."""
    import errno

    from .errors import OutputClosed, OutputFailed

    sys.stdout.flush()
    failure = getattr(sys.stdout, "failure", None)
    if failure is None:
        return code
    why = (failure.strerror if isinstance(failure, OSError) else None) or str(failure)
    closed = not isinstance(failure, OSError) or failure.errno in (
        errno.EPIPE, errno.EBADF, errno.ECONNRESET, errno.EINVAL)
    if closed:
        if "-v" in argv or "--verbose" in argv:
            _print_error(OutputClosed(f"standard output was closed ({why}); the rest of the "
                                      "output was dropped", ""))
        return code
    return _print_error(OutputFailed(
        f"the output could not be written to standard output ({why}); what was written is "
        "incomplete", "free space on the disk it is redirected to, or write it elsewhere, "
                      "and run again"))


def _on_a_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()


def _at_least_one(text: str) -> int:
    """--repeat N: a count of runs, so 0 (no verify at all) is a usage error, not a pass."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} runs: it must be 1 or more")
    return value


def _check_source_url(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--source-url (or SAGEDOCTOR_SOURCE_URL) is refused before any probe or plan."""
    from .errors import SettingError
    from .install.source_url import source_url_problem

    if args.source_url is not None:
        problem = source_url_problem(args.source_url)
        if problem:
            parser.error(f"--source-url {args.source_url!r}: {problem}")
    env = os.environ.get("SAGEDOCTOR_SOURCE_URL") or ""
    if env and args.source_url is None and source_url_problem(env):
        raise SettingError("SAGEDOCTOR_SOURCE_URL", env,
                           "an https URL (http only for 127.0.0.1 or localhost)")


def _folder(text: str) -> Path:
    """A path option: "" would be the current folder (`--root ""` wrote ./invokeai.yaml)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name the folder")
    return Path(text)


def _target_options(parser: argparse.ArgumentParser, comfyui: bool = True) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--venv", type=_folder, metavar="DIR",
                       help="the target virtual environment (default: the app found, "
                            "InvokeAI's or ComfyUI's, else the active one, else this "
                            "interpreter)")
    group.add_argument("--python", type=_folder, metavar="EXE", help="the target interpreter")
    parser.add_argument("--root", type=_folder, metavar="DIR", help="the InvokeAI root folder")
    if comfyui:
        parser.add_argument("--comfyui", type=_folder, metavar="DIR",
                            help="target this ComfyUI's Python: the ComfyUI_windows_portable "
                                 "folder, ComfyUI Desktop's base path or a git clone")


def _route_options(p: argparse.ArgumentParser) -> None:
    """Where the wheels or the source come from: plan, install, post-update, tui."""
    p.add_argument("--index", type=Path, metavar="FILE",
                   help="use this wheels_index.toml instead of the shipped one")
    p.add_argument("--source", type=Path, metavar="DIR",
                   help="Linux: build SageAttention from this source folder")
    p.add_argument("--no-wheel-index", action="store_true",
                   help="Linux: skip third-party wheel indexes, build from source")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="tracebacks of sagedoctor's own errors")


def _use_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--use", choices=("app", "sagedoctor"),
                   help="which switch routes an app that has its own (InvokeAI's "
                        "attention_backend): the app's, or sagedoctor's start-up hook "
                        "(default: the better one for this machine, said why)")


def _fetch_options(p: argparse.ArgumentParser) -> None:
    """How downloads are made: install and post-update."""
    p.add_argument("--offline", action="store_true",
                   help="use only the download cache; fail if something is missing")
    p.add_argument("--source-url", metavar="URL",
                   help="Linux: fetch the pinned source archive from here (https, or http on "
                        "127.0.0.1/localhost); SAGEDOCTOR_SOURCE_URL also works")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sagedoctor",
        description="Install SageAttention correctly, and prove it works.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"sagedoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser(
        "check",
        help="diagnose this machine and the target environment",
        description="Detect the machine and the target environment, say what is wrong and "
                    "how to fix it. Exit codes: 0 ready, 1 fixable problems, 2 cannot work "
                    "on this machine, 3 sagedoctor itself failed, 64 a usage error.",
    )
    check.add_argument("area", nargs="?", choices=AREAS, help="check one area only")
    _target_options(check)
    check.add_argument("--json", action="store_true", help="write facts and findings as JSON")
    check.add_argument("--facts", type=Path, metavar="FILE",
                       help="diagnose a saved `check --json` file instead of this machine")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="show every detail (and tracebacks of sagedoctor's own errors)")
    _use_option(check)

    def plan_options(p: argparse.ArgumentParser) -> None:
        _target_options(p)
        p.add_argument("--facts", type=Path, metavar="FILE",
                       help="plan for a saved `check --json` file instead of this machine")
        _route_options(p)
        _use_option(p)
        p.add_argument("--json", action="store_true", help="write the plan as JSON")

    plan = sub.add_parser("plan", help="show what `install` would do, and why",
                          description="Resolve the wheels (or the source build) for the target "
                                      "environment. Exit codes: 0 a plan, 1 blocked by "
                                      "something fixable, 2 cannot work here, 3 sagedoctor "
                                      "failed, 64 a usage error.")
    plan_options(plan)
    install = sub.add_parser("install", help="install SageAttention into the target venv",
                             description="Carry out the plan (see `sagedoctor plan`); torch "
                                         "is never changed. Then verify on the GPU.")
    plan_options(install)
    install.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    install.add_argument("--quick", action="store_true", help="a short verify sweep")
    _fetch_options(install)
    verify = sub.add_parser("verify", help="prove SageAttention correct and faster on each GPU",
                            description="Run the runtime's self-test in the target venv: every "
                                        "kernel against SDPA, timings, and the calibration "
                                        "the runtime uses. Exit 1 if no kernel is used.")
    _target_options(verify)
    verify.add_argument("--quick", action="store_true", help="a short sweep of lengths")
    verify.add_argument("--repeat", type=_at_least_one, default=1, metavar="N",
                        help="run N times and report how far the runs agree")
    verify.add_argument("--fresh", action="store_true",
                        help="decide every shape anew, ignoring what earlier runs stored")
    verify.add_argument("--json", action="store_true")
    verify.add_argument("-v", "--verbose", action="store_true")
    post = sub.add_parser(
        "post-update", help="after an app update: verify again and repair what it broke",
        description="Unchanged since a passing verify: exit 0 at once. Otherwise verify again, "
                    "plan the repair (a rebuild for the new torch, another wheel or "
                    "triton-windows), carry it out through the install transaction and verify "
                    "once more. Exit codes: 0 verified, 1 routing off (not repairable here, or "
                    "the repair not confirmed) or the target cannot be inspected, 3 sagedoctor "
                    "or the repair failed, 64 a usage error.")
    _target_options(post, comfyui=False)
    _route_options(post)
    post.add_argument("--yes", action="store_true", help="carry out the repair without asking")
    _fetch_options(post)
    post.add_argument("--quick", action="store_true", help="a short verify sweep")
    for name, text in (("enable", "switch the runtime on for every Python of the target venv "
                                  "(a start-up hook; needs a passing `verify`)"),
                       ("disable", "remove the start-up hook again")):
        toggle = sub.add_parser(name, help=text, description=text)
        _target_options(toggle)
        if name == "enable":
            toggle.add_argument("--launch-flag", action="store_true",
                                help="ComfyUI portable: write run_nvidia_gpu_sageattention.bat, "
                                     "a copy of run_nvidia_gpu.bat with --use-sage-attention, "
                                     "instead of the start-up hook")
        toggle.add_argument("-v", "--verbose", action="store_true")
    tui_help = ("the interactive app: check, plan, install, verify (also what `sagedoctor` "
                "alone opens on a terminal)")
    tui = sub.add_parser("tui", help=tui_help, description=(
        "The interactive app: the check of the target and its findings, the plan, the install "
        "with its progress and the verify, on one screen; also what `sagedoctor` alone opens "
        "on a terminal. Needs a terminal (standard input and output)."))
    _target_options(tui, comfyui=False)
    tui.add_argument("--facts", type=Path, metavar="FILE",
                     help="check and plan a saved `check --json` file (a preview: nothing is "
                          "installed)")
    _route_options(tui)
    _use_option(tui)
    tui.add_argument("--report", type=Path, metavar="FILE",
                     help="show this saved self-test report (`verify --json`) on the verify "
                          "screen instead of running one")
    tui.add_argument("--quick", action="store_true", help="a short verify sweep")
    uninstall = sub.add_parser(
        "uninstall", help="remove what sagedoctor installed into the target venv",
        description="Removes the start-up hook, the sagedoctor-runtime distribution and "
                    "<venv>/sagedoctor/, and puts back a triton-windows sagedoctor replaced. "
                    "sageattention stays unless --all.")
    _target_options(uninstall)
    uninstall.add_argument("--all", action="store_true", help="remove sageattention too")
    uninstall.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    uninstall.add_argument("--dry-run", action="store_true", help="print what it would do")
    uninstall.add_argument("-v", "--verbose", action="store_true")
    index = sub.add_parser("index", help="the wheel index: refresh it from GitHub")
    index_sub = index.add_subparsers(dest="index_command", metavar="ACTION", required=True)
    refresh = index_sub.add_parser(
        "refresh", help="read the fork's releases and write an updated index to your config",
        description="Reads woct0rdho/SageAttention's releases through the GitHub API (names, "
                    "sizes, sha256 digests) and writes an updated index to your config folder; "
                    "the shipped index is never changed. GITHUB_TOKEN is used if set.")
    refresh.add_argument("--index", type=Path, metavar="FILE", help="start from this index")
    refresh.add_argument("--api", metavar="URL", help="GitHub API base (default: api.github.com)")
    refresh.add_argument("--pypi", metavar="URL",
                         help="PyPI simple API base for torch and triton-windows versions "
                              "(default: https://pypi.org/simple)")
    refresh.add_argument("--json", action="store_true",
                         help="print the result, what the index does not cover yet included, "
                              "as JSON")
    refresh.add_argument("-v", "--verbose", action="store_true")
    for command in sub.choices.values():  # a bad argument shows that command's usage line
        command.set_defaults(command_parser=command)
    return parser


def _plan_options(args: argparse.Namespace) -> PlanOptions:
    from .flows.plan import PlanOptions

    return PlanOptions(venv=args.venv, python=args.python, root=args.root,
                       comfyui=args.comfyui,
                       facts_file=args.facts, index_file=args.index, source_dir=args.source,
                       use_linux_indexes=not args.no_wheel_index, as_json=args.json,
                       use=args.use)


def _inspect_target(args: argparse.Namespace) -> TargetFacts:
    target = _inspect(args, ("python",)).target
    assert target is not None  # _inspect raised otherwise
    return target


def _inspect(args: argparse.Namespace, areas: tuple[str, ...]) -> Facts:
    """Facts of the target (never None in what is returned) for the given areas."""
    from .probe import ProbeOptions, collect_facts

    facts = collect_facts(ProbeOptions(venv=args.venv, python=args.python, root=args.root,
                                       comfyui=getattr(args, "comfyui", None), areas=areas))
    if facts.target is None:
        failure = facts.failure_for("target")
        detail, fix = failure.detail_and_fix() if failure else ("", None)
        # One fix: the failure's own where it has one (two `fix:` lines at once were SD902's).
        raise TargetError("the target interpreter could not be inspected"
                          + (f": {detail}" if detail else ""),
                          fix or "pass --venv DIR or --python EXE")
    return facts


def _clear_non_file_hooks(args: argparse.Namespace) -> None:
    """A FIFO at the hook's path hangs every start of the venv's Python, the probe's too;
    a folder there cannot be replaced: enable and disable remove such a thing first."""
    from .hook import clear_non_files, hook_files_on_disk

    for path, kind in clear_non_files(hook_files_on_disk(
            args.venv, args.python, getattr(args, "comfyui", None))):
        print(f"sagedoctor: removed {path}: {kind} at the start-up hook's path, not a file")


def main(argv: Sequence[str] | None = None) -> int:
    _safe_streams()
    args = list(sys.argv[1:] if argv is None else argv)
    return _output_outcome(_main(args), args)


def tui_options(args: argparse.Namespace) -> TuiOptions:
    """The TUI's options from its command line (its check and plan get --use as the CLI's)."""
    from .tui import TuiOptions

    return TuiOptions(
        venv=args.venv, python=args.python, root=args.root, facts_file=args.facts,
        index_file=args.index, source_dir=args.source,
        use_linux_indexes=not args.no_wheel_index, selftest_report=args.report,
        quick_verify=args.quick, use=args.use)


def _tui(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .tui import run_tui

    return run_tui(tui_options(args))


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.check import run_check
    from .flows.check import CheckOptions

    return run_check(
        CheckOptions(
            areas=(args.area,) if args.area else AREAS,
            venv=args.venv,
            python=args.python,
            root=args.root,
            comfyui=args.comfyui,
            facts_file=args.facts,
            as_json=args.json,
            verbose=args.verbose,
            use=args.use,
        )
    )


def _plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.plan import run_plan

    return run_plan(_plan_options(args))


def _install(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.install import run_install
    from .flows.install import InstallOptions

    if args.source is not None and not args.source.is_dir():
        parser.error(f"--source {args.source}: not a folder")
    if args.facts is not None and not args.dry_run:
        parser.error("--facts describes another machine: use it with --dry-run (or "
                     "`sagedoctor plan --facts`)")
    _check_source_url(parser, args)
    return run_install(InstallOptions(_plan_options(args), dry_run=args.dry_run,
                                      quick_verify=args.quick, offline=args.offline,
                                      source_url=args.source_url))


def _post_update(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.post_update import PostUpdateOptions, run_post_update

    if args.source is not None and not args.source.is_dir():
        parser.error(f"--source {args.source}: not a folder")
    _check_source_url(parser, args)
    return run_post_update(PostUpdateOptions(
        venv=args.venv, python=args.python, root=args.root, index_file=args.index,
        source_dir=args.source, source_url=args.source_url,
        use_linux_indexes=not args.no_wheel_index, offline=args.offline,
        yes=args.yes, quick_verify=args.quick))


def _index(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.index import run_refresh

    return run_refresh(args.index, args.api, pypi=args.pypi, as_json=args.json)


def _uninstall(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.uninstall import run_uninstall

    facts = _inspect(args, ("python", "invokeai"))
    assert facts.target is not None
    return run_uninstall(facts.target, yes=args.yes, dry_run=args.dry_run,
                         everything=args.all, invokeai=facts.invokeai)


def _enable(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.enable import run_enable

    facts = _inspect(args, ("python", "comfyui"))
    assert facts.target is not None
    return run_enable(facts.target, comfyui=facts.comfyui, launch_flag=args.launch_flag,
                      verification=facts.verification)


def _disable(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.enable import disable_without_interpreter, run_disable
    from .hook import hook_files_on_disk

    try:
        facts = _inspect(args, ("python", "comfyui"))
    except TargetError as exc:
        # A corrupt hook file kills the venv's Python: find it on disk and remove it.
        ours = hook_files_on_disk(args.venv, args.python, args.comfyui)
        if not ours:
            raise
        return disable_without_interpreter(ours, exc.message.split(" (fix: ")[0])
    assert facts.target is not None
    return run_disable(facts.target, comfyui=facts.comfyui)


def _verify(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands.verify import run_verify
    from .flows.verify import cannot_verify

    facts = _inspect(args, ("python", "gpu"))
    target = facts.target
    assert target is not None
    named = (f"--python {shlex.quote(str(args.python))}" if args.python else
             f"--venv {shlex.quote(str(args.venv or target.prefix))}")
    refusal = cannot_verify(facts, named)
    if refusal is not None:
        raise refusal
    return run_verify(Path(target.executable), Path(target.prefix), args.quick,
                      args.json, repeat=args.repeat, fresh=args.fresh)


# Each command's options in, its exit status out (the command modules render).
COMMANDS: dict[str, Callable[[argparse.ArgumentParser, argparse.Namespace], int]] = {
    "tui": _tui, "check": _check, "plan": _plan, "install": _install,
    "post-update": _post_update, "index": _index, "uninstall": _uninstall,
    "enable": _enable, "disable": _disable, "verify": _verify,
}


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The arguments, or the exit status where there is nothing to run."""
    args = parser.parse_args(argv)
    if args.command is None:
        if not _on_a_terminal():
            parser.print_help()
            return 0
        args = parser.parse_args(["tui"])
    elif args.command == "tui" and not _on_a_terminal():
        # A full-screen app without a terminal would hang on its input: what bare
        # `sagedoctor` prints instead, and a usage error (the TUI was asked for by name).
        parser.print_help()
        print("sagedoctor: error: the TUI needs a terminal (standard input and output); "
              "use the commands above", file=sys.stderr)
        return EXIT_USAGE
    return args


def _main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    run = COMMANDS.get(args.command)
    if run is None:  # pragma: no cover
        parser.error(f"unknown command {args.command}")
    try:
        from .settings import check_settings

        check_settings(os.environ)
        if args.command in ("enable", "disable"):
            _clear_non_file_hooks(args)  # before the venv's Python is started
        # a command's own parser: its usage line, not the top-level one, with an error
        command_parser: argparse.ArgumentParser = getattr(args, "command_parser", None) or parser
        return run(command_parser, args)
    except SagedoctorError as exc:
        return _print_error(exc)
    except KeyboardInterrupt:
        print("sagedoctor: interrupted", file=sys.stderr)
        return exit_codes.INTERRUPTED
    except Exception as exc:
        if disk_full(exc):  # the state folder, the logs, the backups or the cache
            if getattr(args, "verbose", False):
                traceback.print_exc()
            where = getattr(exc, "filename", None) or "a folder sagedoctor writes to"
            return _print_error(OutOfSpace(where))
        # a read-only mount, another user's venv or state folder
        if isinstance(exc, OSError) and not_writable(exc):
            if getattr(args, "verbose", False):
                traceback.print_exc()
            where = getattr(exc, "filename", None) or "a folder sagedoctor writes to"
            return _print_error(NotWritable.from_error(  # a read or a write: not told here
                where, exc, "the command stopped there", "not accessible"))
        if getattr(args, "verbose", False):
            traceback.print_exc()
        else:
            print("sagedoctor: internal error (run with -v for the traceback)", file=sys.stderr)
        return EXIT_TOOL_FAILED
