"""What every measurer shares: the settings (:func:`measure_option`), the result of one
candidate (:class:`MeasureResult`), checking and timing a built candidate in a runner
(:func:`run_candidate`), and the lifetime and reference-build parts of the measurer
interface, which the local :class:`~.local.Measurer` and the cluster's
:class:`~.cluster.client.ClusterMeasurer` implement.

Error kinds (:class:`MeasureErrorNo`):

* ``INSTANTIATION_ERROR``: the template or a schedule primitive raised (e.g. ScheduleError) while
  instantiating the config.
* ``COMPILE_ERROR``: lowering or LLVM emission/optimisation raised, the build worker process died,
  or loading its object code in the runner failed.
* ``COMPILE_TIMEOUT``: instantiating, lowering and compiling the candidate took longer than
  ``build_timeout`` (message starts "build timed out"); its build worker is killed and replaced.
* ``RUNTIME_ERROR``: the candidate raised in the runner, or the runner process died while
  measuring it (segfault, abort, OOM kill: the message names the signal or exit code); the runner
  is restarted.
* ``WRONG_ANSWER``: an output differs from the reference by more than ``atol + rtol*max|ref|``
  (or an element was not written); the message names the largest error.
* ``TIMEOUT``: the runner did not answer within ``timeout`` seconds (JIT, check and timing of one
  candidate); it is killed with SIGKILL and restarted.
* ``UNKNOWN_ERROR``: anything else (e.g. a build result that could not be received).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
import os
import statistics
import time

from ...errors import TuningError
from . import runner as R
from .cluster.check import check_cluster
from .runner import CacheFlush
from .status import MeasureErrorNo

__all__ = ["MeasureErrorNo", "MeasureResult", "MeasureOption", "measure_option", "settled",
           "run_candidate", "STAT_KEYS", "MeasurerBase"]


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring one candidate.

    ``costs``: seconds per call, one per repeat (empty on error); ``error_msg``: the full
    traceback or reason ("" if none); ``all_cost``: wall seconds spent on the candidate (build +
    run); ``timestamp``: ``time.time()`` when it was measured; ``machine``: the address of
    the cluster worker that measured it ("" when measured locally).
    """
    costs: tuple
    error_no: MeasureErrorNo
    error_msg: str
    all_cost: float
    timestamp: float
    machine: str = ""

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def mean_cost(self) -> float:
        """Mean of ``costs`` in seconds; ``inf`` for a failed measurement."""
        return statistics.fmean(self.costs) if self.costs and self.ok else math.inf

    def __repr__(self):
        if self.ok:
            return (f"MeasureResult(mean {self.mean_cost * 1e3:.4f} ms over {len(self.costs)} "
                    f"repeats, all_cost {self.all_cost:.3f} s)")
        first = (self.error_msg.strip().splitlines() or [""])[-1][:120]
        return f"MeasureResult({self.error_no.name}: {first})"


