"""The SDPA router: eligible calls go to a SageAttention kernel that proved itself correct and
faster on this GPU; everything else goes to the original SDPA, untouched.

The patch of ``torch.nn.functional.scaled_dot_product_attention`` is installed while any scope
is open (or global mode is on); a call is routed only from a thread inside a scope (or work it
hands on with its context: the state is a ContextVar), or anywhere in global mode. The caller
never sees an exception that plain SDPA would not have raised.

Each call site is checked on its own data: a kernel right on one layer's activations can be
wrong on another's (one channel of Q and K at +600 on the image tokens gives cosine 0.64 on every
SageAttention 2 kernel). Inside a scope a site is the n-th call of a shape since the thread's
outermost scope opened: a scope per generation or per step replays the same layers in the same
order. The first time a site is routed, a bounded slice of its output (batch 1, the first
CHECK_HEADS heads, CHECK_ROWS query rows) is compared with SDPA on the same slice; the kernel's
stated smooth_k first, then the other, else the site stays on SDPA for the process. In global
mode no scope marks where a step begins, so sites cannot be told apart: the first
SIGNATURE_CHECKS calls of each shape (one step's layers) are checked, and one failure moves that
whole shape to SDPA. Checks stop at a per-process budget (count and seconds); later sites take
the setting their kernel was verified with.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

from .accuracy import Comparison, Thresholds, compare
from .decisions import (
    Calibration,
    Decision,
    GpuDecisions,
    build_fingerprint,
    gpu_identity,
    load_calibration,
    merge_into_file,
    route_floor,
    shape_key,
)
from .eligibility import REASONS, ineligible_reason, shape_reasons
from .hook import runtime_switched_off
from .measure import LIVE, MeasureSettings, SpeedResult, Timer, measure_pair, timer_for
from .registry import KernelRegistry, KernelSpec, default_registry

log = logging.getLogger("sagedoctor.runtime")

MIN_SEQ_LEN = 128  # below this no kernel is worth a check; padding dominates
FAULTS_TO_RETIRE = 3
CHECK_HEADS = 4  # the first-call check runs on batch 1 and at most this many heads
MAX_LIVE_MEASUREMENTS = 64  # new shapes timed per process; a diffusion run has a handful
CHECK_ROWS = 1024  # query rows of a site check: the last ones (the first ones when causal)
# Global mode: calls of one shape checked before its verdict stands. FLUX.1 has 57 attention
# layers, Wan2.1 40, SDXL at most 60 of one shape per step.
SIGNATURE_CHECKS = 64
MAX_SITE_CHECKS = 4096  # per process: a 30-step FLUX generation is 1710 sites
SITE_CHECK_BUDGET_S = 10.0  # per process, the checks' own time (reference and comparison)
_UNSEEN = object()
_ON_SDPA = "sdpa"  # a site's verdict when no setting passed (False is a smooth_k setting)

Key = tuple[str, str, int]  # (device, dtype, head_dim)
# What a call's signature (tensor types, devices, dtypes, shapes, causal flag, shortest length)
# decides once: the shape reasons before and after the torch state, and for an eligible call
# its key and its (device, shape key) for the decisions. Built per call, it cost ~10 us.
Classified = tuple[str | None, str | None, tuple[Key, tuple[str, str]] | None]
# The reasons a call's query and key alone decide (its device, dtype, lengths, causality and
# the shortest length routed): the hot path keeps them, and eligible calls' shape keys, under
# (query's shape, key's shape, dtype, device, is_causal, min_seq_len), about half the cost of
# a whole signature. A hit can only keep a call on SDPA; a call it would have kept there for
# another reason (a value of another dtype, a tensor subclass) is kept there all the same, and
# any call that may route is decided by its whole signature.
_QUICK = frozenset({"device", "dtype", "short", "causal_lengths"})
MAX_SIGNATURES = 4096  # distinct call signatures kept; more (a shape per call) start afresh


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).rpartition(".")[2]


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _is_triton_fault(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    text = str(exc).lower()
    return module.startswith("triton") or "triton" in text or "cuda_utils" in text


class _ThreadState:
    """One thread's routing state. Kept in a ContextVar, not a threading.local: reading it is
    the first thing every patched call does, and inside a model (SDXL 1024, a CPU run of its
    call pattern) a threading.local read cost about 0.5 us a call, a ContextVar's a fraction."""

    __slots__ = ("__weakref__", "counts", "depth", "ended", "floor_calls", "on", "positions")

    def __init__(self, on: bool, ended: deque[tuple[dict[str, int], int]]) -> None:
        self.depth: int | None = None  # open scopes (0: inside a kernel); None: global mode's
        self.on = on  # whether this thread's calls are routed: depth's, else global mode's
        self.floor_calls = 0  # calls the floor kept on SDPA (a "slower" count, see stats)
        self.counts: dict[str, int] = {}  # the other calls kept on SDPA, by reason
        self.positions: dict[tuple[str, str], int] = {}  # per shape, calls since the scope
        self.ended = ended  # the router's: where this state's counts go when it ends

    def __del__(self) -> None:
        # A context that ends takes its state along (a copy per asyncio.to_thread call or
        # per task, in a server that runs a pipeline per request): its counts stay counted.
        # (deque.append is atomic: no lock in a finalizer, which may run in any thread.)
        self.ended.append((self.counts, self.floor_calls))


