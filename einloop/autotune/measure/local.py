"""Measuring candidates: build them in a process pool, check and time them in a child process.

    option = measure_option(number=5, repeat=3, timeout=10)
    with Measurer(task, option) as m:
        results = m.measure_batch([task.config_space.get(i) for i in (3, 17, 42)])

A candidate is a template config, an auto task's config or a step list
(:mod:`~einloop.autotune.space.candidate`); the Measurer only asks the
task to normalise it (``task.candidate``) and sends its ``wire`` form to the builder.

Processes (fresh interpreters that import einloop and never the user's main module, see
:mod:`.child`; nothing relies on fork-inherited state):

* **builder** (:mod:`.builder`): a pool of ``n_parallel`` build worker processes.  A worker is
  sent the pickled task and a candidate (a config index or a step list); it instantiates it,
  lowers the schedule and compiles it to object code as ``build`` does, and returns a
  :class:`~einloop.codegen.shipped.ShippedKernel`.  Builds run in the background: the
  candidates of a batch first, then the ones the tuner will propose next (``lookahead``), while
  the runner checks and times earlier candidates and while the tuner proposes.
* **runner** (:mod:`.runner`): one persistent child process per Measurer. It holds the random
  inputs and the reference outputs (computed once from the task's reference candidate: a
  template's fallback config, an auto task's generated default schedule), loads each
  candidate, checks it against the reference and times it. Candidates run one at a time, in
  order, each as soon as its build is ready. Timings never overlap with builds: right before its
  timed repetitions the runner asks the parent to pause the build workers (SIGSTOP; SIGCONT
  afterwards, on errors and on close too). Pausing, rather than scheduling builds only between
  timing windows, because a build (~50-100 ms) cannot be interrupted otherwise, and waiting for
  it would idle the runner; where a stopped worker could outlive a killed parent (no parent-death
  signal: not Linux, or the Measurer was started from a short-lived thread) the parent instead
  lets running builds finish and starts none until the timing is over.
  ``measure_option(overlap=False)`` restores batch barriers: build the whole batch, then run it.
  With overlap the build workers run at a lower priority (nice +10), so that builds take only the
  CPU that the runner's JIT and check and the tuner's proposals leave idle instead of slowing
  them down.

Error kinds: :mod:`.common`.  Test hook: ``EINLOOP_RUNNER_FAULT`` (see :mod:`.runner`) makes the
runner process really crash or hang on given config indices.
"""
from __future__ import annotations

import pickle
import time
import weakref

from ...errors import TuningError
from . import builder as B
from . import runner as R
from .common import (STAT_KEYS, MeasureOption, MeasureResult, MeasurerBase, measure_option,
                     reference_failed, run_candidate, runner_options)
from .status import MeasureErrorNo


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


class Measurer(MeasurerBase):
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
        self.option = option
        self._generation = -1           # bumped per task: builds are keyed by task too
        self._set_task(task)
        self._procs = _Processes()
        self._finalizer = weakref.finalize(self, self._procs.close)
        self._first_run = True
        self.stats = dict.fromkeys(STAT_KEYS, 0.0)
        self._start_or_close()

    def _set_task(self, task):
        try:
            task_bytes = pickle.dumps(task)
        except Exception as exc:
            raise TuningError(f"Measurer: task {task!r} cannot be pickled for the build "
                              f"workers: {exc}") from None
        self.task, self._task_bytes = task, task_bytes
        self._generation += 1           # one step list applied to two tasks is two kernels

    def _start(self):
        o = self.option
        self._procs.builder = B.BuildPool(o.build_workers,
                                          B.BACKGROUND_NICE if o.overlap else 0)
        self._procs.builder.start()
        self._procs.runner = R.Runner(self._build_reference(), runner_options(o),
                                      setup_timeout=60.0 + o.timeout)
        self._procs.runner.start()

    def _build_reference(self):
        ref = self._procs.builder.build_all(self._task_bytes, [None],
                                            max(self.option.effective_build_timeout, 60.0))[0]
        if ref.status != MeasureErrorNo.NO_ERROR:
            raise reference_failed(self.task, ref.payload)
        self.reference = ref.payload
        return ref.payload

    def retask(self, task):
        """Measure *task*'s candidates from now on with the same processes: the build workers
        forget the old task's builds and the runner is set up with the new reference, which
        saves starting them again (a second or two) for each task of a job that tunes several
        (:mod:`.session`).  Raises TuningError, closing the measurer, if the new task's
        reference fails."""
        if self.closed:
            raise TuningError("this Measurer is closed")
        self._set_task(task)
        self.stats = dict.fromkeys(STAT_KEYS, 0.0)
        try:
            self._procs.builder.want([])
            self._procs.runner.retarget(self._build_reference())
        except BaseException:
            self.close()
            raise

    # lifetime -----------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self):
        """Stop the runner and the build workers (idempotent)."""
        self._finalizer()

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
        """Measure *candidates* (configs, as ConfigEntity or index, or step lists); one
        :class:`MeasureResult` per candidate, in order.

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
            g = self._generation
            pool.want([((g, c.key), self._task_bytes, c.wire, o.effective_build_timeout)
                       for c in (*candidates, *lookahead)])
            build_of, hooks = (lambda n: pool.wait((g, candidates[n].key))), _BuildHooks(pool)
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
