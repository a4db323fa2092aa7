"""What runs inside a Dask worker for :mod:`.cluster`: builds in a child process, runs in a
cached runner process.

A Dask worker is a long-lived process that many jobs share, so nothing einloop does may crash
it: every build and every run happens in a child process of the worker, and the worker only
waits for it.

* **builds** (:func:`build`): each worker thread owns one :class:`~.builder.BuildPool` of one
  process (kept in this module, created on the thread's first build and reused), so a build that
  segfaults, hangs past its timeout or exhausts memory costs a new build process, never the worker.
  Builds run at nice +10: on a machine that also times candidates they take only the CPU the
  runner leaves.
* **runs** (:func:`run`): one :class:`~.runner.Runner` per job (task and measurement options),
  started with the job's reference kernel on its first candidate and kept between Dask tasks;
  at most :data:`MAX_JOBS` are kept per worker (the least recently used is stopped), and the
  client stops its job's runner when it closes (:func:`drop_job`).  A run of a closed job that
  the worker starts after that (Dask cancels a closed job's queued runs, but a worker may take
  one from its queue before the cancellation reaches it) measures nothing and starts no runner:
  the worker remembers the last :data:`MAX_DROPPED` closed jobs.
* **cleanup**: a worker plugin (:func:`cleanup_plugin`) stops all of them when the worker
  closes; a worker that is killed takes them with it (:mod:`.lifeline`).

Dask starts its worker processes as ``multiprocessing`` daemons, which may not have
``multiprocessing`` children; einloop's children are not (:mod:`.child`), and die with the
worker on their own (:mod:`.lifeline`).

The state kept here is per worker process and is never used to pass arguments: every Dask task
gets what it needs as arguments.
"""
from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
import os
import socket
import threading
import time
from typing import NamedTuple

from ....codegen.target import Target
from ....runtime.threads import default_num_threads
from .. import builder as B
from .. import runner as R
from ..common import MeasureResult, run_candidate
from ..status import MeasureErrorNo

MAX_JOBS = 2                    # runner processes kept per worker (one per recent job)
MAX_DROPPED = 256               # closed jobs remembered per worker (see drop_job)


class Built(NamedTuple):
    """A build done on a worker: the :class:`~.builder.BuildResult` and the worker's address."""
    result: B.BuildResult
    worker: str


class RunJob(NamedTuple):
    """What a run needs besides the builds: the job it belongs to and the candidate."""
    job: str                    # the client's job key: task hash and measurement options
    opts: dict                  # the runner's measurement options
    timeout: float              # seconds for the runner on this candidate
    setup_timeout: float        # seconds for a (re)started runner to set up the reference
    label: str                  # the candidate, for messages
    fault_index: object         # the candidate's index for the runner's fault test hook


_lock = threading.Lock()
_env_lock = threading.Lock()    # serialises edits of os.environ (see _deployed_environ)
_pools = threading.local()      # .pool: this worker thread's BuildPool
_all_pools: list = []           # every thread's BuildPool (for child_pids)
_jobs: OrderedDict = OrderedDict()      # job key -> _JobRunner, least recently used first
_dropped: OrderedDict = OrderedDict()   # job key -> None: closed jobs, oldest first


def _address() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except Exception:           # noqa: BLE001 -- not inside a Dask task (client.run, tests)
        return f"pid {os.getpid()} on {socket.gethostname()}"


def _dask_environ() -> list:
    """The variables Dask's nanny set in this worker's environment (its ``pre-spawn-environ``:
    ``MALLOC_TRIM_THRESHOLD_``, ``OMP_NUM_THREADS=1``, ...) that still have Dask's value."""
    try:
        import dask
        pre = dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}
    except Exception:           # noqa: BLE001 -- no Dask config: nothing was set
        return []
    return [k for k, v in pre.items() if os.environ.get(k) == str(v)]


@contextmanager
def _deployed_environ():
    """Start a runner without Dask's worker settings, as a deployed kernel runs: with
    ``MALLOC_TRIM_THRESHOLD_`` set glibc keeps its mmap threshold at 128 KiB, so every temporary
    buffer above that would be fresh pages on every call, and timings would punish schedules
    with temporaries (packing) that run faster where they are deployed."""
    with _env_lock:
        saved = {k: os.environ.pop(k) for k in _dask_environ()}
        try:
            yield
        finally:
            os.environ.update(saved)


def host_info() -> dict:
    """This worker's host name, the full target string of its CPU and the threads a kernel's
    parallel loops get in its runner processes (for ``client.run``)."""
    return {"host": socket.gethostname(), "target": str(Target.parse("llvm")),
            "cores": default_num_threads(), "pid": os.getpid()}


# builds -----------------------------------------------------------------------------------------

