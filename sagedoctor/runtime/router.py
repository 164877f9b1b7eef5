"""The SDPA router: eligible calls go to a SageAttention kernel that proved itself correct and
faster on this GPU; everything else goes to the original SDPA, untouched.

The patch of ``torch.nn.functional.scaled_dot_product_attention`` is installed while any scope
is open (or global mode is on); a call is routed only from a thread inside a scope, or anywhere
in global mode. The caller never sees an exception that plain SDPA would not have raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .accuracy import Comparison, Thresholds, compare
from .eligibility import REASONS, ineligible_reason
from .hook import runtime_switched_off
from .registry import KernelRegistry, KernelSpec, default_registry

log = logging.getLogger("sagedoctor.runtime")

MIN_SEQ_LEN = 128  # below this no kernel is worth a check; padding dominates
FAULTS_TO_RETIRE = 3
CHECK_HEADS = 4  # the first-call check runs on batch 1 and at most this many heads

Key = tuple[str, str, int]  # (device, dtype, head_dim)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).rpartition(".")[2]


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _is_triton_fault(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    text = str(exc).lower()
    return module.startswith("triton") or "triton" in text or "cuda_utils" in text


class Router:
    def __init__(
        self,
        registry: KernelRegistry | None = None,
        thresholds: Thresholds | None = None,
        calibration: Mapping[str, int | None] | None = None,
        min_seq_len: int = MIN_SEQ_LEN,
        timing_reps: int = 3,
    ) -> None:
        self.registry = registry or default_registry()
        self.thresholds = thresholds or Thresholds.from_env()
        # "arch|dtype|head_dim" -> the shortest query length where the kernel wins (None: never)
        self.calibration = dict(calibration or {})
        self.min_seq_len = min_seq_len
        self.timing_reps = timing_reps
        self.original: Callable[..., Any] | None = None
        self._lock = threading.RLock()
        self._local = threading.local()
        self._depth = 0
        self._global = False
        self._keys: dict[Key, KernelSpec | None] = {}  # the verified kernel, None: SDPA
        self._speed: dict[tuple[Key, int], bool] = {}
        self._arch: dict[str, tuple[int, int] | None] = {}
        self._device_faults: Counter[str] = Counter()
        self._retired: set[str] = set()
        self._oom_blocked = False
        self._routed: Counter[str] = Counter()
        # Per-thread counts of calls left on SDPA: the hot path takes no lock.
        self._sdpa_counts: list[dict[str, int]] = []
        self._logged: set[str] = set()
        self._device_types: frozenset[str] = frozenset()
        self._dtypes: frozenset[Any] = frozenset()
        self._head_dims: frozenset[int] = frozenset()
        self._cuda_only = True
        # The replacement SDPA, made once: identity checks compare against this object.
        self.patched: Callable[..., Any] = self._make_patched()
        self.refresh_registry()

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

    def enter(self) -> dict[str, Counter[str]]:
        with self._lock:
            if not runtime_switched_off():
                self._depth += 1
                self._local.depth = getattr(self._local, "depth", 0) + 1
                if self._depth == 1 and not self._global:
                    self._install()
            return {"routed": Counter(self._routed), "sdpa": self._sdpa_totals()}

    def exit(self, snapshot: dict[str, Counter[str]]) -> None:
        with self._lock:
            if getattr(self._local, "depth", 0) > 0:
                self._local.depth -= 1
                if self._local.depth == 0:
                    del self._local.depth  # back to the global setting
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
            self._install()

    def disable_global(self) -> None:
        with self._lock:
            self._global = False
            if self._depth == 0:
                self._oom_blocked = False
                self._uninstall()

    @contextlib.contextmanager
    def _kernel_running(self, q: Any) -> Iterator[None]:
        """The tensors' device current; SDPA calls from inside the kernel (a kernel that falls
        back to SDPA itself) go straight to the original."""
        previous = self._local.__dict__.get("depth")
        self._local.depth = 0  # falsy: no routing, even in global mode
        try:
            with _device_current(q):
                yield
        finally:
            if previous is None:
                del self._local.depth
            else:
                self._local.depth = previous

    # --- the replacement ---------------------------------------------------------------------

    def _make_patched(self) -> Callable[..., Any]:
        """The function put in place of SDPA. A closure over locals, not a bound method: on a
        call that stays on SDPA every attribute lookup shows (about 1 us saved per call)."""
        router = self
        local = self._local

        def scaled_dot_product_attention(
                query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                **kwargs: Any) -> Any:
            original = router.original
            assert original is not None
            # One read of this thread's state decides: its scope depth (0 inside a kernel),
            # else the global setting.
            state = local.__dict__
            if state.get("depth", router._global):
                if kwargs or enable_gqa:
                    reason: str | None = "gqa" if enable_gqa else "unknown_args"
                elif router._cuda_only and not query.is_cuda:
                    reason = "device"  # the common case off the GPU, without a call
                else:
                    reason = ineligible_reason(
                        query, key, value, attn_mask, dropout_p, is_causal,
                        router._device_types, router._dtypes, router._head_dims,
                        router.min_seq_len, _grad_enabled, _compiling)
                if reason is None:
                    reason, out = router._route(query, key, value, is_causal, scale)
                    if reason is None:
                        return out
                counts = state.get("sdpa")
                if counts is None:
                    counts = router._new_thread_counts()
                counts[reason] = counts.get(reason, 0) + 1
            if enable_gqa:
                kwargs["enable_gqa"] = True  # only when asked: torch < 2.5 lacks the argument
            elif attn_mask is None and not dropout_p and not is_causal and scale is None \
                    and not kwargs:
                return original(query, key, value)  # keyword parsing costs ~1 us per call
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, **kwargs)

        return scaled_dot_product_attention

    def _new_thread_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        self._local.sdpa = counts
        with self._lock:
            self._sdpa_counts.append(counts)
        return counts

    def _sdpa_totals(self) -> Counter[str]:
        total: Counter[str] = Counter()
        with self._lock:
            for counts in self._sdpa_counts:
                total.update(dict(counts))
        return total

    def _route(self, q: Any, k: Any, v: Any, is_causal: bool,
               scale: float | None) -> tuple[str | None, Any]:
        device = str(q.device)
        if self._oom_blocked:
            return "oom", None
        if device in self._retired:
            return "retired", None
        key: Key = (device, _dtype_name(q.dtype), int(q.shape[-1]))
        if key in self._keys:
            spec = self._keys[key]
        else:
            spec = self._first_call_check(key, q, k, v, is_causal, scale)
        if spec is None:
            return "unverified", None
        wins = self._kernel_wins(key, spec, q, k, v, is_causal, scale)
        if not wins:
            return "slower", None
        return self._run(spec, key, q, k, v, is_causal, scale)

    def _run(self, spec: KernelSpec, key: Key, q: Any, k: Any, v: Any, is_causal: bool,
             scale: float | None) -> tuple[str | None, Any]:
        device = key[0]
        try:
            fn = self.registry.load(spec)
            with self._kernel_running(q):
                out = fn(q, k, v, is_causal=is_causal, scale=scale)
        except Exception as exc:
            return self._fault(spec, device, exc), None
        with self._lock:
            self._device_faults[device] = 0
            self._routed[spec.label] += 1
        return None, out

    def _fault(self, spec: KernelSpec, device: str, exc: Exception) -> str:
        with self._lock:
            if _is_oom(exc):
                self._oom_blocked = True
                self._log_once(f"oom:{device}", logging.WARNING,
                               "SageAttention ran out of memory on %s; SDPA serves the rest of "
                               "this scope", device)
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
                          scale: float | None) -> KernelSpec | None:
        with self._lock:  # one check per key, even with many threads arriving at once
            if key in self._keys:
                return self._keys[key]
            arch = self._arch_of(q)
            heads = min(int(q.shape[1]), CHECK_HEADS)
            qs, ks, vs = (t[:1, :heads] for t in (q, k, v))
            assert self.original is not None
            reference = self.original(qs, ks, vs, is_causal=is_causal, scale=scale)
            tried: list[tuple[str, Comparison | str]] = []
            chosen = None
            for spec in self.registry.candidates(q.device.type, arch, key[1], key[2]):
                try:
                    fn = self.registry.load(spec)
                    with self._kernel_running(q):
                        out = fn(qs, ks, vs, is_causal=is_causal, scale=scale)
                    result: Comparison | str = compare(out, reference)
                except Exception as exc:  # an import or kernel error fails this kernel only
                    result = f"{type(exc).__name__}: {exc}"
                tried.append((spec.name, result))
                if isinstance(result, Comparison) and result.passes(self.thresholds):
                    chosen = spec
                    break
            self._keys[key] = chosen
            details = "; ".join(
                f"{name}: {r.describe() if isinstance(r, Comparison) else r}" for name, r in tried)
            if chosen is None:
                log.warning("no SageAttention kernel passed the check on %s %s D=%d (%s); "
                            "SDPA serves it", *key, details or "no kernel serves it")
            else:
                log.info("SageAttention %s verified on %s %s D=%d (%s)", chosen.name, *key,
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

    def _kernel_wins(self, key: Key, spec: KernelSpec, q: Any, k: Any, v: Any,
                     is_causal: bool, scale: float | None) -> bool:
        q_len = int(q.shape[2])
        arch = self._arch_of(q)
        arch_text = f"{arch[0]}.{arch[1]}" if arch else q.device.type
        calibrated = f"{arch_text}|{key[1]}|{key[2]}"
        if calibrated in self.calibration:
            crossover = self.calibration[calibrated]
            return crossover is not None and q_len >= crossover
        bucket = (key, q_len.bit_length())
        decision = self._speed.get(bucket)
        if decision is None:
            with self._lock:
                decision = self._speed.get(bucket)
                if decision is None:
                    decision = self._time_both(spec, q, k, v, is_causal, scale)
                    self._speed[bucket] = decision
                    log.info("%s on %s %s D=%d, ~%d tokens: %s", spec.name, *key, q_len,
                             "faster than SDPA, routed" if decision else "slower, SDPA kept")
        return decision

    def _time_both(self, spec: KernelSpec, q: Any, k: Any, v: Any, is_causal: bool,
                   scale: float | None) -> bool:
        """Time kernel and SDPA alternately on the call's own inputs; the kernel must win."""
        assert self.original is not None
        original = self.original
        try:
            fn = self.registry.load(spec)
        except Exception:
            return False
        sync = _synchronizer(q)

        def run_kernel() -> None:
            with self._kernel_running(q):
                fn(q, k, v, is_causal=is_causal, scale=scale)

        def run_sdpa() -> None:
            original(q, k, v, is_causal=is_causal, scale=scale)

        try:
            run_kernel()
            run_sdpa()
            kernel_t, sdpa_t = [], []
            for _ in range(self.timing_reps):
                kernel_t.append(_timed(run_kernel, sync))
                sdpa_t.append(_timed(run_sdpa, sync))
        except Exception:
            return False
        return statistics.median(kernel_t) < statistics.median(sdpa_t)

    # --- reporting -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._lock:
            sdpa = self._sdpa_totals()
            return {
                "routed": dict(self._routed),
                "sdpa": dict(sdpa),
                "keys": {"|".join(map(str, k)): (s.name if s else None)
                         for k, s in self._keys.items()},
                "retired": sorted(self._retired),
                "summary": summary_line(self._routed, sdpa),
            }

    def _log_once(self, tag: str, level: int, message: str, *args: Any) -> None:
        if tag not in self._logged:
            self._logged.add(tag)
            log.log(level, message, *args)


