"""The build half of measurement: candidates to :class:`ShippedKernel` in a pool of processes.

:class:`BuildPool` runs ``n_workers`` build worker processes (:mod:`.child`: started from einloop
alone, never from the user's main module), each serving one build at a time over its own pipe
(:func:`serve`).  A worker is sent the pickled task (unpickled once per worker and cached) and a
candidate's ``wire`` form (a config index, or a step list: see :mod:`.candidate`); it
instantiates the candidate (runs the template, or replays the steps on freshly declared
tensors), lowers the schedule and compiles it to object code as ``einloop.build`` would (or
takes it from the persistent compile cache), and sends back a
:class:`~einloop.codegen.shipped.ShippedKernel` or an error with its traceback, with a
:class:`~.status.MeasureErrorNo` status.  Builds never write the compile cache: the runner
seeds it with the job's best candidates (:class:`~.runner.Runner`).

Builds run in the background, in the order the Measurer wants them (the candidates it is about
to measure, then the ones its tuner will propose next), while the runner checks and times earlier
candidates; the workers are paused (SIGSTOP) while a candidate is timed (see :class:`BuildPool`).
At most ``n_workers`` builds are in flight, so each one starts on an idle (pre-started) worker
the moment it is submitted and its ``build_timeout`` counts from then (paused time excluded).
A build that overruns is recorded as timed out, and a worker that dies is recorded as the
failure of the one build it was working on; either way that worker alone is killed and
replaced, and the other builds go on.
"""
from __future__ import annotations

from collections import deque
import enum
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import traceback
import warnings
from typing import NamedTuple

from ...codegen.llvm import init_llvm
from ...codegen.shipped import ship, ship_split
from ...errors import (InternalError, ParallelWarning, RegionFallbackWarning, TuningError,
                       VectorizeWarning)
from ...schedule import create_schedule, lower
from ...te.promote import promote_floats
from ...te.tensor import ComputeOp, constant_positions
from .child import Child
from .runner import Reference, describe_exit
from .status import MeasureErrorNo as Status

WARMUP_TIMEOUT = 120.0          # seconds for a fresh pool's workers to start and import einloop
BACKGROUND_NICE = 10            # builds in the background yield the CPU to the runner and tuner
ENTRY = "einloop.autotune.measure.builder:serve"     # what a build worker process runs (see .child)


class Hello(enum.Enum):
    """A build worker's first message, once it has imported what builds need."""
    READY = "ready"


class BuildResult(NamedTuple):
    status: Status              # NO_ERROR, or why the build failed
    payload: object             # a ShippedKernel if NO_ERROR, else the error text
    seconds: float              # wall time of the build


# worker side ------------------------------------------------------------------------------------

_tasks: dict = {}               # pickled task bytes -> Task, per worker process


def _quiet_warnings():
    # a candidate's fallbacks are the tuner's business, not lines on the user's terminal
    for category in (VectorizeWarning, ParallelWarning, RegionFallbackWarning):
        warnings.simplefilter("ignore", category)


def _warmup():
    """Initialise LLVM, so the first build's timeout does not pay for it (what builds need is
    imported with this module)."""
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
        # named as build(s, args) names it (after its output): the same IR, so the object the
        # runner seeds the compile cache with is what build of the job's winner looks up; a
        # candidate's work on constant inputs is split off, run once before it is timed
        func = lower(s, args)
        sk = ship(func, task.target_spec) if wire is None else \
            ship_split(func, constant_positions(args), task.target_spec)
    except BaseException:                  # noqa: BLE001
        return _failure(Status.COMPILE_ERROR, t0)
    if wire is None:
        sk = Reference(sk, _exact_reference(args, task.target_spec), constant_positions(args))
    return BuildResult(Status.NO_ERROR, sk, time.perf_counter() - t0)


def _exact_reference(args, target):
    """The operator of *args* computing in float64, default schedule, shipped; None when it
    has no narrow float to widen or cannot be built (candidates are then checked against the
    reference alone)."""
    try:
        wide = promote_floats(args)
        if all(a.dtype == w.dtype for a, w in zip(args, wide)):
            return None
        outputs = [w for w in wide if isinstance(w.op, ComputeOp)]
        return ship(lower(create_schedule(outputs), wide), target)
    except Exception:                      # noqa: BLE001 -- an optional yardstick
        return None


