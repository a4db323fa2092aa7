"""Measuring on a Dask cluster: builds on any worker, timings on the workers that hold the
``einloop-runner`` resource.

    option = measure_option(number=5, repeat=3, timeout=10, cluster=Client("tcp://host:8786"))
    XGBTuner(task).tune(2000, measure_option=option, callbacks=[log_to_file(log)])

:class:`ClusterMeasurer` has the interface of :class:`~.measure.Measurer`, so every tuner works
unchanged.  Each candidate becomes two Dask tasks: a build (:func:`.cluster_worker.build`, in a
child process of a worker, preferably one without the runner resource, so that a run never
queues behind a build) and a run that depends on it (:func:`.cluster_worker.run`, with
``resources={"einloop-runner": 1}``: one timing at a time per runner worker, in a runner process
the worker keeps for the job).  The scheduler moves each build
to its runner; the client only submits and collects.  Candidates the tuner will propose next
(``lookahead``) are submitted at once, so the cluster builds and times them while the tuner
learns from the batch before.

Target: the code is built for the CPU of the machines that time it.  At start the runner workers
report their host target; the task's target must be one of them (runners of another CPU are left
out with a warning; none of the task's CPU is a TuningError naming :func:`cluster_target`, the
target to create the task with).  Builds get the task pinned to that full target string, so a
build worker of another CPU still builds for the runners; records keep the task's target and CPU,
which are the runners'.

Failures: what a candidate does (crash, hang, OOM, wrong answer) is an error result made on the
worker, with its address.  A worker lost mid-job (``KilledWorker``, a lost connection, a
cancelled future) costs its candidates one resubmission each, then an ``UNKNOWN_ERROR`` naming
the worker.  Every wait has a deadline, so a stalled cluster is an error result, never a hang,
and a job whose runner workers are all gone ends with a TuningError within seconds.
``dask``/``distributed`` are imported only here and in the worker module, only when used.
"""
from __future__ import annotations

import asyncio
from collections import Counter
import hashlib
import pickle
import time
import uuid
import warnings
import weakref

from ....errors import EinloopWarning, TuningError
from . import worker as W
from .check import check_cluster, distributed_module
from ..common import (STAT_KEYS, MeasureOption, MeasureResult, MeasurerBase, measure_option,
                      reference_failed, runner_options)
from ..status import MeasureErrorNo

__all__ = ["ClusterMeasurer", "ClusterWarning", "check_cluster", "cluster_target",
           "RUNNER_RESOURCE"]

RUNNER_RESOURCE = "einloop-runner"
START_HINT = (f'start one with  dask worker SCHEDULER_ADDRESS --nworkers 1 --resources '
              f'"{RUNNER_RESOURCE}=1"  on each machine whose times count')
CONNECT_TIMEOUT = 30.0          # seconds to reach the scheduler
SETUP_S = 60.0                  # seconds a (re)started runner may take to set up the reference
MARGIN_S = 30.0                 # slack on every wait for the cluster's own delays
POLL_S = 5.0                    # while a result is late, check this often that runners are left


class ClusterWarning(EinloopWarning):
    """Runner workers were left out (another CPU than the task's target)."""


def _connect(cluster):
    """``(client, owned)``: *cluster*'s Client, or a new one for an address (owned: closed with
    the measurer)."""
    distributed = distributed_module()
    if isinstance(cluster, distributed.Client):
        if cluster.status not in ("running", "connecting", "newly-created"):
            raise TuningError(f"measure_option: the distributed.Client is {cluster.status}; "
                              "pass an open Client")
        return cluster, False
    try:
        return distributed.Client(cluster, timeout=CONNECT_TIMEOUT, set_as_default=False), True
    except (OSError, TimeoutError, ValueError) as exc:
        raise TuningError(f"cannot reach the Dask scheduler at {cluster!r} within "
                          f"{CONNECT_TIMEOUT:g} s ({exc}); start it with  dask scheduler  and "
                          "pass the address it prints") from None


def _workers(client) -> dict:
    """``{address: info}`` of every worker the scheduler knows now."""
    try:
        return client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:           # distributed before 2025 lists every worker unasked
        return client.scheduler_info()["workers"]