class Router:
    def __init__(
        self,
        registry: KernelRegistry | None = None,
        thresholds: Thresholds | None = None,
        calibration: Calibration | None = None,
        min_seq_len: int = MIN_SEQ_LEN,
        *,
        calibration_path: str | None = None,
        speed_check: bool = True,
        live_settings: MeasureSettings | None = None,
        timer_for: Callable[[Any], Timer] = timer_for,
        max_live_measurements: int = MAX_LIVE_MEASUREMENTS,
        clock: Callable[[], float] = time.perf_counter,
        max_site_checks: int = MAX_SITE_CHECKS,
        site_check_budget_s: float = SITE_CHECK_BUDGET_S,
    ) -> None:
        self.registry = registry or default_registry()
        self.thresholds = thresholds or Thresholds.from_env()
        # Per GPU and shape: route or not, as verify (or an earlier run) measured it.
        self._floor = 0  # below this query length, SDPA (see route_floor); 0: no floor yet
        self._calibration = calibration or Calibration()
        # Where shapes measured in this process are written for the next run (None: nowhere).
        self.calibration_path = calibration_path
        self._min_seq_len = min_seq_len
        self._speed_check = speed_check
        self.live_settings = (live_settings or LIVE).with_env()
        self.timer_for = timer_for
        self.live_left = max_live_measurements
        self._original: Callable[..., Any] | None = None
        self._cuda_only = True
        # What the hot path reads, in one tuple replaced whole: (original SDPA, shortest
        # length routed, the floor, whether only CUDA kernels are registered).
        self._hot: tuple[Any, int, int, bool] = (None, min_seq_len, 0, True)
        self._lock = threading.RLock()
        # This thread's _ThreadState. A ContextVar: a thread started with a copy of the
        # caller's context (asyncio.to_thread, a task) shares the caller's scope.
        self._state_var: contextvars.ContextVar[_ThreadState] = contextvars.ContextVar(
            "sagedoctor_router_state")
        self._depth = 0
        self._global = False
        # the verified kernel and its smooth_k setting; None: SDPA
        self._keys: dict[Key, tuple[KernelSpec, bool | None] | None] = {}
        # site -> the smooth_k setting it passed with, or _ON_SDPA. A site is (device, shape
        # key) and the call's position in the scope, or None for a whole shape (global mode).
        self._sites: dict[tuple[tuple[str, str], int | None], bool | str | None] = {}
        self._signature_checks: Counter[tuple[str, str]] = Counter()
        self.clock = clock
        self.max_site_checks = max_site_checks
        self.site_check_budget_s = site_check_budget_s
        self._site_checks = 0
        self._site_check_s = 0.0
        self._site_failures = 0
        self._unchecked = 0  # routed past the budget without a check of their own
        self._shapes: dict[tuple[str, str], bool] = {}  # (device, shape key) -> route
        self._signatures: dict[tuple[Any, ...], Classified] = {}
        # The hot path's memo (see _QUICK): a coarser key than a signature, for calls that
        # stay on SDPA; the shape key of an eligible call, or a reason.
        self._nearby: dict[tuple[Any, ...], tuple[str, str] | str] = {}
        self._arch: dict[str, tuple[int, int] | None] = {}
        self._gpu: dict[str, tuple[str, str]] = {}  # device -> (GPU identity, name)
        self._measured = 0
        self._measure_s = 0.0
        self._measure_max_s = 0.0  # the longest stall one new shape caused
        self._interpolated = 0  # new shapes decided from the stored lengths around them
        self._device_faults: Counter[str] = Counter()
        self._retired: set[str] = set()
        self._oom_blocked = False
        self._routed: Counter[str] = Counter()
        # Every live thread's (context's) state, for its counts of calls left on SDPA and for
        # global mode's switch: the hot path takes no lock. Held weakly: a context that ends
        # frees its state, whose counts go to _ended, folded into _folded by _sdpa_totals.
        self._states: weakref.WeakSet[_ThreadState] = weakref.WeakSet()
        self._ended: deque[tuple[dict[str, int], int]] = deque()
        self._folded: Counter[str] = Counter()
        self._logged: set[str] = set()
        self._device_types: frozenset[str] = frozenset()
        self._dtypes: frozenset[Any] = frozenset()
        self._head_dims: frozenset[int] = frozenset()
        # The replacement SDPA, made once: identity checks compare against this object.
        self.patched: Callable[..., Any] = self._make_patched()
        self.refresh_registry()
        self._refresh_floor()

    # The settings the hot path's floor follows: each change recomputes it.
    @property
    def calibration(self) -> Calibration:
        """Per GPU and shape: route or not, as verify (or an earlier run) measured it."""
        return self._calibration

    @calibration.setter
    def calibration(self, value: Calibration) -> None:
        self._calibration = value
        self._refresh_floor()

    @property
    def min_seq_len(self) -> int:
        return self._min_seq_len

    @min_seq_len.setter
    def min_seq_len(self, value: int) -> None:
        self._min_seq_len = value
        self._refresh_floor()

    @property
    def speed_check(self) -> bool:
        return self._speed_check

    @speed_check.setter
    def speed_check(self, value: bool) -> None:
        self._speed_check = value
        self._refresh_floor()

    def _refresh_floor(self) -> None:
        """The query length below which a call stays on SDPA without a signature lookup: where
        stored decisions settle every shorter call (route_floor), and only while speeds are
        checked (without, every verified call routes)."""
        self._floor = route_floor(self._calibration, self._min_seq_len) \
            if self._speed_check else 0
        self._refresh_hot()

    def _refresh_hot(self) -> None:
        self._hot = (self._original, self._min_seq_len, self._floor, self._cuda_only)

    @property
    def original(self) -> Callable[..., Any] | None:
        """The SDPA the patch replaced (None before the first install)."""
        return self._original

    @original.setter
    def original(self, value: Callable[..., Any] | None) -> None:
        self._original = value
        self._refresh_hot()

    # --- activation ------------------------------------------------------------------------

    def refresh_registry(self) -> None:
        """Re-read what the registry serves (after a test registers a kernel, say)."""
        import torch

        specs = self.registry.specs()
        self._device_types = frozenset(s.device_type for s in specs)
        # fp16/bf16 only, whatever a kernel claims: the eligibility rule of this runtime.
        self._dtypes = frozenset(getattr(torch, d) for s in specs for d in s.dtypes
                                 if d in ("float16", "bfloat16"))
        self._head_dims = frozenset(d for s in specs for d in s.head_dims)
        self._cuda_only = self._device_types <= {"cuda"}
        self._refresh_hot()
        self._signatures.clear()  # (cleared in place: the patched function holds the dict)
        self._nearby.clear()

    def _install(self) -> None:
        import torch.nn.functional as F

        current = F.scaled_dot_product_attention
        if current is not self.patched:
            self.original = current
            F.scaled_dot_product_attention = self.patched

    def _uninstall(self) -> None:
        import torch.nn.functional as F

        if F.scaled_dot_product_attention is self.patched and self.original is not None:
            F.scaled_dot_product_attention = self.original

    def _thread_state(self) -> _ThreadState:
        state = self._state_var.get(None)
        if state is None:
            with self._lock:
                state = _ThreadState(self._global, self._ended)
                self._states.add(state)
            self._state_var.set(state)
        return state

    def _set_depth(self, state: _ThreadState, depth: int | None) -> None:
        state.depth = depth
        state.on = bool(depth) if depth is not None else self._global

    def _scope_depth(self) -> int:
        """This thread's open scopes (0 inside a kernel or outside every scope)."""
        state = self._state_var.get(None)
        return (state.depth or 0) if state is not None else 0

    def enter(self) -> dict[str, Counter[str]]:
        state = self._thread_state()
        with self._lock:
            if not runtime_switched_off():
                self._depth += 1
                self._set_depth(state, (state.depth or 0) + 1)
                if state.depth == 1:
                    state.positions = {}  # call positions count from the outermost scope
                if self._depth == 1 and not self._global:
                    self._install()
            return {"routed": Counter(self._routed), "sdpa": self._sdpa_totals()}

    def exit(self, snapshot: dict[str, Counter[str]]) -> None:
        state = self._state_var.get(None)
        with self._lock:
            if state is not None and (state.depth or 0) > 0:
                # at 0, back to the global setting
                self._set_depth(state, state.depth - 1 or None)  # type: ignore[operator]
                self._depth -= 1
                if self._depth == 0:
                    self._oom_blocked = False
                    if not self._global:
                        self._uninstall()
            routed = self._routed - snapshot["routed"]
            sdpa = self._sdpa_totals() - snapshot["sdpa"]
        if log.isEnabledFor(logging.DEBUG) and (routed or sdpa):
            log.debug("%s", summary_line(routed, sdpa))

    def enable_global(self) -> None:
        with self._lock:
            if runtime_switched_off():
                return
            self._global = True
            self._follow_global()
            self._install()

    def disable_global(self) -> None:
        with self._lock:
            self._global = False
            self._follow_global()
            if self._depth == 0:
                self._oom_blocked = False
                self._uninstall()

    def _follow_global(self) -> None:
        """Threads outside every scope follow the global setting (called under the lock)."""
        for state in list(self._states):
            if state.depth is None:
                state.on = self._global

    @contextlib.contextmanager
    def _kernel_running(self, q: Any) -> Iterator[None]:
        """The tensors' device current; SDPA calls from inside the kernel (a kernel that falls
        back to SDPA itself) go straight to the original."""
        state = self._thread_state()
        previous = state.depth
        with self._lock:
            self._set_depth(state, 0)  # no routing, even in global mode
        try:
            with _device_current(q):
                yield
        finally:
            with self._lock:
                self._set_depth(state, previous)

    # --- the replacement ---------------------------------------------------------------------

    def _make_patched(self) -> Callable[..., Any]:
        """The function put in place of SDPA. A closure over locals, not a bound method: on a
        call that stays on SDPA every attribute lookup shows (about 1 us saved per call)."""
        router = self
        current = self._state_var.get
        nearby = self._nearby
        shapes = self._shapes
        compiling = _compiling_check()  # bound once: the lookups cost ~0.5 us a call

        def decided(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float,
                    is_causal: bool, scale: float | None, enable_gqa: bool,
                    kwargs: dict[str, Any], state: _ThreadState | None, original: Any) -> Any:
            """A call inside a scope (or global mode) that the floor did not settle."""
            names = None
            if kwargs or enable_gqa:
                reason: str | None = "gqa" if enable_gqa else "unknown_args"
            elif router._cuda_only and not query.is_cuda:
                reason = "device"  # the common case off the GPU, without a call
            elif attn_mask is not None or dropout_p or compiling():
                # (while tracing, shapes may be symbolic: no signature of them is kept)
                reason = ineligible_reason(
                    query, key, value, attn_mask, dropout_p, is_causal,
                    router._device_types, router._dtypes, router._head_dims,
                    router.min_seq_len, _grad_enabled, _compiling)
            else:
                min_seq_len = router._min_seq_len
                near: tuple[Any, ...] | None
                quick: Any
                try:
                    near = (query.shape, key.shape, query.dtype, query.device, is_causal,
                            min_seq_len)
                    quick = nearby.get(near)
                except Exception:
                    near = quick = None
                if quick is not None and (quick.__class__ is str
                                          or shapes.get(quick) is False):
                    # kept on SDPA by what its query and key alone decide
                    reason = quick if quick.__class__ is str else "slower"
                else:
                    reason, names = router._signature_reason(query, key, value, is_causal,
                                                             min_seq_len, near)
            if reason is None:
                assert names is not None  # an eligible call's signature has them
                reason, out = router._route(query, key, value, is_causal, scale, names)
                if reason is None:
                    return out
            counts = (state or router._thread_state()).counts
            counts[reason] = counts.get(reason, 0) + 1
            if enable_gqa:
                kwargs["enable_gqa"] = True  # only when asked: torch < 2.5 lacks the argument
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, **kwargs)

        def scaled_dot_product_attention(
                query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                **kwargs: Any) -> Any:
            # Kept short on purpose: inside a model a call costs several times what a loop
            # of calls measures, as much other code runs between two attention calls
            # (bench_call_cost: SDXL's tiny UNet on a CPU, 0.6 us a call in a loop and 1.6 us
            # in the model). So a call the floor settles runs these few lines and nothing
            # else, and touches few objects: one tuple, this thread's state, the query.
            original, shortest, floor, cuda_only = router._hot  # original: set while in place
            state = current(None)  # this thread's; None: it has not been in a scope yet
            if state is None:
                if router._global:
                    return decided(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                   enable_gqa, kwargs, None, original)
            elif state.on:  # in a scope (not inside a kernel), or in global mode
                if attn_mask is None and not dropout_p and not kwargs and not enable_gqa:
                    try:
                        length = query.shape[-2]
                    except Exception:
                        length = None
                    # below every stored family's crossover (SDXL's every call on an H100):
                    # SDPA, after one look at the length (symbolic lengths go the long way;
                    # a static one traced by torch.compile stays on SDPA here, as it would
                    # there by the compile rule: no compile check needed on this path)
                    if length.__class__ is int and shortest <= length < floor \
                            and (query.is_cuda or not cuda_only):
                        state.floor_calls += 1
                        if is_causal or scale is not None:
                            return original(query, key, value, is_causal=is_causal,
                                            scale=scale)
                        return original(query, key, value)  # keywords cost ~1 us a call
                return decided(query, key, value, attn_mask, dropout_p, is_causal, scale,
                               enable_gqa, kwargs, state, original)
            if enable_gqa:
                kwargs["enable_gqa"] = True  # only when asked: torch < 2.5 lacks the argument
            elif attn_mask is None and not dropout_p and not is_causal and scale is None \
                    and not kwargs:
                return original(query, key, value)
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, **kwargs)

        return scaled_dot_product_attention

    def _signature_reason(self, query: Any, key: Any, value: Any, is_causal: bool,
                          min_seq_len: int, near: tuple[Any, ...] | None
                          ) -> tuple[str | None, tuple[Key, tuple[str, str]] | None]:
        """The reason a call stays on SDPA by its whole signature (its tensors' types,
        devices, dtypes and shapes) and the state, or None with the names it routes by; what
        holds for every call with the same `near` key goes into the hot path's memo."""
        signatures = self._signatures
        try:
            signature = (type(query), type(key), type(value), query.device, key.device,
                         value.device, query.dtype, key.dtype, value.dtype, query.shape,
                         key.shape, value.shape, is_causal, min_seq_len)
            known = signatures.get(signature)  # hashes the shapes
        except Exception:
            # shapes that are not plain sizes (symbolic, nested, a subclass's own): decided
            # each call, never kept, never raising where SDPA would not
            known = self._classify_unkeyed(query, key, value, is_causal, min_seq_len)
            near = None
        else:
            if known is None:
                known = self._classify(query, key, value, is_causal, min_seq_len)
                if len(signatures) >= MAX_SIGNATURES:
                    signatures.clear()
                    self._nearby.clear()
                signatures[signature] = known
        before, after, names = known
        reason = before or after
        if near is not None:
            if names is not None:
                self._nearby[near] = names[1]
            elif reason in _QUICK:
                self._nearby[near] = reason
        if reason is None:
            assert names is not None
            if self._shapes.get(names[1]) is False:
                reason = "slower"
            elif (query.requires_grad or key.requires_grad or value.requires_grad) \
                    and _grad_enabled():
                reason = "grad"  # the state per call (compiling: asked before)
        return reason, names

    def _sdpa_totals(self) -> Counter[str]:
        with self._lock:
            while self._ended:
                counts, floor_calls = self._ended.popleft()
                self._folded.update(counts)
                self._folded["slower"] += floor_calls
            total = Counter(self._folded)
            for state in list(self._states):
                total.update(dict(state.counts))
                total["slower"] += state.floor_calls
        return +total  # (without what stayed at 0)

    def _classify(self, q: Any, k: Any, v: Any, is_causal: bool,
                  min_seq_len: int) -> Classified:
        """What the call's signature alone decides (see Classified); min_seq_len is the value
        the signature was built with (another thread may change the setting meanwhile)."""
        before, after = shape_reasons(q, k, v, is_causal, self._device_types, self._dtypes,
                                      self._head_dims, min_seq_len)
        if before is not None or after is not None:
            return before, after, None
        device = str(q.device)
        batch, heads, q_len, head_dim = (int(x) for x in q.shape)
        key: Key = (device, _dtype_name(q.dtype), head_dim)
        where = (device, shape_key(key[1], head_dim, batch * heads, q_len, int(k.shape[2]),
                                   is_causal))
        return None, None, (key, where)

    def _classify_unkeyed(self, q: Any, k: Any, v: Any, is_causal: bool,
                          min_seq_len: int) -> Classified:
        """_classify for tensors whose signature cannot be kept; where even that fails on
        their shapes, the call stays on SDPA (counted as a subclass, or else a shape)."""
        try:
            return self._classify(q, k, v, is_causal, min_seq_len)
        except Exception:
            return ("subclass" if type(q).__name__ != "Tensor" else "shape"), None, None

    def _route(self, q: Any, k: Any, v: Any, is_causal: bool, scale: float | None,
               names: tuple[Key, tuple[str, str]]) -> tuple[str | None, Any]:
        key, where = names
        if self._oom_blocked:
            return "oom", None
        if key[0] in self._retired:
            return "retired", None
        if key in self._keys:
            verified = self._keys[key]
        else:
            verified = self._first_call_check(key, q, k, v, is_causal, scale)
        if verified is None:
            return "unverified", None
        spec, smooth = verified
        slower = self._kernel_wins(key, where, spec, q, k, v, is_causal, scale)
        if slower is not None:
            return slower, None
        return self._site(spec, smooth, key, where, q, k, v, is_causal, scale)

    # --- per-site check ----------------------------------------------------------------------

    def _site(self, spec: KernelSpec, smooth: bool | None, key: Key, where: tuple[str, str],
              q: Any, k: Any, v: Any, is_causal: bool,
              scale: float | None) -> tuple[str | None, Any]:
        """Run the call at its site: as that site's check decided, or checked now."""
        state = self._state_var.get(None)
        positions = state.positions if state is not None and state.depth else None
        position: int | None = None
        if positions is not None:  # in a scope: the n-th call of this shape
            position = positions.get(where, 0)
            positions[where] = position + 1
        site = (where, position)
        verdict = self._sites.get(site, _UNSEEN)
        if verdict == _ON_SDPA:
            return "site", None
        if verdict is not _UNSEEN and (position is not None
                                       or self._signature_checks[where] >= SIGNATURE_CHECKS):
            return self._run(spec, key, q, k, v, is_causal, scale, verdict)  # type: ignore[arg-type]
        first = smooth if verdict is _UNSEEN else verdict
        with self._lock:
            if (self._site_checks >= self.max_site_checks
                    or self._site_check_s >= self.site_check_budget_s):
                self._unchecked += 1
                self._log_once("site-budget", logging.INFO,
                               "the per-site checks' budget is spent (%d sites, %.1f s); later "
                               "sites run as their kernel was verified", self._site_checks,
                               self._site_check_s)
                return self._run(spec, key, q, k, v, is_causal, scale, first)  # type: ignore[arg-type]
            if position is None:
                self._signature_checks[where] += 1
        return self._check_site(site, spec, first, key, q, k, v, is_causal, scale)  # type: ignore[arg-type]

    def _check_site(self, site: tuple[tuple[str, str], int | None], spec: KernelSpec,
                    first: bool | None, key: Key, q: Any, k: Any, v: Any, is_causal: bool,
                    scale: float | None) -> tuple[str | None, Any]:
        """The call on the kernel, its slice compared with SDPA's; smooth_k `first`, then the
        other; neither passing, the site goes to SDPA (a whole shape in global mode)."""
        assert self.original is not None
        started = self.clock()
        rows = slice(None, CHECK_ROWS) if is_causal else slice(-CHECK_ROWS, None)
        heads = min(int(q.shape[1]), CHECK_HEADS)
        qs = q[:1, :heads, rows]
        ks, vs = (t[:1, :heads, rows] if is_causal else t[:1, :heads] for t in (k, v))
        try:
            reference = self.original(qs, ks, vs, is_causal=is_causal, scale=scale)
        except Exception:  # SDPA itself fails on the slice: the call decides, unchecked
            return self._run(spec, key, q, k, v, is_causal, scale, first)
        spent = self.clock() - started
        tried: list[str] = []
        try:
            for smooth in spec.settings(first):
                reason, out = self._run(spec, key, q, k, v, is_causal, scale, smooth,
                                        count=False)
                if reason is not None:
                    return reason, None  # a fault: the site stays unchecked
                began = self.clock()
                result = compare(out[:1, :heads, rows], reference)
                spent += self.clock() - began
                tried.append(("" if smooth is None else f"smooth_k={smooth}: ")
                             + result.describe())
                if result.passes(self.thresholds):
                    with self._lock:
                        self._sites[site] = smooth
                        self._routed[spec.label] += 1
                    return None, out
        finally:
            with self._lock:
                self._site_checks += 1
                self._site_check_s += spent
        where, position = site
        with self._lock:
            self._sites[site] = _ON_SDPA
            self._site_failures += 1
        shape = "x".join(str(int(x)) for x in q.shape)
        at = (f"call {position} of shape {where[1]} in the scope" if position is not None
              else f"shape {where[1]} (global mode: every call of it)")
        self._log_once(f"site:{where}:{position}", logging.WARNING,
                       "%s failed its check at %s on %s (q %s; %s); SDPA serves it for this "
                       "process", spec.name, at, where[0], shape, "; ".join(tried))
        return "site", None

    def _run(self, spec: KernelSpec, key: Key, q: Any, k: Any, v: Any, is_causal: bool,
             scale: float | None, smooth: bool | None = None,
             count: bool = True) -> tuple[str | None, Any]:
        device = key[0]
        try:
            fn = self.registry.load(spec)
            with self._kernel_running(q):
                out = _call(fn, q, k, v, is_causal, scale, smooth)
        except Exception as exc:
            return self._fault(spec, device, exc), None
        with self._lock:
            self._device_faults[device] = 0
            if count:
                self._routed[spec.label] += 1
        return None, out

    def _fault(self, spec: KernelSpec, device: str, exc: Exception) -> str:
        with self._lock:
            if _is_oom(exc):
                # Inside a scope (one generation) the rest of it goes to SDPA; in global mode,
                # with no scope to end, only this call does, or one OOM would end routing for
                # the life of the process.
                in_scope = self._scope_depth() > 0
                self._oom_blocked = self._oom_blocked or in_scope
                self._log_once(f"oom:{device}", logging.WARNING,
                               "SageAttention ran out of memory on %s; SDPA serves %s", device,
                               "the rest of this scope" if in_scope else "that call")
                return "oom"
            if _is_triton_fault(exc):
                self._device_faults[device] += 1
                if self._device_faults[device] >= FAULTS_TO_RETIRE:
                    self._retired.add(device)
                    self._log_once(f"retire:{device}", logging.WARNING,
                                   "%s retired from SageAttention after %d kernel errors in a "
                                   "row (last: %s)", device, FAULTS_TO_RETIRE, exc)
                return "fault"
            self._log_once(f"fault:{spec.name}:{type(exc).__name__}", logging.WARNING,
                           "%s failed on %s (%s: %s); SDPA served the call", spec.name, device,
                           type(exc).__name__, exc)
            return "fault"

    # --- first-call correctness check ------------------------------------------------------

    def _first_call_check(self, key: Key, q: Any, k: Any, v: Any, is_causal: bool,
                          scale: float | None) -> tuple[KernelSpec, bool | None] | None:
        with self._lock:  # one check per key, even with many threads arriving at once
            if key in self._keys:
                return self._keys[key]
            arch = self._arch_of(q)
            heads = min(int(q.shape[1]), CHECK_HEADS)
            qs, ks, vs = (t[:1, :heads] for t in (q, k, v))
            assert self.original is not None
            reference = self.original(qs, ks, vs, is_causal=is_causal, scale=scale)
            tried: list[tuple[str, Comparison | str]] = []
            chosen: tuple[KernelSpec, bool | None] | None = None
            for spec in self.registry.candidates(q.device.type, arch, key[1], key[2]):
                for smooth in spec.settings():
                    try:
                        fn = self.registry.load(spec)
                        with self._kernel_running(q):
                            out = _call(fn, qs, ks, vs, is_causal, scale, smooth)
                        result: Comparison | str = compare(out, reference)
                    except Exception as exc:  # an import or kernel error fails this kernel
                        result = f"{type(exc).__name__}: {exc}"
                    tried.append((spec.name if smooth is None
                                  else f"{spec.name} smooth_k={smooth}", result))
                    if isinstance(result, Comparison) and result.passes(self.thresholds):
                        chosen = (spec, smooth)
                        break
                    if isinstance(result, str):
                        break  # an error, not a setting, failed it
                if chosen is not None:
                    break
            self._keys[key] = chosen
            details = "; ".join(
                f"{name}: {r.describe() if isinstance(r, Comparison) else r}" for name, r in tried)
            if chosen is None:
                log.warning("no SageAttention kernel passed the check on %s %s D=%d (%s); "
                            "SDPA serves it", *key, details or "no kernel serves it")
            else:
                log.info("SageAttention %s verified on %s %s D=%d (%s)", chosen[0].name, *key,
                         details)
            return chosen

    def _arch_of(self, q: Any) -> tuple[int, int] | None:
        device = str(q.device)
        if device not in self._arch:
            arch: tuple[int, int] | None = None
            if q.device.type == "cuda":
                import torch

                major, minor = torch.cuda.get_device_capability(q.device)
                arch = (int(major), int(minor))
            self._arch[device] = arch
        return self._arch[device]

    # --- speed ---------------------------------------------------------------------------

    def _kernel_wins(self, key: Key, where: tuple[str, str], spec: KernelSpec, q: Any, k: Any,
                     v: Any, is_causal: bool, scale: float | None) -> str | None:
        """None if the kernel serves this shape (`where`: device, shape key), else the reason
        SDPA keeps it."""
        if not self.speed_check:
            return None
        known = self._shapes.get(where)
        if known is None:
            with self._lock:
                known = self._shapes.get(where)
                if known is None:
                    known = self._decide_shape(key, where[1], spec, q, k, v, is_causal, scale)
                    if known is None:
                        return "unmeasured"
                    self._shapes[where] = known
        return None if known else "slower"

    def _decide_shape(self, key: Key, shape: str, spec: KernelSpec, q: Any, k: Any, v: Any,
                      is_causal: bool, scale: float | None) -> bool | None:
        """A stored decision for this GPU and shape, or the one the stored lengths around it
        agree on, else one measured now on the call's own inputs (bounded in time and per
        process), stored for the next run. None: neither is possible."""
        gpu, name = self._gpu_of(q)
        stored, how = self.calibration.lookup(gpu, shape)
        if stored is not None and stored.kernel == spec.name:
            if how == "interpolated":
                self._interpolated += 1
            return stored.route
        if self.live_left <= 0:
            self._log_once("live-budget", logging.INFO,
                           "no more shapes are timed in this process; new shapes stay on SDPA")
            return None
        self.live_left -= 1
        result = self._measure(spec, q, k, v, is_causal, scale)
        if result is None:
            return False
        decision = Decision(route=result.route, kernel=spec.name, speedup=result.speedup,
                            low=result.low, high=result.high, rounds=result.rounds,
                            source="runtime", measured_at=_now())
        arch = self._arch_of(q)
        arch_text = f"{arch[0]}.{arch[1]}" if arch else ""
        self.calibration.put(gpu, shape, decision, name, arch_text)
        self._refresh_floor()  # a first point of a new family may lower it
        self._persist(gpu, shape, decision, name, arch_text)
        log.info("%s on %s, shape %s: %.2fx SDPA (%.2f-%.2f, %d rounds): %s", spec.name,
                 key[0], shape, result.speedup, result.low, result.high, result.rounds,
                 "routed" if result.route else "SDPA kept")
        return result.route

    def _measure(self, spec: KernelSpec, q: Any, k: Any, v: Any, is_causal: bool,
                 scale: float | None) -> SpeedResult | None:
        """Kernel against SDPA on the call's own inputs, paired rounds (see measure.py)."""
        assert self.original is not None
        original = self.original
        try:
            fn = self.registry.load(spec)
        except Exception:
            return None

        def run_kernel() -> None:
            with self._kernel_running(q):
                fn(q, k, v, is_causal=is_causal, scale=scale)

        def run_sdpa() -> None:
            original(q, k, v, is_causal=is_causal, scale=scale)

        started = time.perf_counter()
        try:
            settings = self.live_settings.for_device(getattr(q.device, "type", "cuda"))
            return measure_pair(run_kernel, run_sdpa, self.timer_for(q), settings)
        except Exception as exc:  # a kernel that fails while timed is not used for the shape
            self._log_once(f"measure:{spec.name}", logging.WARNING,
                           "timing %s failed (%s); SDPA kept", spec.name, exc)
            return None
        finally:
            spent = time.perf_counter() - started
            self._measured += 1
            self._measure_s += spent
            self._measure_max_s = max(self._measure_max_s, spent)

    def _persist(self, gpu: str, shape: str, decision: Decision, name: str,
                 arch: str) -> None:
        if not self.calibration_path:
            return
        update = Calibration(dict(self.calibration.build),
                             {gpu: GpuDecisions(name, arch, {shape: decision})})
        try:
            merge_into_file(self.calibration_path, update)
        except OSError as exc:  # a read-only venv: the decision still holds in this process
            self._log_once("persist", logging.INFO, "decisions not saved to %s (%s)",
                           self.calibration_path, exc)

    def _gpu_of(self, q: Any) -> tuple[str, str]:
        device = str(q.device)
        if device not in self._gpu:
            if q.device.type == "cuda":
                import torch

                props = torch.cuda.get_device_properties(q.device)
                arch = self._arch_of(q)
                arch_text = f"{arch[0]}.{arch[1]}" if arch else ""
                self._gpu[device] = (gpu_identity(getattr(props, "uuid", None), props.name,
                                                  arch_text, int(q.device.index or 0)),
                                     str(props.name))
            else:
                self._gpu[device] = (q.device.type, q.device.type)
        return self._gpu[device]

    # --- reporting -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._lock:
            sdpa = self._sdpa_totals()
            return {
                "routed": dict(self._routed),
                "sdpa": dict(sdpa),
                "keys": {"|".join(map(str, k)): (s[0].name if s else None)
                         for k, s in self._keys.items()},
                "smooth_k": {"|".join(map(str, k)): s[1] for k, s in self._keys.items() if s},
                "sites": {"checked": self._site_checks, "failed": self._site_failures,
                          "check_ms": round(self._site_check_s * 1e3, 3),
                          "unchecked": self._unchecked},
                "retired": sorted(self._retired),
                "measured": {"shapes": self._measured,
                             "ms": round(self._measure_s * 1e3, 3),
                             "max_ms": round(self._measure_max_s * 1e3, 3),
                             "interpolated": self._interpolated},
                "summary": summary_line(self._routed, sdpa, self._measured, self._measure_s),
            }

    def _log_once(self, tag: str, level: int, message: str, *args: Any) -> None:
        if tag not in self._logged:
            self._logged.add(tag)
            log.log(level, message, *args)


