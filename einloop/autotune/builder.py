"""The build half of measurement: candidates to :class:`PortableKernel` in a pool of processes.

:class:`BuildPool` owns a ``ProcessPoolExecutor`` started with ``spawn``.  A worker is sent the
pickled task (unpickled once per worker and cached) and a candidate's ``wire`` form (a config
index, or a step list: see :mod:`.candidate`); it instantiates the candidate (runs the template,
or replays the steps on freshly declared tensors), lowers the schedule and emits/optimises LLVM
IR, and sends back a :class:`~einloop.codegen.portable.PortableKernel` or an error with its
traceback, with a :class:`~.status.MeasureErrorNo` status.

Builds run in the background, in the order the Measurer wants them (the candidates it is about
to measure, then the ones its tuner will propose next), while the runner checks and times earlier
candidates; the workers are paused (SIGSTOP) while a candidate is timed (see :class:`BuildPool`).
At most ``n_workers`` builds are in flight, so each one starts on an idle (pre-started) worker
the moment it is submitted and its ``build_timeout`` counts from then (paused time excluded).
A build that overruns is recorded as timed out and the pool is killed and restarted (the other
builds in flight are submitted again).  A worker that dies breaks the whole pool: the pool is
restarted, and the builds that were in flight are retried one at a time, so the one that kills
its worker alone is identified and recorded, and the others are built normally.
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
BACKGROUND_NICE = 10            # builds in the background yield the CPU to the runner and tuner


class BuildResult(NamedTuple):
    status: Status              # NO_ERROR, or why the build failed
    payload: object             # a PortableKernel if NO_ERROR, else the error text
    seconds: float              # wall time of the build


# worker side ------------------------------------------------------------------------------------

_tasks: dict = {}               # pickled task bytes -> Task, per worker process


def _worker_init(pdeathsig, nice=0):
    lifeline.tie_to_parent(pdeathsig)
    if nice and hasattr(os, "nice"):
        os.nice(nice)
    # Ctrl-C in a terminal reaches the whole process group; the parent decides what to stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import warnings
    from ..errors import ParallelWarning, RegionFallbackWarning, VectorizeWarning
    # a candidate's fallbacks are the tuner's business, not lines on the user's terminal
    for category in (VectorizeWarning, ParallelWarning, RegionFallbackWarning):
        warnings.simplefilter("ignore", category)


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
        if wire is None:
            s, args = task.instantiate_reference()
        else:
            s, args = task.instantiate(task.candidate(wire))
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


class _Pause:
    """Worker processes stopped with SIGSTOP, held through pidfds where the OS has them (a pidfd
    names exactly that process, even if it exits and its pid is reused before SIGCONT)."""

    def __init__(self, procs):
        self.handles = []
        for p in procs:
            if p.exitcode is not None:          # gone (and reaped now): nothing to stop
                continue
            fd = None
            if hasattr(os, "pidfd_open"):
                try:
                    fd = os.pidfd_open(p.pid)
                except OSError:
                    fd = None
            self.handles.append((p.pid, fd))

    def send(self, sig):
        for pid, fd in self.handles:
            try:
                if fd is not None:
                    signal.pidfd_send_signal(fd, sig)
                else:
                    os.kill(pid, sig)
            except (ProcessLookupError, OSError):
                pass

    def wait_stopped(self, limit):
        """SIGSTOP is asynchronous: wait (briefly) until /proc shows every worker stopped."""
        deadline = time.monotonic() + limit
        todo = [pid for pid, _ in self.handles]
        while todo and time.monotonic() < deadline:
            todo = [pid for pid in todo if _proc_state(pid) not in "TtZX"]
            if todo:
                time.sleep(0.0005)

    def release(self):
        self.send(signal.SIGCONT)
        for _, fd in self.handles:
            if fd is not None:
                os.close(fd)
        self.handles = []


def _proc_state(pid):
    """The state letter of /proc/<pid>/stat ("R", "S", "T", ...); "X" if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


class _Job(NamedTuple):
    task_bytes: bytes
    wire: object
    timeout: float


class _Flight(NamedTuple):
    key: object
    timeout: float
    t0: float                   # time.monotonic() at submission
    paused0: float              # BuildPool.paused_s at submission


_ALL = object()                 # keys of build_all's builds: (_ALL, position)


