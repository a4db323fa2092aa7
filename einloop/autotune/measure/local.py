"""Measuring candidates: build them in a process pool, check and time them in a child process.

    option = measure_option(number=5, repeat=3, timeout=10)
    with Measurer(task, option) as m:
        results = m.measure_batch([task.config_space.get(i) for i in (3, 17, 42)])

A candidate is a template config or a step list (:mod:`.candidate`); the Measurer only asks the
task to normalise it (``task.candidate``) and sends its ``wire`` form to the builder.

Processes (fresh interpreters that import einloop and never the user's main module, see
:mod:`.child`; nothing relies on fork-inherited state):

* **builder** (:mod:`.builder`): a pool of ``n_parallel`` build worker processes.  A worker is
  sent the pickled task and a candidate (a config index or a step list); it instantiates it,
  lowers the schedule and compiles it to object code as ``build`` does, and returns a
  :class:`~einloop.codegen.shipped.ShippedKernel`.  Builds run in the background: the
  candidates of a batch first, then the ones the tuner will propose next (``lookahead``), while
  the runner checks and times earlier candidates and while the tuner proposes.
* **runner** (:mod:`.runner`): one persistent child process per Measurer.  It holds the random
  inputs and the reference outputs (computed once from the task's reference candidate: a
  template's fallback config, a DAG's default schedule), JIT-compiles each candidate, checks it
  against the reference and times it.  Candidates run one at a time, in order, each as soon as
  its build is ready.  Timings never overlap with builds: right before its timed repetitions the
  runner asks the parent to pause the build workers (SIGSTOP; SIGCONT afterwards, on errors and
  on close too).  Pausing, rather than scheduling builds only between timing windows, because a
  build (~50-100 ms) cannot be interrupted otherwise, and waiting for it would idle the runner;
  where a stopped worker could outlive a killed parent (no parent-death signal: not Linux, or
  the Measurer was started from a short-lived thread) the parent instead lets running builds
  finish and starts none until the timing is over.  ``measure_option(overlap=False)`` restores
  batch barriers: build the whole batch, then run it.  With overlap the build workers run at a
  lower priority (nice +10), so that builds take only the CPU that the runner's JIT and check
  and the tuner's proposals leave idle instead of slowing them down.

Error kinds (:class:`MeasureErrorNo`):

* ``INSTANTIATION_ERROR``: the template or a schedule primitive raised (e.g. ScheduleError) while
  instantiating the config.
* ``COMPILE_ERROR``: lowering or LLVM emission/optimisation raised, the build worker process died,
  or the JIT in the runner failed.
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

Test hook: ``EINLOOP_RUNNER_FAULT`` (see :mod:`.runner`) makes the runner process really crash
or hang on given config indices.

Builder and runner report a :class:`MeasureErrorNo` themselves (:mod:`.status`).

``measure_option(cluster=...)`` (a ``distributed.Client`` or a scheduler address) moves both
halves onto a Dask cluster (:mod:`.cluster`); :func:`open_measurer` picks the measurer.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
import os
import pickle
import statistics
import time
import weakref

from ...errors import TuningError
from . import builder as B
from . import runner as R
from .status import MeasureErrorNo

__all__ = ["MeasureErrorNo", "MeasureResult", "MeasureOption", "measure_option", "Measurer",
           "open_measurer"]


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
                   cooldown_s=0.0, overlap=True, cluster=None) -> MeasureOption:
    """Validated measurement settings.

    number, repeat: each of ``repeat`` measurements times ``number`` calls (``min_repeat_ms``
    grows ``number`` until one measurement lasts that long).  timeout: seconds the runner may
    spend on one candidate (JIT, check, timing).  build_timeout: seconds per build (default:
    ``timeout``).  n_parallel: build workers (default: CPU count).  check_correctness: compare
    each candidate's outputs with the fallback config's (``|got - ref| <= atol + rtol*max|ref|``).
    cooldown_s: pause before each candidate's run.  overlap: build later candidates while
    earlier ones are checked and timed (builds are paused while a candidate is timed); False:
    build each batch completely before running it.  cluster: None (measure on this
    machine), a ``distributed.Client``, or a scheduler address such as ``"tcp://host:8786"``:
    build on any worker of that Dask cluster and time on its workers holding the
    ``einloop-runner`` resource (see :mod:`.cluster`; needs ``pip install einloop[distributed]``).
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
    for name, v in (("rtol", rtol), ("atol", atol), ("cooldown_s", cooldown_s)):
        need(_is_number(v) and v >= 0, name, v, "a number >= 0")
    if cluster is not None:
        from .cluster.client import check_cluster
        check_cluster(cluster)
    return MeasureOption(number, repeat, min_repeat_ms, float(timeout),
                         None if build_timeout is None else float(build_timeout), n_parallel,
                         check_correctness, float(rtol), float(atol), float(cooldown_s),
                         overlap, cluster)


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
    import dataclasses
    option = measure_option() if option is None else option
    return dataclasses.replace(option, min_repeat_ms=max(option.min_repeat_ms, MIN_REPEAT_MS))