def summary_line(routed: Counter[str], sdpa: Counter[str], measured: int = 0,
                 measure_s: float = 0.0) -> str:
    """'412 calls on SageAttention (sm90 fp8), 96 on SDPA: 64 short sequence, 32 masked;
    2 new shapes timed (310 ms)'."""
    kernels = ", ".join(label for label, _ in routed.most_common())
    total = sum(routed.values())
    head = f"{total} calls on SageAttention" + (f" ({kernels})" if kernels else "")
    reasons = ", ".join(f"{n} {REASONS.get(r, r)}" for r, n in sdpa.most_common())
    line = f"{head}, {sum(sdpa.values())} on SDPA" + (f": {reasons}" if reasons else "")
    if measured:
        line += f"; {measured} new shape{'s' if measured != 1 else ''} timed " \
                f"({measure_s * 1e3:.0f} ms)"
    return line


def _call(fn: Callable[..., Any], q: Any, k: Any, v: Any, is_causal: bool,
          scale: float | None, smooth: bool | None) -> Any:
    """A kernel call; smooth_k only for kernels whose spec states a setting."""
    if smooth is None:
        return fn(q, k, v, is_causal=is_causal, scale=scale)
    return fn(q, k, v, is_causal=is_causal, scale=scale, smooth_k=smooth)