class BuildPool:
    """A restartable pool of spawn-started build workers that builds in the background.

    The Measurer says which builds it wants, in which order (:meth:`want`: keys, each with its
    task and candidate), and collects them one by one (:meth:`wait`), so that the next
    candidates build while earlier ones are checked and timed.  The pool has no thread of its
    own: it advances (queued builds go to idle workers, results are collected, timeouts and
    crashed workers handled) whenever :meth:`service` is called, which the Measurer does while
    it waits for the runner.  :meth:`pause` stops the workers (SIGSTOP) while a candidate is
    timed and :meth:`resume` continues them; paused time does not count towards a build's
    timeout.  Pausing needs Linux and the parent-death signal (a stopped worker cannot notice
    that its parent died, but SIGKILL from the kernel still ends it): elsewhere
    :attr:`can_pause` is False and the Measurer lets running builds finish before timing and
    starts none during it (:meth:`hold`).  *nice*: the workers' added niceness (builds in the
    background should take only the CPU that the runner's JIT and check and the tuner leave).
    """

    def __init__(self, n_workers: int, nice: int = 0):
        self.n_workers, self.nice = n_workers, nice
        self._ctx = multiprocessing.get_context("spawn")
        self._pool = None
        self._procs = []
        self._pdeathsig = False
        self.restarts = 0
        self._jobs = {}             # key -> _Job: wanted, not yet taken away by want()
        self._queue = deque()       # keys not submitted yet, in build order
        self._in_flight = {}        # future -> _Flight
        self._done = {}             # key -> BuildResult
        self._suspects = set()      # were in flight when a worker died: retried alone
        self._pause = None
        self._held = False
        self._paused_total = 0.0
        self._paused_since = None
        self.finished = 0           # builds that ended (any way) so far

    # lifetime -------------------------------------------------------------------------------
    def start(self):
        """Start the workers unless they run (TuningError if they do not start); the pool."""
        if self._pool is not None:
            return self._pool
        self._pdeathsig = lifeline.starting_thread_is_long_lived()
        pool = cf.ProcessPoolExecutor(max_workers=self.n_workers, mp_context=self._ctx,
                                      initializer=_worker_init,
                                      initargs=(self._pdeathsig, self.nice))
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

    def _workers(self):
        """The current pool's worker processes (the executor may have started more since)."""
        for _ in range(3):
            try:
                return list((getattr(self._pool, "_processes", None) or {}).values()) \
                    or list(self._procs)
            except RuntimeError:            # changed size during iteration
                continue
        return list(self._procs)

    def _drop(self, grace):
        self.resume()                       # a stopped worker can neither finish nor exit
        pool, self._pool = self._pool, None
        if pool is not None:
            stop_pool(pool, grace)

    def _restart(self):
        self._drop(grace=0)
        self.restarts += 1

    def pids(self):
        return [p.pid for p in self._workers()] if self._pool is not None else []

    def close(self, grace=2.0):
        """Stop the workers (idempotent)."""
        self._drop(grace)
        self._procs = []
        self._jobs.clear()
        self._queue.clear()
        self._in_flight.clear()
        self._done.clear()

    # pausing --------------------------------------------------------------------------------
    @property
    def can_pause(self) -> bool:
        """Whether :meth:`pause` may stop the workers (see the class docstring)."""
        return sys.platform.startswith("linux") and self._pool is not None and self._pdeathsig

    @property
    def busy(self) -> bool:
        """Whether a build is in flight."""
        return bool(self._in_flight)

    @property
    def paused(self) -> bool:
        return self._pause is not None

    @property
    def paused_s(self) -> float:
        """Seconds the workers spent paused so far."""
        now = time.monotonic()
        return self._paused_total + (now - self._paused_since if self._paused_since else 0.0)

    def pause(self) -> bool:
        """Stop the workers (SIGSTOP) if a build is in flight; whether they are stopped."""
        if self._pause is None and self._in_flight and self._pool is not None \
                and self.can_pause:
            self._paused_since = time.monotonic()
            self._pause = _Pause(self._workers())      # held first: resume() finds it
            self._pause.send(signal.SIGSTOP)
            self._pause.wait_stopped(0.2)
        return self._pause is not None

    def resume(self):
        """Continue paused workers (SIGCONT) and end a hold (idempotent)."""
        self._held = False
        pause, self._pause = self._pause, None
        if pause is not None:
            pause.release()
        if self._paused_since is not None:
            self._paused_total += time.monotonic() - self._paused_since
            self._paused_since = None

    def hold(self):
        """Start no new build and wait for the ones in flight (where pausing is not safe)."""
        self._held = True
        while self._in_flight:
            self.service(wait=1.0)

    # building -------------------------------------------------------------------------------
    def want(self, jobs):
        """Build these ``(key, task_bytes, wire, timeout)``, in this order, after builds in
        flight; builds not listed are forgotten (one in flight finishes, unused)."""
        keep = {}
        for key, task_bytes, wire, timeout in jobs:
            keep.setdefault(key, _Job(task_bytes, wire, timeout))
        for key in [k for k in self._jobs if k not in keep]:
            del self._jobs[key]
            self._done.pop(key, None)
        flying = {f.key for f in self._in_flight.values()}
        for key, job in keep.items():
            self._jobs.setdefault(key, job)
        self._queue = deque(k for k in keep if k not in flying and k not in self._done)
        self._suspects &= set(self._queue) | flying

    def wait(self, key) -> BuildResult:
        """The build of *key* (one of :meth:`want`'s), advancing the pool until it is done."""
        while key not in self._done:
            if key not in self._jobs:
                from ..errors import InternalError
                raise InternalError(f"BuildPool.wait: no build of {key!r} was asked for")
            self.service(wait=1.0)
        return self._done[key]

    def build_all(self, task_bytes: bytes, wires, timeout: float) -> list:
        """Build each candidate of *wires*; one :class:`BuildResult` per candidate, in order.
        Forgets the builds asked for before."""
        keys = [(_ALL, n) for n in range(len(wires))]
        self.want([(k, task_bytes, w, timeout) for k, w in zip(keys, wires)])
        results = [self.wait(k) for k in keys]
        self.want([])
        return results

    def _elapsed(self, flight, now):
        """Seconds *flight* has been building, paused time excluded."""
        return now - flight.t0 - (self.paused_s - flight.paused0)

    def _finish(self, flight, result):
        if flight.key in self._jobs:
            self._done[flight.key] = result
            self._suspects.discard(flight.key)

    def _submit(self):
        while self._queue and len(self._in_flight) < self.n_workers and not self._held \
                and self._pause is None:
            key = self._queue[0]
            if self._in_flight and (key in self._suspects or any(
                    f.key in self._suspects for f in self._in_flight.values())):
                return
            pool = self.start()
            job = self._jobs[key]
            try:
                fut = pool.submit(build_candidate, job.task_bytes, job.wire)
            except BrokenProcessPool:
                if self._in_flight:             # the break shows in their futures
                    return
                self._restart()                 # broke before anything was submitted
                continue
            self._queue.popleft()
            self._in_flight[fut] = _Flight(key, job.timeout, time.monotonic(), self.paused_s)

    def service(self, wait: float = 0.0):
        """Advance the builds: submit queued ones to idle workers, collect finished ones
        (waiting up to *wait* seconds for one), enforce timeouts, recover from a dead worker."""
        self._submit()
        if not self._in_flight or self._pause is not None:
            return
        now = time.monotonic()
        left = min(f.timeout - self._elapsed(f, now) for f in self._in_flight.values())
        done, _ = cf.wait(list(self._in_flight), timeout=max(0.0, min(wait, left)),
                          return_when=cf.FIRST_COMPLETED)
        broken = []
        now = time.monotonic()
        self.finished += len(done)
        for fut in done:
            flight = self._in_flight.pop(fut)
            try:
                r = fut.result()
                self._finish(flight, r._replace(seconds=min(r.seconds,
                                                            self._elapsed(flight, now))))
            except BrokenProcessPool:
                broken.append(flight)
            except Exception:
                self._finish(flight, BuildResult(
                    Status.UNKNOWN_ERROR, "the build result could not be received:\n"
                    + traceback.format_exc(), self._elapsed(flight, now)))
        if broken:
            self._handle_broken(broken)
            return
        expired = [f for f, fl in self._in_flight.items() if self._elapsed(fl, now) >= fl.timeout]
        if expired:
            for f in expired:
                flight = self._in_flight.pop(f)
                self._finish(flight, BuildResult(
                    Status.COMPILE_TIMEOUT, "build timed out: instantiating, lowering and "
                    "optimising the candidate took longer than "
                    f"build_timeout={flight.timeout:g} s; its build worker was killed",
                    self._elapsed(flight, now)))
            self._requeue(self._in_flight.values())     # innocent: build them again
            self._in_flight.clear()
            self._restart()
        self._submit()

    def _requeue(self, flights):
        for flight in sorted(flights, key=lambda f: f.t0, reverse=True):
            if flight.key in self._jobs and flight.key not in self._done:
                self._queue.appendleft(flight.key)

    def _handle_broken(self, broken):
        """A worker died: every build in flight failed with BrokenProcessPool."""
        affected = list(broken)
        for fut, flight in list(self._in_flight.items()):
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._finish(flight, fut.result())          # finished before the break
            else:
                affected.append(flight)
        self._in_flight.clear()
        procs = self._workers()
        self._restart()
        codes = sorted({describe_exit(p.exitcode) for p in procs
                        if p.exitcode not in (None, 0, -signal.SIGTERM)})
        how = ", ".join(codes) or "no exit status"
        affected = [f for f in affected if f.key in self._jobs]
        if len(affected) == 1:                       # it was alone: it killed its worker
            flight = affected[0]
            self._finish(flight, BuildResult(
                Status.COMPILE_ERROR, "the build worker process died while building this "
                f"candidate ({how}); the build pool was restarted",
                self._elapsed(flight, time.monotonic())))
            return
        self._suspects.update(f.key for f in affected)
        self._requeue(affected)