def open_measurer(task, option=None):
    """The measurer *option* asks for: a :class:`Measurer` on this machine, or a
    :class:`~.cluster.ClusterMeasurer` when ``option.cluster`` is set."""
    if option is not None and getattr(option, "cluster", None) is not None:
        from .cluster.client import ClusterMeasurer
        return ClusterMeasurer(task, option)
    return Measurer(task, option)


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


class _BuildHooks(R.RunHooks):
    """While the runner works: keep the build workers busy, and quiet while it times."""

    def __init__(self, pool):
        self.pool = pool
        self._finished = pool.finished

    def waiting(self):
        self.pool.service()

    def timing_starts(self):
        busy = self.pool.busy or self.pool.finished != self._finished
        if not self.pool.pause():
            self.pool.hold()
        return busy

    def timing_ends(self):
        self.pool.resume()
        self._finished = self.pool.finished


class _Processes:
    """The Measurer's child processes; closed by ``Measurer.close`` or its finalizer."""

    def __init__(self):
        self.builder = None
        self.runner = None

    def close(self):
        runner, self.runner = self.runner, None
        builder, self.builder = self.builder, None
        try:
            if runner is not None:
                runner.stop(grace=2.0)
        finally:
            if builder is not None:
                builder.close(grace=2.0)


class Measurer:
    """Builds, checks and times candidates of one task; use as a context manager.

    Creating it starts the build workers and the runner and measures nothing yet; it builds the
    task's reference candidate (raising TuningError if that fails).  ``close()``
    (idempotent; also on garbage collection, at exit, and when ``measure_batch`` is interrupted)
    stops and reaps every child process.
    """

    def __init__(self, task, option: MeasureOption | None = None):
        if option is None:
            option = measure_option()
        if not isinstance(option, MeasureOption):
            raise TuningError(f"Measurer: option must come from measure_option(...), got "
                              f"{type(option).__name__}")
        self.task, self.option = task, option
        try:
            self._task_bytes = pickle.dumps(task)
        except Exception as exc:
            raise TuningError(f"Measurer: task {task!r} cannot be pickled for the build "
                              f"workers: {exc}") from None
        self._procs = _Processes()
        self._finalizer = weakref.finalize(self, self._procs.close)
        self._first_run = True
        self.stats = dict.fromkeys(STAT_KEYS, 0.0)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self):
        o = self.option
        self._procs.builder = B.BuildPool(o.build_workers,
                                          B.BACKGROUND_NICE if o.overlap else 0)
        self._procs.builder.start()
        ref = self._procs.builder.build_all(self._task_bytes, [None],
                                            max(o.effective_build_timeout, 60.0))[0]
        if ref.status != MeasureErrorNo.NO_ERROR:
            what = "fallback config" if self.task.config_space is not None \
                else "default schedule"
            raise TuningError(f"the {what} of {self.task!r} (the reference for "
                              f"correctness checks) failed to build:\n{ref.payload}")
        self.reference = ref.payload
        opts = {"number": o.number, "repeat": o.repeat, "min_repeat_ms": o.min_repeat_ms,
                "check_correctness": o.check_correctness, "rtol": o.rtol, "atol": o.atol}
        self._procs.runner = R.Runner(ref.payload, opts, setup_timeout=60.0 + o.timeout)
        self._procs.runner.start()

    # lifetime -----------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self):
        """Stop the runner and the build workers (idempotent)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def child_pids(self) -> dict:
        """``{"runner": pid or None, "builders": [pids]}`` of the live child processes."""
        p = self._procs
        return {"runner": p.runner.pid if p.runner is not None else None,
                "builders": p.builder.pids() if p.builder is not None else []}

    n_runners = 1
    """Machines timing candidates at once (the tuner sizes its batches by it)."""

    def progress(self) -> dict:
        """Extra entries for the tuner's progress bar (none for the local path)."""
        return {}

    @property
    def restarts(self) -> dict:
        """How often the runner and the build pool were restarted (for diagnostics)."""
        p = self._procs
        return {"runner": max(0, p.runner.starts - 1) if p.runner is not None else 0,
                "builder": p.builder.restarts if p.builder is not None else 0}

    # measuring ----------------------------------------------------------------------------------
    def measure_batch(self, candidates, lookahead=()) -> list:
        """Measure *candidates* (for a template: ConfigEntity or int each; for a DAG task: step
        lists); one :class:`MeasureResult` per candidate, in order.

        *lookahead*: candidates of the same kind that will be measured next (the tuner's
        ``peek_next``); they are built in the background after these, so that their builds are
        ready when they are measured.
        """
        if self.closed:
            raise TuningError("this Measurer is closed")
        candidates = [self.task.candidate(c) for c in candidates]
        lookahead = [self.task.candidate(c) for c in lookahead]
        try:
            return self._measure(candidates, lookahead)
        except BaseException:
            # interrupted (Ctrl-C) or broken beyond repair: leave no processes behind
            self.close()
            raise

    def _measure(self, candidates, lookahead):
        o, pool, clock = self.option, self._procs.builder, time.perf_counter
        t0, paused0 = clock(), pool.paused_s
        if o.overlap:           # streaming: each candidate runs once its build is ready
            pool.want([(c.key, self._task_bytes, c.wire, o.effective_build_timeout)
                       for c in (*candidates, *lookahead)])
            build_of, hooks = (lambda n: pool.wait(candidates[n].key)), _BuildHooks(pool)
        else:                   # a barrier: the whole batch is built first
            builds = pool.build_all(self._task_bytes, [c.wire for c in candidates],
                                    o.effective_build_timeout)
            build_of, hooks = builds.__getitem__, None
        self.stats["build_wait"] += clock() - t0
        results = []
        for n, candidate in enumerate(candidates):
            t0 = clock()
            b = build_of(n)
            self.stats["build_wait"] += clock() - t0
            self.stats["build"] += b.seconds
            if b.status != MeasureErrorNo.NO_ERROR:
                results.append(MeasureResult((), b.status, str(b.payload), b.seconds,
                                             time.time()))
                continue
            if o.cooldown_s and not self._first_run:
                time.sleep(o.cooldown_s)
            self._first_run = False
            t0 = clock()
            results.append(self._run(candidate, b, hooks))
            self.stats["run"] += clock() - t0
            for k, v in zip(("jit", "check", "timing"), self._procs.runner.last_phases):
                self.stats[k] += v
        self.stats["paused"] += pool.paused_s - paused0
        return results

    def _run(self, candidate, b, hooks):
        return run_candidate(self._procs.runner, candidate.label, candidate.fault_index, b,
                             self.option.timeout, hooks)

    def __repr__(self):
        state = "closed" if self.closed else f"pids {self.child_pids()}"
        return f"<Measurer {self.task!r} {state}>"