def _runner_addresses(client) -> list:
    """The workers holding the runner resource; TuningError if there is none."""
    workers = _workers(client)
    runners = [a for a, w in workers.items()
               if (w.get("resources") or {}).get(RUNNER_RESOURCE, 0) >= 1]
    if not runners:
        have = f"{len(workers)} worker(s), but" if workers else "no worker left:"
        raise TuningError(f"the Dask cluster at {client.scheduler.address} has {have} none "
                          f"holds the {RUNNER_RESOURCE!r} resource, so no machine would time "
                          f"candidates; {START_HINT}")
    return runners


def _runner_targets(client) -> dict:
    """``{worker address: host info}`` of the workers holding the runner resource."""
    return client.run(W.host_info, workers=_runner_addresses(client))


def cluster_target(cluster) -> str:
    """The target string of the cluster's runner workers (the most common CPU among them):
    what to pass as ``create_task(..., target=...)`` when the client's CPU differs."""
    check_cluster(cluster)
    client, owned = _connect(cluster)
    try:
        infos = _runner_targets(client)
        return Counter(i["target"] for i in infos.values()).most_common(1)[0][0]
    finally:
        if owned:
            client.close()


def cluster_cores(cluster, target=None) -> int:
    """The threads a tuned kernel's parallel loops get on the cluster's runner workers of
    *target* (default: the most common CPU among them), the fewest if they differ: what the
    auto-scheduler aims its parallel loops at when it measures there."""
    check_cluster(cluster)
    client, owned = _connect(cluster)
    try:
        infos = list(_runner_targets(client).values())
        target = target or Counter(i["target"] for i in infos).most_common(1)[0][0]
        cores = [i["cores"] for i in infos if i["target"] == target]
        if not cores:
            raise TuningError(f"no runner worker of the cluster has the CPU {target!r}; the "
                              f"runners have {sorted({i['target'] for i in infos})}")
        return min(cores)
    finally:
        if owned:
            client.close()


def _pinned(task):
    """*task* with its target string fixed to the full target (CPU, features), so that a build
    worker of another CPU builds for the runners; the same object if it is fixed already."""
    if task.target_spec == task.target:
        return task
    pinned = object.__new__(type(task))         # no __init__: nothing is collected again
    pinned.__dict__.update(task.__dict__)
    pinned.target_spec = task.target
    return pinned


class _Submission:
    """A candidate submitted to the cluster: its futures and how often it was submitted."""
    __slots__ = ("candidate", "build", "run", "tries", "t0")

    def __init__(self, candidate, build, run, tries):
        self.candidate, self.build, self.run, self.tries = candidate, build, run, tries
        self.t0 = time.monotonic()

    def cancel(self):
        for f in (self.run, self.build):
            try:
                f.cancel()
            except Exception:       # noqa: BLE001 -- the client may be gone already
                pass


def _numbered(candidates) -> list:
    """``[((key, n), candidate)]``: each candidate with how many times its key came before."""
    seen, out = {}, []
    for c in candidates:
        n = seen.get(c.key, 0)
        seen[c.key] = n + 1
        out.append(((c.key, n), c))
    return out