def _grad_enabled() -> bool:
    import torch

    return bool(torch.is_grad_enabled())


def _compiling_check() -> Callable[[], bool]:
    """torch.compiler.is_compiling where this torch has it, else a function saying no."""
    import torch

    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return check if callable(check) else _never


def _never() -> bool:
    return False


def _compiling() -> bool:
    import torch

    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    return bool(check()) if check else False


@contextlib.contextmanager
def _device_current(q: Any) -> Iterator[None]:
    """Run with the tensors' device current: a tensor on cuda:1 while cuda:0 is current."""
    if q.device.type == "cuda":
        import torch

        with torch.cuda.device(q.device):
            yield
    else:
        yield


_ROUTER: Router | None = None
_ROUTER_LOCK = threading.Lock()


def get_router() -> Router:
    global _ROUTER
    with _ROUTER_LOCK:
        if _ROUTER is None:
            path = calibration_path()
            _ROUTER = Router(calibration=load_current_calibration(path),
                             calibration_path=path, speed_check=speed_check_enabled())
        return _ROUTER


SPEED_CHECK_ENV = "SAGEDOCTOR_SPEED_CHECK"


def calibration_path() -> str:
    """SAGEDOCTOR_CALIBRATION, else the file `sagedoctor verify` writes into this venv."""
    from .records import calibration_path as path

    return path()