def build(task_bytes: bytes, wire, timeout: float) -> Built:
    """Build candidate *wire* of the pickled task in this worker thread's build process."""
    pool = getattr(_pools, "pool", None)
    if pool is None:
        pool = _pools.pool = B.BuildPool(1, B.BACKGROUND_NICE)
        with _lock:
            _all_pools.append(pool)
    try:
        result = pool.build_all(task_bytes, [wire], timeout)[0]
    except BaseException as exc:   # noqa: BLE001 -- e.g. the build process did not start
        pool.close(grace=0)
        result = B.BuildResult(MeasureErrorNo.UNKNOWN_ERROR,
                               f"the build process could not be used: {exc!r}", 0.0)
    return Built(result, _address())


# runs -------------------------------------------------------------------------------------------

class _JobRunner:
    """One job's runner process on this worker; ``lock`` is held while it measures."""

    def __init__(self, runner):
        self.runner = runner
        self.lock = threading.Lock()
        self.dropped = False

    def stop(self):
        self.runner.stop(grace=1.0)


def _job_runner(job: RunJob, ref_pk) -> _JobRunner | None:
    """*job*'s runner (made, not started, on its first candidate here; the least recently
    used beyond :data:`MAX_JOBS` are stopped); None if the job was closed."""
    with _lock:
        if job.job in _dropped:
            return None
        jr = _jobs.get(job.job)
        if jr is None:
            jr = _jobs[job.job] = _JobRunner(R.Runner(ref_pk, job.opts, job.setup_timeout))
        _jobs.move_to_end(job.job)
        old = [_jobs.pop(k) for k in list(_jobs)[:-MAX_JOBS]]
    for o in old:
        _stop_when_idle(o)
    return jr


def _stop_when_idle(jr: _JobRunner):
    """Stop *jr*'s runner now if it is idle, else when its current measurement ends."""
    jr.dropped = True
    if jr.lock.acquire(blocking=False):
        try:
            jr.stop()
        finally:
            jr.lock.release()


def run(job: RunJob, ref: Built, built: Built):
    """Check and time one built candidate on this worker's runner for *job*: a
    :class:`~.measure.MeasureResult` (an error result naming this worker if anything fails)."""
    where = _address()
    b = built.result
    if b.status != MeasureErrorNo.NO_ERROR:
        return MeasureResult((), b.status, f"{job.label}: built on worker {built.worker}:\n"
                             f"{b.payload}", b.seconds, time.time(), built.worker)
    jr = _job_runner(job, ref.result.payload)
    if jr is None:
        return MeasureResult((), MeasureErrorNo.UNKNOWN_ERROR,
                             f"{job.label}: its job was closed before worker {where} could "
                             "measure it; nothing was measured", b.seconds, time.time(), where)
    with jr.lock:
        try:
            if not jr.runner.alive():
                with _deployed_environ():
                    jr.runner.start()
            return run_candidate(jr.runner, job.label, job.fault_index, b, job.timeout,
                                 where=where)
        except BaseException as exc:   # noqa: BLE001 -- e.g. the reference setup failed
            jr.runner.kill()
            return MeasureResult((), MeasureErrorNo.RUNTIME_ERROR,
                                 f"{job.label}: the runner on worker {where} could not measure "
                                 f"it: {exc}", b.seconds, time.time(), where)
        finally:
            if jr.dropped:
                jr.stop()


def drop_job(job: str) -> bool:
    """Stop *job*'s runner on this worker (for ``client.run`` when the job closes); a run of
    the job that comes later starts no runner (see the module docstring).  True if it had one."""
    with _lock:
        jr = _jobs.pop(job, None)
        _dropped[job] = None
        while len(_dropped) > MAX_DROPPED:
            _dropped.popitem(last=False)
    if jr is not None:
        _stop_when_idle(jr)
    return jr is not None


def child_pids() -> dict:
    """``{"runners": [pids], "builders": [pids]}``: the processes einloop started in this
    worker (for ``client.run``: tests and diagnostics)."""
    with _lock:
        return {"runners": [jr.runner.pid for jr in _jobs.values() if jr.runner.pid is not None],
                "builders": [pid for pool in _all_pools for pid in pool.pids()]}


def shutdown():
    """Stop every process einloop started in this worker (when the worker closes: a worker
    process that still has children when it exits waits for them)."""
    with _lock:
        pools, _all_pools[:] = list(_all_pools), []
        jobs = list(_jobs.values())
        _jobs.clear()
    for jr in jobs:
        _stop_when_idle(jr)
    for pool in pools:
        pool.close(grace=1.0)
    return True


def cleanup_plugin():
    """A Dask worker plugin that calls :func:`shutdown` when its worker closes (registered by
    the client under one name, so once per cluster)."""
    from distributed import WorkerPlugin

    class EinloopCleanup(WorkerPlugin):
        name = "einloop-cleanup"

        def teardown(self, worker):
            # also called when a later job registers the plugin again: then nothing closes
            if "clos" in str(getattr(worker, "status", "closing")):
                shutdown()

    return EinloopCleanup()
