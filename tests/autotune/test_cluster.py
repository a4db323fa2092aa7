"""Tuning on a real Dask cluster (a LocalCluster of worker processes; no mocks).

One cluster of two runner workers serves the module; the test that SIGKILLs a worker runs last
(its nanny starts a new one), and the fixture checks that nothing the tests started outlives it.
"""
import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

distributed = pytest.importorskip("distributed")

import tiny_templates                   # noqa: E402  (importable by name in the workers)
from einloop.errors import TuningError  # noqa: E402
from einloop import autotune            # noqa: E402
from einloop.autotune.measure.cluster import worker as cluster_worker
from einloop.autotune.log import record  # noqa: E402
from einloop.autotune.measure.cluster.client import ClusterMeasurer  # noqa: E402
from einloop.autotune.measure.common import MeasureErrorNo as E, measure_option  # noqa: E402
from einloop.autotune.measure.runner import FAULT_ENV  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")

HERE = os.path.dirname(tiny_templates.__file__)
ARGS = (16, 32, 8)


def _descendants(root):
    """Live descendants of *root* (pid -> command line), from /proc; zombies are gone."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if fields[0] != "Z":
                procs[int(d)] = (int(fields[1]), cmd)
    found, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, cmd) in procs.items():
            if ppid == parent and pid not in found:
                found[pid] = cmd
                todo.append(pid)
    return found


def _ours(before):
    """Descendants of this process that were not there before (multiprocessing's resource
    tracker, started once per process and shared, excepted)."""
    return {p: c for p, c in _descendants(os.getpid()).items()
            if p not in before and "resource_tracker" not in c}


def _alive(pids):
    return [p for p in pids if os.path.exists(f"/proc/{p}") and _state(p) != "Z"]


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def _environ(pid):
    """The environment process *pid* was started with."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.decode(errors="replace").partition("=")[::2]
                    for item in f.read().split(b"\0") if item)


def _wait_gone(pids, seconds=15):
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


@pytest.fixture(scope="module")
def client():
    before = set(_descendants(os.getpid()))
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       resources={"einloop-runner": 1},
                                       dashboard_address=None, silence_logs=40)
    c = distributed.Client(cluster)
    # both workers registered before the first test: a job sizes its batches by the runners
    # it finds (a second worker still starting made a batch of 2 instead of 4)
    c.wait_for_workers(2, timeout=120)
    try:
        yield c
    finally:
        c.close()
        cluster.close()
    left = list(_ours(before))
    assert not _wait_gone(left), f"processes left behind: {_ours(before)}"


@pytest.fixture
def task():
    return autotune.create_task("tiny_matmul", ARGS)


def _option(client, **kw):
    kw = {"number": 1, "repeat": 2, "timeout": 10, **kw}
    return measure_option(cluster=client, **kw)


def _keys(d, prefix=""):
    """Every key path of a nested dict."""
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict) and k != "config":
            out |= _keys(v, prefix + k + ".")
    return out


def test_a_cluster_job_logs_records_like_a_local_one(client, task, tmp_path):
    local_log, cluster_log = tmp_path / "local.jsonl", tmp_path / "cluster.jsonl"
    autotune.GridSearchTuner(task).tune(3, measure_option=measure_option(number=1, repeat=2),
                                        callbacks=[autotune.log_to_file(local_log)], quiet=True)
    tuner = autotune.GridSearchTuner(task).tune(
        10, measure_option=_option(client), callbacks=[autotune.log_to_file(cluster_log)],
        quiet=True)
    local = [json.loads(line) for line in local_log.read_text().splitlines()]
    remote = [json.loads(line) for line in cluster_log.read_text().splitlines()]
    assert len(remote) == 10 and tuner.best_config is not None
    assert {r["config"]["index"] for r in remote} == set(range(10))
    workers = set(client.scheduler_info(n_workers=-1)["workers"])
    for r in remote:
        # the same form as a local record, plus the worker that measured it
        assert _keys(r) == _keys(local[0]) | {"result.machine"}
        assert r["task"] == local[0]["task"]            # target and CPU: the runners'
        assert r["result"]["error_no"] == 0 and r["result"]["machine"] in workers
        assert len(r["result"]["costs"]) == 2
        assert all(0 < c < 1 for c in r["result"]["costs"])
    loaded = record.load(cluster_log)
    assert all(r.ok and r.machine in workers for r in loaded)
    assert all(r.machine == "" for r in record.load(local_log))   # old form loads unchanged
    assert autotune.pick_best(loaded, task.target)[task.workload_key].ok