def speed_check_enabled() -> bool:
    """SAGEDOCTOR_SPEED_CHECK=off routes every verified call, faster or not."""
    return os.environ.get(SPEED_CHECK_ENV, "").strip().lower() not in ("off", "0", "false",
                                                                      "no")


def live_build() -> dict[str, str | None]:
    from .hook import live_versions

    return build_fingerprint(live_versions())


def load_current_calibration(path: str) -> Calibration:
    """The stored decisions, if they were measured with the build installed now; otherwise
    none: measurements of another SageAttention or torch say nothing about this one."""
    build = live_build()
    stored = load_calibration(path)
    if stored.build and stored.build != build:
        log.info("calibration %s was measured with %s, not %s; shapes are timed again", path,
                 stored.build, build)
        return Calibration(build)
    stored.build = build
    return stored


@contextlib.contextmanager
def sage_scope(router: Router | None = None) -> Iterator[Router]:
    """Route eligible SDPA calls made in this thread (and in work handed on with its context,
    as asyncio.to_thread does), inside the block, to SageAttention."""
    active = router or get_router()
    snapshot = active.enter()
    try:
        yield active
    finally:
        active.exit(snapshot)


def enable_global(router: Router | None = None) -> Router:
    active = router or get_router()
    active.enable_global()
    return active


def disable_global(router: Router | None = None) -> None:
    (router or get_router()).disable_global()


def stats(router: Router | None = None) -> dict[str, Any]:
    return (router or get_router()).stats()
