"""The build half of measurement: candidates to :class:`PortableKernel` in a pool of processes.

:class:`BuildPool` owns a ``ProcessPoolExecutor`` started with ``spawn``.  A worker is sent the
pickled task (unpickled once per worker and cached) and a candidate's ``wire`` form (a config
index, or a step list: see :mod:`.candidate`); it instantiates the candidate (runs the template,
or replays the steps on freshly declared tensors), lowers the schedule and emits/optimises LLVM
IR, and sends back a :class:`~einloop.codegen.portable.PortableKernel` or an error with its
traceback, with a :class:`~.status.MeasureErrorNo` status.

At most ``n_workers`` builds are in flight, so each one starts on an idle (pre-started) worker
the moment it is submitted and its ``build_timeout`` counts from then.  A build that overruns is
recorded as timed out and the pool is killed and restarted (the other builds in flight are
submitted again).  A worker that dies breaks the whole pool: the pool is restarted, and the builds
that were in flight are retried one at a time, so the one that kills its worker alone is
identified and recorded, and the others are built normally.
"""
from __future__ import annotations

from collections import deque
import concurrent.futures as cf
from concurrent.futures.process import BrokenProcessPool
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import traceback
from typing import NamedTuple

from . import lifeline
from .runner import describe_exit
from .status import MeasureErrorNo as Status

WARMUP_TIMEOUT = 120.0          # seconds for a fresh pool's workers to start and import einloop


class BuildResult(NamedTuple):
    status: Status              # NO_ERROR, or why the build failed
    payload: object             # a PortableKernel if NO_ERROR, else the error text
    seconds: float              # wall time of the build


# worker side ------------------------------------------------------------------------------------

_tasks: dict = {}               # pickled task bytes -> Task, per worker process


def _worker_init(pdeathsig):
    lifeline.tie_to_parent(pdeathsig)
    # Ctrl-C in a terminal reaches the whole process group; the parent decides what to stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import warnings
    from ..errors import ParallelWarning, VectorizeWarning
    warnings.simplefilter("ignore", VectorizeWarning)   # a candidate's fallback is the tuner's business
    warnings.simplefilter("ignore", ParallelWarning)


def _warmup():
    """Import what builds need, so the first build's timeout does not pay for it."""
    from ..codegen import portable  # noqa: F401
    from ..schedule import lower    # noqa: F401
    from ..codegen.target import init_llvm
    init_llvm()
    return os.getpid()


def _failure(status, t0):
    """A failed build; the traceback is formatted defensively (a RecursionError's is long)."""
    try:
        text = traceback.format_exc(limit=50)
    except BaseException:                  # noqa: BLE001 -- formatting must not fail the build
        text = "".join(traceback.format_exception_only(*sys.exc_info()[:2]))
    return BuildResult(status, text, time.perf_counter() - t0)


def build_candidate(task_bytes: bytes, wire) -> BuildResult:
    """Build the candidate *wire* (its ``wire`` form; ``None``: the task's reference candidate)
    of the pickled task.

    Whatever the template, the schedule or the compiler raise (SystemExit, MemoryError and
    RecursionError included) is this candidate's failure, returned as data: an exception sent
    back raw would surface in the tuning job.
    """
    t0 = time.perf_counter()
    try:
        task = _tasks.get(task_bytes)
        if task is None:
            task = _tasks[task_bytes] = pickle.loads(task_bytes)
        candidate = task.reference_candidate() if wire is None else task.candidate(wire)
        s, args = task.instantiate(candidate)
    except BaseException:                  # noqa: BLE001 -- see the docstring
        return _failure(Status.INSTANTIATION_ERROR, t0)
    try:
        from ..schedule import lower
        from ..codegen.portable import make_portable
        func = lower(s, args, name=task.name)
        pk = make_portable(func, task.target_spec)
    except BaseException:                  # noqa: BLE001
        return _failure(Status.COMPILE_ERROR, t0)
    return BuildResult(Status.NO_ERROR, pk, time.perf_counter() - t0)


# parent side ------------------------------------------------------------------------------------