def test_batches_hold_at_least_two_candidates_per_runner(client, task):
    tuner = autotune.GridSearchTuner(task)
    tuner.batch_size = 1
    sizes = []
    tuner.tune(8, measure_option=_option(client), quiet=True,
               callbacks=[lambda t, cands, results: sizes.append(len(cands))])
    assert sizes == [4, 4]                  # 2 runners


def test_crash_and_hang_are_errors_naming_the_worker_and_workers_live_on(client, task):
    pids = client.run(os.getpid)
    # a lambda travels by value and acts on the worker's os.environ (a bound method of
    # os.environ would travel with a copy of this process's environment)
    client.run(lambda: os.environ.update({FAULT_ENV: "segfault:1,hang:2"}))
    try:
        # runs time out after 2 s (the hang); builds get their own limit: a build slower than 2 s
        # on a busy machine is not what this test is about
        with ClusterMeasurer(task, _option(client, timeout=2, build_timeout=60)) as m:
            assert m.n_runners == 2
            # builds get the runners' full target string, not "llvm" (the build host's CPU)
            assert pickle.loads(m._task_bytes).target_spec == task.target != task.target_spec
            results = m.measure_batch([0, 1, 2, 3], lookahead=[4, 5])
            assert m.progress()["workers busy"].endswith("/2")
            # a runner that crashed or was killed is started again by the next candidate its
            # worker measures, not at once: the last run of each worker may have been 1 or 2
            # (4 and 5 may have run before them), leaving no runner to look at.  6 and 7 are
            # submitted after 1 and 2 ended, so the workers that measure them have a live one.
            after = m.measure_batch([4, 5, 6, 7])
            children = client.run(cluster_worker.child_pids)
            worker_env = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
            runner_env = [_environ(p) for c in children.values() for p in c["runners"]]
    finally:
        client.run(lambda: os.environ.pop(FAULT_ENV, None))
    assert [r.error_no for r in results] == [E.NO_ERROR, E.RUNTIME_ERROR, E.TIMEOUT, E.NO_ERROR]
    assert "SIGSEGV" in results[1].error_msg
    for r in results[1:3]:
        assert r.machine in pids and f"worker {r.machine}" in r.error_msg
    assert client.run(os.getpid) == pids                # the same two worker processes
    # runners time as a deployed kernel runs, without the settings Dask gives its workers
    # (MALLOC_TRIM_THRESHOLD_ would make every temporary buffer fresh pages on every call)
    assert all(r.ok for r in after)
    assert all(children[r.machine]["runners"] for r in after[2:])
    assert all(worker_env.values()) and runner_env
    assert not any("MALLOC_TRIM_THRESHOLD_" in env for env in runner_env)
    # the job's runner processes were stopped when it closed; build processes stay for reuse
    runners = [p for c in children.values() for p in c["runners"]]
    assert runners and not _wait_gone(runners, 10)


def test_a_build_that_kills_its_process_is_an_error_not_a_dead_worker(client):
    import measure_templates as mt
    task = autotune.create_task("measure_test_gemm", ())
    crash = mt.config_index(task, mode="crash_build")
    pids = client.run(os.getpid)
    with ClusterMeasurer(task, _option(client)) as m:
        ok, bad = m.measure_batch([0, crash])
    assert ok.ok and bad.error_no == E.COMPILE_ERROR
    assert "built on worker tcp://" in bad.error_msg and "died" in bad.error_msg
    assert client.run(os.getpid) == pids