class ClusterMeasurer(MeasurerBase):
    """Builds, checks and times candidates of one task on a Dask cluster; a context manager
    with :class:`~..local.Measurer`'s interface.

    Creating it connects (an address: a Client it owns), finds the runner workers (TuningError
    if there are none, or none of the task's CPU) and builds the reference candidate on the
    cluster (TuningError if that fails).  ``close()`` cancels what is in flight, stops this
    job's runner processes on the workers and closes an owned Client; the cluster stays up.
    """

    def __init__(self, task, option: MeasureOption | None = None):
        option = option or measure_option()
        if not isinstance(option, MeasureOption) or option.cluster is None:
            raise TuningError("ClusterMeasurer: option must come from "
                              "measure_option(..., cluster=CLIENT_OR_ADDRESS)")
        self.task, self.option = task, option
        self.stats = dict.fromkeys(STAT_KEYS, 0.0)     # on a cluster: only build_wait, the
                                                        # client's seconds waiting for results
        # (candidate key, occurrence in its batch) -> _Submission, in submission order: a candidate
        # listed twice in a batch (repeated measurements) is run twice
        self._flights = {}
        self._client, owned = _connect(option.cluster)
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_client, self._client if owned else None)
        self._start_or_close()

    def _start(self):
        o, task = self.option, self.task
        self._find_runners()
        # workers stop einloop's processes when they close (else closing waits for them)
        self._client.register_plugin(W.cleanup_plugin(), name="einloop-cleanup")
        try:
            self._task_bytes = pickle.dumps(_pinned(task))
        except Exception as exc:
            raise TuningError(f"ClusterMeasurer: task {task!r} cannot be pickled for the "
                              f"workers: {exc}") from None
        opts = runner_options(o)
        digest = hashlib.sha256(self._task_bytes + repr(sorted(opts.items())).encode())
        self._job = f"{digest.hexdigest()[:16]}-{uuid.uuid4().hex[:8]}"
        self._opts = opts
        ref_timeout = max(o.effective_build_timeout, SETUP_S)
        self._ref = self._client.submit(W.build, self._task_bytes, None, ref_timeout,
                                        pure=False, key=f"einloop-ref-{self._job}")
        try:
            built = self._ref.result(timeout=ref_timeout + SETUP_S + MARGIN_S)
        except Exception as exc:    # noqa: BLE001 -- lost worker, timeout, ...
            raise TuningError(f"the reference candidate of {task!r} could not be built on the "
                              f"cluster: {exc!r}") from None
        if built.result.status != MeasureErrorNo.NO_ERROR:
            raise reference_failed(task, built.result.payload, built.worker)

    def _find_runners(self):
        """The runner workers of the task's CPU (``self.runners``); see the module docstring."""
        infos = _runner_targets(self._client)
        self.runners = sorted(a for a, i in infos.items() if i["target"] == self.task.target)
        if not self.runners:
            kinds = sorted({i["target"] for i in infos.values()})
            raise TuningError(
                f"no runner worker has the CPU of {self.task!r} (target "
                f"{self.task.target!r}); the runners have {kinds}. Create the task with "
                "target=autotune.cluster_target(client), so that candidates are "
                "built for and measured on the runners' CPU")
        others = sorted(set(infos) - set(self.runners))
        self._restrict = bool(others)   # else any runner, including ones that join later
        # builds prefer the workers that time nothing, so a run never queues behind a build
        # (they still build where no such worker is left)
        self.builders = sorted(set(_workers(self._client)) - set(infos))
        if others:
            warnings.warn(f"runner workers {others} have another CPU than the task's target "
                          f"{self.task.target!r}; they time no candidate of this job",
                          ClusterWarning, stacklevel=3)

    # lifetime -----------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self):
        """Cancel what is in flight, stop this job's runners, close an owned Client
        (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for f in self._flights.values():
            f.cancel()
        self._flights.clear()
        try:
            ref = getattr(self, "_ref", None)
            if ref is not None:
                ref.cancel()
            if hasattr(self, "_job"):      # on the workers there are now (a lost one is slow)
                self._client.run(W.drop_job, self._job, on_error="ignore")
        except Exception:           # noqa: BLE001 -- the cluster may be gone: nothing to stop
            pass
        self._finalizer()

    @property
    def client(self):
        return self._client

    @property
    def n_runners(self) -> int:
        """Runner workers timing this job's candidates (the tuner sizes batches by it)."""
        return len(self.runners)

    def progress(self) -> dict:
        """``{"workers busy": "busy/all"}`` for the tuner's progress bar."""
        try:
            processing = self._client.processing()
        except Exception:           # noqa: BLE001 -- the bar must not fail the job
            return {}
        busy = sum(1 for keys in processing.values() if keys)
        return {"workers busy": f"{busy}/{len(processing)}"}

    # measuring ----------------------------------------------------------------------------------
    def measure_batch(self, candidates, lookahead=()) -> list:
        """One :class:`~.measure.MeasureResult` per candidate, in order (see
        :meth:`.measure.Measurer.measure_batch`); *lookahead* is submitted right away too."""
        if self._closed:
            raise TuningError("this ClusterMeasurer is closed")
        candidates = [self.task.candidate(c) for c in candidates]
        lookahead = [self.task.candidate(c) for c in lookahead]
        try:
            wanted = _numbered(candidates + lookahead)
            self._want(wanted)
            results, last = [], time.monotonic()
            for fid, c in wanted[:len(candidates)]:
                results.append(self._collect(fid, c, last))
                last = time.monotonic()
            return results
        except BaseException:
            self.close()            # interrupted: leave nothing running for this job
            raise

    def _want(self, wanted):
        """Submit what is not in flight; cancel flights no longer wanted (as BuildPool.want).
        *wanted*: ``[(flight id, candidate)]``."""
        ids = {fid for fid, _ in wanted}
        for fid in [f for f in self._flights if f not in ids]:
            self._flights.pop(fid).cancel()
        for fid, c in wanted:
            if fid not in self._flights:
                self._flights[fid] = self._submit(c, tries=1)

    def _submit(self, candidate, tries):
        o = self.option
        build = self._client.submit(W.build, self._task_bytes, candidate.wire,
                                    o.effective_build_timeout, pure=False,
                                    key=f"einloop-build-{uuid.uuid4().hex}",
                                    workers=self.builders or None,
                                    allow_other_workers=bool(self.builders))
        job = W.RunJob(self._job, self._opts, o.timeout, SETUP_S + o.timeout, candidate.label,
                       candidate.fault_index)
        run = self._client.submit(W.run, job, self._ref, build, pure=False,
                                  key=f"einloop-run-{uuid.uuid4().hex}",
                                  resources={RUNNER_RESOURCE: 1},
                                  workers=self.runners if self._restrict else None)
        return _Submission(candidate, build, run, tries)

    @property
    def wait_limit(self) -> float:
        """Seconds to wait for one result after the one before: its build, a runner restart
        and its run, and slack."""
        o = self.option
        return o.effective_build_timeout + SETUP_S + 2 * o.timeout + MARGIN_S

    def _collect(self, fid, candidate, since) -> MeasureResult:
        flight = self._flights.pop(fid)
        t0 = time.monotonic()
        limit = self.wait_limit
        try:
            result = self._await(flight.run, t0 + max(limit - (t0 - max(since, flight.t0)), 1.0))
        except TimeoutError:
            flight.cancel()
            return self._failed(candidate, t0, f"no result from the cluster within {limit:g} s "
                                "(build, runner start and run); its tasks were cancelled")
        except TuningError:             # no runner left: the job cannot go on
            flight.cancel()
            raise
        except (Exception, asyncio.CancelledError) as exc:  # KilledWorker, CommError, cancelled
            flight.cancel()
            where = _worker_of(exc)
            if flight.tries < 2 and not self._closed:
                self._flights[fid] = self._submit(candidate, flight.tries + 1)
                self._refresh_runners()
                return self._collect(fid, candidate, time.monotonic())
            return self._failed(candidate, t0, f"lost twice ({type(exc).__name__}: {exc}; "
                                f"last worker {where})", where)
        finally:
            self.stats["build_wait"] += time.monotonic() - t0
        if not isinstance(result, MeasureResult):
            return self._failed(candidate, t0, f"the worker sent {type(result).__name__}, not a "
                                "MeasureResult")
        return result

    def _await(self, future, deadline):
        """*future*'s result by *deadline* (TimeoutError after it); while it takes longer than
        :data:`POLL_S`, check that a runner worker is left (TuningError if not: no wait for
        the deadline when nothing can ever answer)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                return future.result(timeout=min(POLL_S, left))
            except TimeoutError:
                _runner_addresses(self._client)

    def _refresh_runners(self):
        """After a lost worker: runners a nanny restarted have new addresses."""
        if self._restrict:
            try:
                self._find_runners()
            except TuningError:
                pass

    def _failed(self, candidate, t0, why, where=""):
        return MeasureResult((), MeasureErrorNo.UNKNOWN_ERROR, f"{candidate.label}: {why}",
                             time.monotonic() - t0, time.time(), where)

    def __repr__(self):
        state = "closed" if self._closed else f"{len(self.runners)} runner(s)"
        return f"<ClusterMeasurer {self.task!r} on {self._client.scheduler.address} {state}>"


def _worker_of(exc) -> str:
    """The worker a Dask failure names, if it names one."""
    w = getattr(exc, "last_worker", None)
    return getattr(w, "address", None) or (str(w) if w else "unknown")


def _close_client(client):
    if client is not None:
        try:
            client.close()
        except Exception:           # noqa: BLE001 -- closing at exit must not raise
            pass
