"""What the TUI shows, as plain data built from the stages' own results (findings, Plan,
KeyResult). No textual here: these are pure and tested without a terminal."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..decide.findings import SEVERITIES, SUMMARY_CODES, Finding
from ..plan import Plan, Step
from ..render.findings import AREA_TITLES
from ..render.terminal_text import one_line
from ..verify import KeyResult

MARKS = {"ok": "✓", "info": "•", "warn": "!", "error": "✗", "unknown": "?", "pending": "…"}


@dataclass(frozen=True)
class AreaRow:
    area: str
    title: str
    state: str  # a severity, "unknown" (finished without findings) or "pending"
    line: str
    findings: tuple[Finding, ...] = ()

    @property
    def mark(self) -> str:
        return MARKS[self.state]

    @property
    def fix(self) -> str:
        """The command or advice to copy: the worst finding's fix that says something."""
        ranked = sorted((f for f in self.findings if f.fix),
                        key=lambda f: SEVERITIES.index(f.severity), reverse=True)
        return one_line(ranked[0].fix) if ranked else ""

    def details(self) -> str:
        if self.state == "pending":
            return f"{self.title}: still checking."
        # Each finding's fix right under its title, the longer detail after it: at 80x24 the
        # pane shows about six lines, and a long detail pushed the next finding's fix out.
        lines = [f"{self.title}: {self.line}"]
        for f in self.findings:
            lines.append(f"{MARKS[f.severity]} {f.code} {f.title}")
            if f.fix:
                lines.append(f"    fix: {f.fix}")
            if f.detail:
                lines.append(f"    {f.detail}")
        return "\n".join(one_line(line) for line in lines)  # outside text: no escapes


def pending_row(area: str) -> AreaRow:
    return AreaRow(area, AREA_TITLES[area], "pending", "checking…")


def failed_row(area: str, code: str) -> AreaRow:
    """An area the check never reached: it stopped first (a bad --facts file, SD901)."""
    return AreaRow(area, AREA_TITLES[area], "unknown", f"not checked: the check stopped ({code})")


def area_row(area: str, findings: Iterable[Finding]) -> AreaRow:
    """One area's row, with the summary line `check` prints for it."""
    items = tuple(f for f in findings if f.area == area)
    title = AREA_TITLES[area]
    if not items:
        return AreaRow(area, title, "unknown", "not checked")
    worst = max((f.severity for f in items), key=SEVERITIES.index)
    summary = next((f for f in items if f.code in SUMMARY_CODES), None)
    head = summary.detail if summary else items[0].title
    problems = [f for f in items if f.severity in ("warn", "error")]
    if problems and summary is not None:
        head = f"{problems[0].title} ({problems[0].code})"
    return AreaRow(area, title, worst, one_line(head), items)


# --- plan ------------------------------------------------------------------------------------

def step_changes(step: Step) -> str:
    """What this step does to the venv, in one line."""
    names = ", ".join(step.distributions)
    if step.action == "recover":
        return "rolls the venv back to before the interrupted install"
    if step.action == "uninstall":
        return f"removes {names}"
    if step.action == "remove-leftovers":
        return "moves the leftover files to the log folder (kept, not deleted)"
    if step.action in ("install", "install-wheel", "install-from-index", "build-from-source",
                       "bundle-runtime"):
        return f"installs or replaces {names}"
    if step.action == "enable-invokeai":
        return "invokeai.yaml: " + ", ".join(f"{k}: {v}" for k, v in step.config)
    if step.action == "verify":
        return "nothing: runs the self-test on the GPU"
    return names or "see the step"


UNKNOWN_SIZE = "size unknown (the index has no sizes; the install shows it as it arrives)"


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Download:
    """One file a step fetches: what, and its size where known (None: unknown)."""

    what: str
    size: int | None = None
    cached: bool = False  # already in the download cache: nothing crosses the network


def step_downloads(step: Step, cached: Mapping[str, int] | None = None) -> list[Download]:
    """What this step downloads. cached: url -> size of files already in the cache."""
    cached = cached or {}
    if step.wheel is not None:
        size = cached.get(step.wheel.url)
        return [Download(step.wheel.file, size, size is not None)]
    out = []
    if step.action in ("install", "install-from-index") and step.requirement:
        where = step.index_url or "its index"
        out.append(Download(f"a wheel of {step.requirement} from {where}"))
    if step.build is not None and step.build.source.startswith("https://"):
        size = cached.get(step.build.source)
        label = "if the index fails, " if step.action == "install-from-index" else ""
        out.append(Download(f"{label}the source archive {step.build.source}", size,
                            size is not None))
    return out


def _size_text(d: Download) -> str:
    if d.cached and d.size is not None:
        return f"in the cache ({human_bytes(d.size)}), not downloaded again"
    return human_bytes(d.size) if d.size is not None else UNKNOWN_SIZE