def test_a_lost_run_is_submitted_again_once(client, task):
    from einloop.autotune.measure.cluster.client import _numbered
    with ClusterMeasurer(task, _option(client)) as m:
        wanted = _numbered([task.candidate(0)])
        m._want(wanted)
        client.cancel([m._flights[wanted[0][0]].run])          # as if its worker had vanished
        (result,) = m.measure_batch([0])
        # a candidate listed twice in a batch (repeated measurements) is run twice
        again = m.measure_batch([0, 0])
    assert result.ok and result.machine
    assert len(again) == 2 and all(r.ok for r in again)


def test_a_cluster_without_runners_is_a_clear_error_at_once(task):
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0", silence_logs=40) as cluster, \
            distributed.Client(cluster) as c:
        t0 = time.monotonic()
        with pytest.raises(TuningError, match=r"none holds the 'einloop-runner' resource.*"
                                              r'--resources "einloop-runner=1"'):
            ClusterMeasurer(task, measure_option(cluster=c))
        assert time.monotonic() - t0 < 5


def test_a_job_whose_runners_are_all_gone_says_so_within_seconds(task):
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  resources={"einloop-runner": 1}, dashboard_address=":0",
                                  silence_logs=40) as cluster, \
            distributed.Client(cluster) as c:
        with ClusterMeasurer(task, measure_option(cluster=c)) as m:
            cluster.scale(0)                # gone, as if their machines were switched off
            while c.scheduler_info(n_workers=-1)["workers"]:
                time.sleep(0.05)
            t0 = time.monotonic()
            with pytest.raises(TuningError, match=r"none holds the 'einloop-runner' resource"):
                m.measure_batch([0])
            assert time.monotonic() - t0 < 15


@pytest.mark.parametrize("cluster, match", [
    (42, r"cluster must be None .* a distributed.Client, or a scheduler address"),
    ("nonsense", r"not a scheduler address; expected e.g. 'tcp://"),
])
def test_measure_option_rejects_what_is_not_a_cluster(cluster, match):
    with pytest.raises(TuningError, match=match):
        measure_option(cluster=cluster)


def test_without_distributed_the_error_says_what_to_install():
    code = ("import sys; sys.modules['distributed'] = None\n"     # as if it were not installed
            "import einloop\nfrom einloop import autotune\n"
            "try:\n"
            "    autotune.measure_option(cluster='tcp://127.0.0.1:8786')\n"
            "except einloop.TuningError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert "pip install einloop[distributed]" in out.stdout, out.stderr


def test_runners_of_another_cpu_than_the_task_are_a_clear_error(client):
    task = autotune.create_task("tiny_matmul", ARGS, target="llvm -mcpu=haswell")
    with pytest.raises(TuningError, match=r"no runner worker has the CPU of .*"
                                          r"target=autotune.cluster_target\(client\)"):
        ClusterMeasurer(task, _option(client))
    assert autotune.cluster_target(client) == autotune.create_task("tiny_matmul", ARGS).target


def test_the_cli_tunes_on_the_cluster_it_is_given(client, tmp_path):
    log = tmp_path / "cli.jsonl"
    address = client.scheduler.address
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-m", "einloop", "tune", "tiny_templates:tiny_matmul", "--args",
         *map(str, ARGS), "--trials", "4", "--log", str(log), "--tuner", "grid", "--number", "1",
         "--repeat", "2", "--quiet", "--cluster", address],
        capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "best:" in out.stdout
    workers = set(client.scheduler_info(n_workers=-1)["workers"])
    records = record.load(log)
    assert len(records) == 4
    assert all(r.ok and r.machine in workers for r in records), \
        [(r.error_msg, r.machine) for r in records if not r.ok or r.machine not in workers]