def stop_pool(pool, grace: float):
    """Shut *pool* down: let idle workers exit for *grace* seconds, kill the rest, reap all."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    thread = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace
    pending = {p.sentinel: p for p in procs}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for s in multiprocessing.connection.wait(list(pending), timeout=left):
            pending.pop(s, None)
    for p in pending.values():          # still running (their sentinel is not ready): not reaped
        try:
            p.kill()
        except (ProcessLookupError, OSError):
            pass
    if thread is not None:
        thread.join(timeout=30)
    for p in procs:
        p.join(timeout=5)
    return procs


class BuildPool:
    """A restartable pool of spawn-started build workers."""

    def __init__(self, n_workers: int):
        self.n_workers = n_workers
        self._ctx = multiprocessing.get_context("spawn")
        self._pool = None
        self._procs = []
        self.restarts = 0

    # lifetime -------------------------------------------------------------------------------
    def _ensure(self):
        if self._pool is not None:
            return self._pool
        pool = cf.ProcessPoolExecutor(max_workers=self.n_workers, mp_context=self._ctx,
                                      initializer=_worker_init,
                                      initargs=(lifeline.starting_thread_is_long_lived(),))
        self._pool = pool
        # start every worker now (the executor spawns them on demand otherwise)
        futs = [pool.submit(_warmup) for _ in range(self.n_workers)]
        procs = list((getattr(pool, "_processes", None) or {}).values())
        done, not_done = cf.wait(futs, timeout=WARMUP_TIMEOUT)
        errors = [f.exception() for f in done if f.exception() is not None]
        if not_done or errors:
            self._drop(grace=0)
            from ..errors import TuningError
            if lifeline.NO_MAIN_GUARD_EXIT in {p.exitcode for p in procs}:
                raise TuningError(lifeline.main_guard_message())
            why = repr(errors[0]) if errors else f"no answer within {WARMUP_TIMEOUT:g} s"
            raise TuningError(f"the build worker processes did not start: {why}")
        self._procs = procs
        return pool

    def _drop(self, grace):
        pool, self._pool = self._pool, None
        if pool is not None:
            stop_pool(pool, grace)

    def _restart(self):
        self._drop(grace=0)
        self.restarts += 1

    def pids(self):
        return [p.pid for p in self._procs] if self._pool is not None else []

    def close(self, grace=2.0):
        """Stop the workers (idempotent)."""
        self._drop(grace)
        self._procs = []

    # building -------------------------------------------------------------------------------
    def build_all(self, task_bytes: bytes, wires, timeout: float) -> list:
        """Build each candidate of *wires*; one :class:`BuildResult` per candidate, in order."""
        results = [None] * len(wires)
        queue = deque(range(len(wires)))
        suspects = set()            # were in flight when a worker died: retried alone
        in_flight = {}              # future -> (position, start time)
        while queue or in_flight:
            pool = self._ensure()
            while queue and len(in_flight) < self.n_workers:
                pos = queue[0]
                if in_flight and (pos in suspects
                                  or any(p in suspects for p, _ in in_flight.values())):
                    break
                queue.popleft()
                try:
                    fut = pool.submit(build_candidate, task_bytes, wires[pos])
                except BrokenProcessPool:
                    queue.appendleft(pos)
                    break
                in_flight[fut] = (pos, time.monotonic())
            if not in_flight:           # the pool broke before anything was submitted
                self._restart()
                continue
            deadline = min(t0 for _, t0 in in_flight.values()) + timeout
            done, _ = cf.wait(list(in_flight), timeout=max(0.0, deadline - time.monotonic()),
                              return_when=cf.FIRST_COMPLETED)
            broken = []
            for fut in done:
                pos, t0 = in_flight.pop(fut)
                try:
                    results[pos] = fut.result()
                except BrokenProcessPool:
                    broken.append((pos, t0))
                except Exception:
                    results[pos] = BuildResult(
                        Status.UNKNOWN_ERROR, "the build result could not be received:\n"
                        + traceback.format_exc(), time.monotonic() - t0)
            if broken:
                self._handle_broken(broken, in_flight, results, queue, suspects)
                continue
            now = time.monotonic()
            expired = [f for f, (_, t0) in in_flight.items() if now - t0 >= timeout]
            if expired:
                for f in expired:
                    pos, t0 = in_flight.pop(f)
                    results[pos] = BuildResult(
                        Status.COMPILE_TIMEOUT, "build timed out: instantiating, lowering and "
                        f"optimising the candidate took longer than build_timeout={timeout:g} s; "
                        "its build worker was killed", now - t0)
                for f, (pos, _) in in_flight.items():     # innocent: build them again
                    queue.appendleft(pos)
                in_flight.clear()
                self._restart()
        return results

    def _handle_broken(self, broken, in_flight, results, queue, suspects):
        """A worker died: every build in flight failed with BrokenProcessPool."""
        affected = list(broken)
        for fut, (pos, t0) in list(in_flight.items()):
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                results[pos] = fut.result()          # finished before the break
            else:
                affected.append((pos, t0))
        in_flight.clear()
        procs = list(self._procs)
        self._restart()
        codes = sorted({describe_exit(p.exitcode) for p in procs
                        if p.exitcode not in (None, 0, -signal.SIGTERM)})
        how = ", ".join(codes) or "no exit status"
        if len(affected) == 1:                       # it was alone: it killed its worker
            pos, t0 = affected[0]
            suspects.discard(pos)
            results[pos] = BuildResult(
                Status.COMPILE_ERROR, "the build worker process died while building this "
                f"candidate ({how}); the build pool was restarted", time.monotonic() - t0)
            return
        for pos, _ in sorted(affected, reverse=True):
            suspects.add(pos)
            queue.appendleft(pos)