def serve(conn):
    """The build worker's loop (a :class:`~.child.Child` entry point): warm up, say READY, then
    answer each ``(task_bytes, wire)`` with its :class:`BuildResult` until the parent closes
    the connection."""
    _quiet_warnings()
    conn.send((Hello.READY, _warmup()))
    while True:
        try:
            task_bytes, wire = conn.recv()
        except (EOFError, OSError):
            return
        result = build_candidate(task_bytes, wire)
        try:
            conn.send(result)
        except (EOFError, OSError):
            return
        except Exception:                  # noqa: BLE001 -- e.g. a payload that does not pickle
            conn.send(BuildResult(Status.UNKNOWN_ERROR, "the build result could not be sent:\n"
                                  + traceback.format_exc(), result.seconds))


# parent side ------------------------------------------------------------------------------------

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


class _Slot:
    """One build worker: its process, whether it said READY, and the build it works on."""

    def __init__(self, nice):
        self.child = Child(ENTRY, nice=nice, name="build worker")
        self.started = time.monotonic()
        self.ready = False
        self.flight = None          # _Flight while it builds

    def stop(self, grace):
        self.child.stop(grace)


_ALL = object()                 # keys of build_all's builds: (_ALL, position)


class BuildPool:
    """A pool of build worker processes (:mod:`.child`) that builds in the background.

    The Measurer says which builds it wants, in which order (:meth:`want`: keys, each with its
    task and candidate), and collects them one by one (:meth:`wait`), so that the next
    candidates build while earlier ones are checked and timed.  The pool has no thread of its
    own: it advances (queued builds go to idle workers, results are collected, timeouts and
    crashed workers handled) whenever :meth:`service` is called, which the Measurer does while
    it waits for the runner.  Each worker builds one candidate at a time over its own pipe, so
    a build that overruns its timeout or kills its worker is known exactly: that worker alone
    is killed and replaced (:attr:`restarts` counts replacements) while the others build on.
    :meth:`pause` stops the workers (SIGSTOP) while a candidate is timed and :meth:`resume`
    continues them; paused time does not count towards a build's timeout.  Pausing needs
    Linux and the parent-death signal (a stopped worker cannot notice that its parent died, but
    SIGKILL from the kernel still ends it): elsewhere :attr:`can_pause` is False and the
    Measurer lets running builds finish before timing and starts none during it (:meth:`hold`).
    *nice*: the workers' added niceness (builds in the background should take only the CPU that
    the runner's JIT and check and the tuner leave).
    """

    def __init__(self, n_workers: int, nice: int = 0):
        self.n_workers, self.nice = n_workers, nice
        self._slots = []
        self.restarts = 0
        self._jobs = {}             # key -> _Job: wanted, not yet taken away by want()
        self._queue = deque()       # keys not submitted yet, in build order
        self._done = {}             # key -> BuildResult
        self._pause = None
        self._held = False
        self._paused_total = 0.0
        self._paused_since = None
        self.finished = 0           # builds that ended (any way) so far

    # lifetime -------------------------------------------------------------------------------
    def start(self):
        """Start the workers unless they run, and wait until they are ready (TuningError if
        they do not start)."""
        if self._slots:
            return
        try:
            while len(self._slots) < self.n_workers:
                self._slots.append(_Slot(self.nice))
            while not all(s.ready for s in self._slots):
                self._collect(self._slots, WARMUP_TIMEOUT)
        except BaseException:
            self._drop(grace=0)
            raise

    @staticmethod
    def _not_started(why):
        return TuningError(f"the build worker processes did not start: {why}")

    def _drop(self, grace):
        self.resume()                       # a stopped worker can neither finish nor exit
        slots, self._slots = self._slots, []
        for s in slots:
            s.child.close()                 # all of them told first, then waited for
        for s in slots:
            s.stop(grace if s.flight is None else 0)

    def _replace(self, slot):
        """Kill *slot*'s worker and start a new one in its place (it warms up meanwhile)."""
        slot.stop(0)
        self._slots[self._slots.index(slot)] = _Slot(self.nice)
        self.restarts += 1

    def pids(self):
        return [s.child.pid for s in self._slots if s.child.exitcode is None]

    def close(self, grace=2.0):
        """Stop the workers (idempotent)."""
        self._drop(grace)
        self._jobs.clear()
        self._queue.clear()
        self._done.clear()

    # pausing --------------------------------------------------------------------------------
    @property
    def can_pause(self) -> bool:
        """Whether :meth:`pause` may stop the workers (see the class docstring)."""
        return sys.platform.startswith("linux") and bool(self._slots) \
            and all(s.child.pdeathsig for s in self._slots)

    @property
    def busy(self) -> bool:
        """Whether a build is in flight."""
        return any(s.flight is not None for s in self._slots)

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
        if self._pause is None and self.busy and self.can_pause:
            self._paused_since = time.monotonic()
            self._pause = _Pause([s.child for s in self._slots])  # held first: resume finds it
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
        while self.busy:
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
        flying = {s.flight.key for s in self._slots if s.flight is not None}
        for key, job in keep.items():
            self._jobs.setdefault(key, job)
        self._queue = deque(k for k in keep if k not in flying and k not in self._done)

    def wait(self, key) -> BuildResult:
        """The build of *key* (one of :meth:`want`'s), advancing the pool until it is done."""
        while key not in self._done:
            if key not in self._jobs:
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

    def _finish(self, slot, result):
        flight, slot.flight = slot.flight, None
        self.finished += 1
        if flight.key in self._jobs:
            self._done[flight.key] = result

    def _submit(self):
        if self._held or self._pause is not None or not self._queue:
            return
        self.start()
        for slot in self._slots:
            if not self._queue:
                return
            if not slot.ready or slot.flight is not None:
                continue
            key = self._queue.popleft()
            job = self._jobs[key]
            slot.flight = _Flight(key, job.timeout, time.monotonic(), self.paused_s)
            try:
                slot.child.conn.send((job.task_bytes, job.wire))
            except OSError:                 # it died while idle: the receive says how
                pass

    def service(self, wait: float = 0.0):
        """Advance the builds: submit queued ones to idle workers, collect finished ones
        (waiting up to *wait* seconds for one), enforce timeouts, replace dead workers."""
        self._submit()
        if self._pause is not None:
            return
        active = [s for s in self._slots if s.flight is not None or not s.ready]
        if not active:
            return
        now = time.monotonic()
        flights = [s.flight for s in active if s.flight is not None]
        left = min([f.timeout - self._elapsed(f, now) for f in flights], default=wait)
        self._collect(active, max(0.0, min(wait, left)))
        now = time.monotonic()
        for slot in list(self._slots):
            f = slot.flight
            if f is not None and self._elapsed(f, now) >= f.timeout:
                self._finish(slot, BuildResult(
                    Status.COMPILE_TIMEOUT, "build timed out: instantiating, lowering and "
                    "compiling the candidate took longer than "
                    f"build_timeout={f.timeout:g} s; its build worker was killed",
                    self._elapsed(f, now)))
                self._replace(slot)
        self._submit()

    def _collect(self, slots, timeout):
        """Take what *slots*' workers sent within *timeout* seconds: READY, build results, or
        the end-of-file of a worker that died."""
        by_conn = {s.child.conn: s for s in slots}
        for conn in multiprocessing.connection.wait(list(by_conn), timeout=timeout):
            slot = by_conn[conn]
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                self._died(slot)
                continue
            except Exception:               # noqa: BLE001 -- a result that does not unpickle
                if slot.flight is not None:
                    self._finish(slot, BuildResult(
                        Status.UNKNOWN_ERROR, "the build result could not be received:\n"
                        + traceback.format_exc(), self._elapsed(slot.flight, time.monotonic())))
                continue
            if not slot.ready:
                slot.ready = msg[0] is Hello.READY
            elif slot.flight is not None:
                self._finish(slot, msg._replace(seconds=min(
                    msg.seconds, self._elapsed(slot.flight, time.monotonic()))))
        for slot in slots:
            if not slot.ready and slot in self._slots \
                    and time.monotonic() - slot.started > WARMUP_TIMEOUT:
                raise self._not_started(f"no answer within {WARMUP_TIMEOUT:g} s")

    def _died(self, slot):
        """*slot*'s worker is gone: its build (it was alone in it) killed it."""
        slot.child.join(10)
        how = describe_exit(slot.child.exitcode)
        if not slot.ready:
            self._drop(grace=0)
            raise self._not_started(f"a worker process ended at start ({how})")
        if slot.flight is not None:
            self._finish(slot, BuildResult(
                Status.COMPILE_ERROR, "the build worker process died while building this "
                f"candidate ({how}); it was replaced",
                self._elapsed(slot.flight, time.monotonic())))
        self._replace(slot)