def test_a_symbolic_operator_is_tuned_and_compared_across_sizes_on_the_cluster(client,
                                                                               tmp_path):
    """The hint searches and the side-by-side round of a dynamic job run on the cluster too."""
    root = os.path.dirname(os.path.dirname(HERE))
    log = tmp_path / "dense.jsonl"
    out = subprocess.run(
        [sys.executable, "-m", "einloop", "tune",
         os.path.join(root, "examples", "dense_dynamic.py") + ":dense", "--args", "32", "24",
         "--trials", "28", "--shape-hints", "n=1,4", "--log", str(log), "--number", "1",
         "--repeat", "1", "--quiet", "--cluster", client.scheduler.address],
        capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "nearest of 3 sizes" in out.stdout           # 1, 2, 4
    workers = set(client.scheduler_info(n_workers=-1)["workers"])
    records = record.load(log)
    assert {dict(r.size_point["sizes"])["n"] for r in records} == {1, 2, 4}
    assert any("round" in r.size_point for r in records)
    assert all(r.machine in workers for r in records)


def test_the_cli_says_what_is_wrong_with_a_bad_cluster_address(capsys):
    from einloop.cli import main
    code = main(["tune", "tiny_templates:tiny_matmul", "--args", *map(str, ARGS), "--trials",
                 "2", "--cluster", "nonsense"])
    assert code == 2
    assert "not a scheduler address; expected e.g. 'tcp://" in capsys.readouterr().err


def test_a_worker_killed_mid_job_does_not_stop_it_or_lose_records(client, task, tmp_path):
    log = tmp_path / "killed.jsonl"
    pids = client.run(os.getpid)
    seen = {}

    def kill_after_first_batch(tuner, candidates, results):
        if not seen:                    # the log already holds this batch; the next is in flight
            seen["logged"] = [line for line in log.read_text().splitlines()]
            seen["children"] = client.run(cluster_worker.child_pids)
            victim = sorted(pids)[0]
            seen["victim"] = victim
            os.kill(pids[victim], signal.SIGKILL)

    tuner = autotune.GridSearchTuner(task)
    tuner.tune(24, measure_option=_option(client),
               callbacks=[autotune.log_to_file(log), kill_after_first_batch], quiet=True)
    lines = log.read_text().splitlines()
    # the search's 24, then the fastest few measured again (the confirmation round)
    assert len(lines) == 24 + tuner.confirmed and lines[:len(seen["logged"])] == seen["logged"]
    records = record.load(log)
    failed = [r for r in records if not r.ok]
    assert len(failed) <= 4, failed         # Dask recomputes the lost tasks elsewhere
    assert all(r.error_no == E.UNKNOWN_ERROR and "lost twice" in r.error_msg for r in failed)
    assert seen["victim"] not in client.scheduler_info(n_workers=-1)["workers"]
    assert not _alive([pids[seen["victim"]]])
    # the killed worker's runner and build processes died with it
    orphans = sum(seen["children"][seen["victim"]].values(), [])
    assert orphans and not _wait_gone(orphans, 10)
    client.wait_for_workers(2, timeout=60)      # its nanny started a new one


def test_auto_scheduling_on_a_cluster_aims_at_the_runners_threads(client, monkeypatch):
    """The machine model's cores come from the runner workers, not from this process."""
    from einloop.autotune.measure.cluster.client import cluster_cores
    from einloop.autotune.search.tuner import Tuner
    import auto_ops
    runners = client.run(cluster_worker.host_info,
                         workers=[a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()
                                  if "einloop-runner" in w.get("resources", {})])
    assert cluster_cores(client) == min(i["cores"] for i in runners.values())
    local = cluster_cores(client) + 5           # this process now differs from the runners
    monkeypatch.setenv("EINLOOP_NUM_THREADS", str(local))
    seen = []

    def capture(self, n_trial, measure_option=None, **kw):
        seen.append(self.task.machine.cores)
        raise KeyboardInterrupt          # stop before measuring anything

    monkeypatch.setattr(Tuner, "tune", capture)
    with pytest.raises(KeyboardInterrupt):
        autotune.auto_schedule(auto_ops.gemm(16, 16, 16), n_trial=2, quiet=True,
                               measure_option=_option(client))
    assert seen == [cluster_cores(client)] and seen[0] != local
    assert autotune.create_task(auto_ops.gemm, (16, 16, 16)).machine.cores == local