def step_lines(number: int, step: Step, cached: Mapping[str, int] | None = None
               ) -> list[str]:
    lines = [f"{number}. {step.title}", f"   why: {step.reason}"]
    downloads = step_downloads(step, cached)
    if step.wheel is not None:
        lines.append(f"   download: {step.wheel.file}")
        lines.append(f"   from: {step.wheel.url}")
        # "size: unknown (...)", never "size: size unknown"
        lines.append(f"   size: {_size_text(downloads[0]).removeprefix('size ')}")
        lines.append(f"   sha256: {step.wheel.sha256} ({step.wheel.sha256_source})"
                     if step.wheel.sha256 else "   sha256: not in the index (recorded)")
    else:
        for d in downloads:
            lines.append(f"   download: {d.what}, {_size_text(d)}")
    if step.index_url:
        lines.append(f"   index: {step.index_url}")
    if step.build is not None:
        label = "fallback build" if step.action == "install-from-index" else "builds"
        lines.append(f"   {label}: {step.build.source}")
    lines.append(f"   venv: {step_changes(step)}")
    return lines


def downloads_summary(plan: Plan, cached: Mapping[str, int] | None = None) -> str:
    """The plan's downloads in one line: how many, and the total where sizes are known."""
    items = [d for s in plan.steps for d in step_downloads(s, cached)]
    fetched = [d for d in items if not d.cached]
    if not items:
        return "Downloads: none."
    if not fetched:
        return f"Downloads: none; all {len(items)} file(s) are in the cache."
    known = sum(d.size or 0 for d in fetched)
    unknown = sum(1 for d in fetched if d.size is None)
    files = f"{len(fetched)} file{'s' if len(fetched) > 1 else ''}"
    if unknown == len(fetched):
        total = "total size unknown (the index has no sizes)"
    elif unknown:
        total = f"{human_bytes(known)} known, {unknown} of unknown size"
    else:
        total = f"{human_bytes(known)} in all"
    cache = f"; {len(items) - len(fetched)} in the cache" if len(items) > len(fetched) else ""
    return f"Downloads: {files}, {total}{cache}."


def tilde(text: str, home: str) -> str:
    """Paths under the home folder as ~/..., as a POSIX shell takes them (Windows: as is)."""
    if not home or home == "/" or "/" not in home:
        return text
    home = home.rstrip("/")
    return text.replace(home + "/", "~/")


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    return f"{minutes}:{secs:02d}"


def transfer_line(received: int, size: int | None, seconds: float) -> str:
    """A download's progress: "1.2 MiB of 2.0 MiB  640.0 KiB/s  0:02"."""
    got = human_bytes(received) + (f" of {human_bytes(size)}" if size is not None
                                   else " (size not sent)")
    rate = f"{human_bytes(int(received / seconds))}/s" if seconds > 0 else "…/s"
    return f"{got}  {rate}  {clock_text(seconds)}"


def plan_summary(plan: Plan) -> str:
    if not plan.steps:
        return (f"Nothing to do: SageAttention in {plan.prefix} already matches this machine.")
    added = sorted({d for s in plan.steps if s.action != "uninstall" for d in s.distributions})
    removed = sorted({d for s in plan.steps if s.action == "uninstall"
                      for d in s.distributions} - set(added))
    parts = []
    if added:
        parts.append("installs or replaces " + ", ".join(added))
    if removed:
        parts.append("removes " + ", ".join(removed))
    changes = "; ".join(parts) or "changes no distribution"
    return f"{len(plan.steps)} steps: {changes}; nothing else in the venv changes."


# --- verify ----------------------------------------------------------------------------------

def _tokens(n: int) -> str:
    return f"{n / 1024:g}k" if n >= 1024 and n % 1024 == 0 else str(n)


def verdict_line(outcome: str, results: Sequence[KeyResult], error: str | None = None) -> str:
    """The plain sentence on top of the verify screen."""
    if outcome == "broken":
        return ("SageAttention does not work in this venv" + (f": {error}" if error else "")
                + ". PyTorch SDPA stays in use; `sagedoctor check` names the cause.")
    routed = [r for r in results if r.chosen and r.crossover]
    if outcome != "routing" or not routed:
        return ("No SageAttention kernel is both correct and faster here: PyTorch SDPA stays "
                "in use everywhere (nothing is lost).")
    names = sorted({r.gpu_name.removeprefix("NVIDIA ") for r in routed})
    lowest = min(r.crossover for r in routed if r.crossover)
    highest = max(r.crossover for r in routed if r.crossover)
    span = f"above {_tokens(lowest)} tokens" + (
        "" if lowest == highest else f" ({_tokens(highest)} for some dtypes and head sizes)")
    return (f"SageAttention serves sequences {span} on this {' and '.join(names)}; shorter ones "
            "stay on PyTorch, which is faster there.")


def result_cells(r: KeyResult) -> tuple[str, ...]:
    return (
        r.dtype, str(r.head_dim), r.chosen or "none (SDPA)",
        f"{r.cosine:.5f}" if r.cosine is not None else "-",
        f"{r.rel_l2:.4f}" if r.rel_l2 is not None else "-",
        f"{r.best_speedup:.2f}x" if r.best_speedup is not None else "-",
        _tokens(r.crossover) if r.chosen and r.crossover else "never",
    )


RESULT_COLUMNS = ("dtype", "D", "kernel", "cosine", "rel L2", "vs SDPA", "from")


def by_gpu(results: Sequence[KeyResult]) -> list[tuple[str, list[KeyResult]]]:
    groups: dict[int, list[KeyResult]] = {}
    for r in results:
        groups.setdefault(r.gpu, []).append(r)
    return [(f"GPU {i} {rows[0].gpu_name} (sm{rows[0].arch.replace('.', '')})", rows)
            for i, rows in sorted(groups.items())]