@dataclass(frozen=True)
class MeasureOption:
    """How candidates are measured; make one with :func:`measure_option`."""
    number: int = 5
    repeat: int = 3
    min_repeat_ms: float = 0
    timeout: float = 10.0
    build_timeout: float | None = None
    n_parallel: int | None = None
    check_correctness: bool = True
    rtol: float = 1e-4
    atol: float = 1e-5
    cooldown_s: float = 0.0
    overlap: bool = True
    cluster: object = None      # None (local), a distributed.Client, or a scheduler address
    cache_flush: CacheFlush = CacheFlush.NONE

    @property
    def effective_build_timeout(self) -> float:
        return self.timeout if self.build_timeout is None else self.build_timeout

    @property
    def build_workers(self) -> int:
        return self.n_parallel or os.cpu_count() or 1


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def measure_option(number=5, repeat=3, min_repeat_ms=0, timeout=10, build_timeout=None,
                   n_parallel=None, check_correctness=True, rtol=1e-4, atol=1e-5,
                   cooldown_s=0.0, overlap=True, cluster=None,
                   cache_flush=False) -> MeasureOption:
    """Validated measurement settings.

    number, repeat: each of ``repeat`` measurements times ``number`` calls (``min_repeat_ms``
    grows ``number`` until one measurement lasts that long).  timeout: seconds the runner may
    spend on one candidate (JIT, check, timing).  build_timeout: seconds per build (default:
    ``timeout``).  n_parallel: build workers (default: CPU count).  check_correctness: compare
    each candidate's outputs with the reference candidate's
    (``|got - ref| <= atol + rtol*max|ref|``).
    cooldown_s: pause before each candidate's run.  overlap: build later candidates while
    earlier ones are checked and timed (builds are paused while a candidate is timed); False:
    build each batch completely before running it.  cluster: None (measure on this
    machine), a ``distributed.Client``, or a scheduler address such as ``"tcp://host:8786"``:
    build on any worker of that Dask cluster and time on its workers holding the
    ``einloop-runner`` resource (see :mod:`.cluster.client`; needs
    ``pip install einloop[distributed]``).  cache_flush: a :class:`CacheFlush`, what to evict
    from the CPU caches before each timed call, each call then timed on its own (True: every
    argument, as TVM's ``enable_cpu_cache_flush``; ``CacheFlush.CONSTANTS``: a model's weights,
    what :func:`einloop.torch.tune_model` measures with): what a kernel takes inside a model
    whose other layers evict its weights, rather than called back to back.
    """
    def need(ok, name, value, what):
        if not ok:
            raise TuningError(f"measure_option: {name} must be {what}, got {value!r}")

    for name, v in (("number", number), ("repeat", repeat)):
        need(isinstance(v, int) and not isinstance(v, bool) and v >= 1, name, v,
             "an int >= 1")
    need(_is_number(min_repeat_ms) and min_repeat_ms >= 0, "min_repeat_ms", min_repeat_ms,
         "a number >= 0 (milliseconds)")
    need(_is_number(timeout) and timeout > 0, "timeout", timeout, "a number of seconds > 0")
    need(build_timeout is None or (_is_number(build_timeout) and build_timeout > 0),
         "build_timeout", build_timeout, "None (use timeout) or a number of seconds > 0")
    need(n_parallel is None or (isinstance(n_parallel, int) and not isinstance(n_parallel, bool)
                                and n_parallel >= 1),
         "n_parallel", n_parallel, "None (the CPU count) or an int >= 1")
    for name, v in (("check_correctness", check_correctness), ("overlap", overlap)):
        need(isinstance(v, bool), name, v, "True or False")
    need(isinstance(cache_flush, (bool, CacheFlush)), "cache_flush", cache_flush,
         "True (every argument), False or a CacheFlush (einloop.autotune.CacheFlush.CONSTANTS)")
    if isinstance(cache_flush, bool):
        cache_flush = CacheFlush.ALL if cache_flush else CacheFlush.NONE
    for name, v in (("rtol", rtol), ("atol", atol), ("cooldown_s", cooldown_s)):
        need(_is_number(v) and v >= 0, name, v, "a number >= 0")
    if cluster is not None:
        check_cluster(cluster)
    return MeasureOption(number, repeat, min_repeat_ms, float(timeout),
                         None if build_timeout is None else float(build_timeout), n_parallel,
                         check_correctness, float(rtol), float(atol), float(cooldown_s),
                         overlap, cluster, cache_flush)


#: the shortest measurement of the auto-scheduler's searches (:func:`settled`): a parallel kernel
#: of 50 us timed over the default 5 calls pays its threads' wake-up and cold caches in each,
#: so a kernel 2x faster back to back measured slower than a serial one.  Wake-up latency is
#: tens of microseconds on any OS and CPU, so 20 ms of calls drowns it everywhere, while a
#: candidate still costs at most ``repeat`` x 20 ms of timing.
MIN_REPEAT_MS = 20