def summary_line(routed: Counter[str], sdpa: Counter[str]) -> str:
    """'412 calls on SageAttention (sm90 fp8), 96 on SDPA: 64 short sequence, 32 masked'."""
    kernels = ", ".join(label for label, _ in routed.most_common())
    total = sum(routed.values())
    head = f"{total} calls on SageAttention" + (f" ({kernels})" if kernels else "")
    reasons = ", ".join(f"{n} {REASONS.get(r, r)}" for r, n in sdpa.most_common())
    return f"{head}, {sum(sdpa.values())} on SDPA" + (f": {reasons}" if reasons else "")


def _grad_enabled() -> bool:
    import torch

    return bool(torch.is_grad_enabled())


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


def _synchronizer(q: Any) -> Callable[[], None]:
    if q.device.type == "cuda":
        import torch

        device = q.device
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _timed(fn: Callable[[], None], sync: Callable[[], None]) -> float:
    sync()
    started = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - started


_ROUTER: Router | None = None
_ROUTER_LOCK = threading.Lock()


def get_router() -> Router:
    global _ROUTER
    with _ROUTER_LOCK:
        if _ROUTER is None:
            _ROUTER = Router(calibration=_load_calibration())
        return _ROUTER


CALIBRATION_ENV = "SAGEDOCTOR_CALIBRATION"


def calibration_path() -> str:
    """SAGEDOCTOR_CALIBRATION, else the file `sagedoctor verify` writes into this venv."""
    import sys

    return os.environ.get(CALIBRATION_ENV) or os.path.join(sys.prefix, "sagedoctor",
                                                           "calibration.json")


def _load_calibration() -> dict[str, int | None]:
    """Crossovers written by `sagedoctor verify`; none: the runtime times calls itself."""
    import json

    path = calibration_path()
    if not os.environ.get(CALIBRATION_ENV) and not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        log.warning("calibration %s not read (%s); timing calls instead", path, exc)
        return {}
    crossovers = data.get("crossovers", {}) if isinstance(data, dict) else {}
    return {str(k): (int(v) if isinstance(v, int) and not isinstance(v, bool) else None)
            for k, v in crossovers.items()} if isinstance(crossovers, dict) else {}


@contextlib.contextmanager
def sage_scope(router: Router | None = None) -> Iterator[Router]:
    """Route eligible SDPA calls made in this thread, inside the block, to SageAttention."""
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
