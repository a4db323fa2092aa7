"""What a Dask worker does for a cluster job (einloop.autotune.measure.cluster.worker), called in
this process: no cluster, no runner process (tests/autotune/test_cluster.py runs the real one)."""
import uuid

from einloop.autotune.measure import builder as B
from einloop.autotune.measure.cluster import worker as W
from einloop.autotune.measure.status import MeasureErrorNo as E


def _run_job(key):
    return W.RunJob(key, {}, timeout=1.0, setup_timeout=1.0, label="candidate 7",
                    fault_index=7)


def test_a_run_of_a_closed_job_measures_nothing_and_starts_no_runner(monkeypatch):
    """Dask cancels a closed job's queued runs, but a worker can take one from its queue before
    the cancellation arrives: that run must not start a runner that nothing would stop."""
    monkeypatch.setattr(W, "_address", lambda: "tcp://10.0.0.7:4000")     # as in a worker
    key = f"closed-{uuid.uuid4().hex}"
    built = W.Built(B.BuildResult(E.NO_ERROR, None, 0.25), "builder")
    assert W.drop_job(key) is False                 # this worker never ran the job
    result = W.run(_run_job(key), built, built)
    assert result.error_no == E.UNKNOWN_ERROR
    assert result.error_msg.startswith("candidate 7: its job was closed before worker "
                                       "tcp://10.0.0.7:4000 could measure it")
    assert result.all_cost == 0.25 and result.machine == "tcp://10.0.0.7:4000"
    assert key not in W._jobs                       # no runner was made for it


def test_a_worker_remembers_a_bounded_number_of_closed_jobs():
    keys = [f"closed-{uuid.uuid4().hex}" for _ in range(W.MAX_DROPPED + 1)]
    for key in keys:
        W.drop_job(key)
    assert keys[0] not in W._dropped and all(k in W._dropped for k in keys[1:])
    assert len(W._dropped) == W.MAX_DROPPED