def settled(option):
    """*option* (None: the defaults) with measurements of at least MIN_REPEAT_MS: the protocol
    the auto-scheduler times every candidate with, at fixed and symbolic sizes alike, so that a
    logged time is what the kernel takes called back to back in the user's process."""
    option = measure_option() if option is None else option
    return dataclasses.replace(option, min_repeat_ms=max(option.min_repeat_ms, MIN_REPEAT_MS))


def run_candidate(runner, candidate_label, fault_index, build, timeout, hooks=None, where=""):
    """Check and time the built candidate *build* (a BuildResult) in *runner*; a
    :class:`MeasureResult` whatever happens.  A runner that died earlier is started again first
    (not this candidate's cost).  *where*: the cluster worker's address ("" locally), named in
    error messages and kept in the result."""
    if not runner.alive():
        runner.start()
    on = f" on worker {where}" if where else ""
    t0 = time.perf_counter()
    try:
        status, payload = runner.run(fault_index, build.payload, timeout, hooks)
    except R.RunnerTimeout:
        return MeasureResult(
            (), MeasureErrorNo.TIMEOUT,
            f"{candidate_label}: no result within timeout={timeout:g} s (JIT, correctness "
            f"check and timing){on}; the runner process was killed (SIGKILL) and will be "
            "restarted", build.seconds + time.perf_counter() - t0, time.time(), where)
    except R.RunnerDied as exc:
        return MeasureResult(
            (), MeasureErrorNo.RUNTIME_ERROR,
            f"{candidate_label}: the runner process{on} died while measuring it ({exc}); it "
            "will be restarted", build.seconds + time.perf_counter() - t0, time.time(), where)
    all_cost = build.seconds + time.perf_counter() - t0
    if status == MeasureErrorNo.NO_ERROR:
        return MeasureResult(tuple(payload), status, "", all_cost, time.time(), where)
    if not isinstance(status, MeasureErrorNo):
        status = MeasureErrorNo.UNKNOWN_ERROR
    if where:
        payload = f"measured on worker {where}:\n{payload}"
    return MeasureResult((), status, str(payload), all_cost, time.time(), where)


STAT_KEYS = ("build", "build_wait", "run", "jit", "check", "timing", "paused")
"""``Measurer.stats``: seconds spent building the measured candidates (in the workers), waiting
for a build with the runner idle, in the runner (all of it, and its JIT, check and timing
phases), and with the build workers paused."""


def runner_options(option: MeasureOption) -> dict:
    """What a runner process needs of *option* to check and time candidates."""
    o = option
    return {"number": o.number, "repeat": o.repeat, "min_repeat_ms": o.min_repeat_ms,
            "check_correctness": o.check_correctness, "rtol": o.rtol, "atol": o.atol,
            "timeout": o.timeout, "cache_flush": o.cache_flush}


def reference_failed(task, payload, where="") -> TuningError:
    """The error of a task whose reference candidate (the outputs every candidate is checked
    against) did not build: nothing can be measured without it."""
    on = f" on worker {where}" if where else ""
    return TuningError(f"the {task.reference_name} of {task!r} (the reference for correctness "
                       f"checks) failed to build{on}:\n{payload}")


class MeasurerBase:
    """The lifetime of a measurer: ``close()`` stops what it started (idempotent); used as a
    context manager it closes on exit.  Subclasses implement ``_start``, ``close``, ``closed``,
    ``measure_batch(candidates, lookahead)``, ``n_runners`` and ``progress()``."""

    def _start_or_close(self):
        """Start what the measurer needs (``_start``); if that fails, stop what it started."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    #: lent by a :mod:`.session`, which closes it: leaving a ``with`` block keeps it open,
    #: unless an exception ends the block (Ctrl-C leaves no process behind)
    shared = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if not self.shared or exc_type is not None:
            self.close()
        return False
