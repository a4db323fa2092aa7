"""Builds overlap with measurements: the next candidates build while earlier ones are checked
and timed, and the build workers are stopped (SIGSTOP) while a candidate is timed.

Real build workers and a real runner throughout: slow builds sleep for real, crashes are real
signals, and the workers' states (running, sleeping, stopped) are read from /proc.
"""
import os
import signal
import threading
import time

import pytest

import measure_templates as mt          # importable by name in the build workers
import tiny_templates  # noqa: F401      (registers tiny_matmul)
from einloop import autotune
from einloop.autotune.log import record
from einloop.autotune.measure.common import MeasureErrorNo as E, measure_option
from einloop.autotune.measure.local import Measurer
from einloop.autotune.measure.runner import FAULT_ENV
from einloop.autotune.task.create import create_task
from einloop.autotune.search.tuner import Tuner

from test_measure import _assert_gone, _children

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


@pytest.fixture(scope="module")
def task():
    return create_task("measure_test_gemm", (mt.N,))


def idx(task, **choices):
    return mt.config_index(task, **choices)


def codes(results):
    return [r.error_no for r in results]


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


class StateWatch:
    """Samples the build workers' process states in a thread while a block runs."""

    def __init__(self, measurer):
        self.pids = measurer.child_pids()["builders"]
        self.seen = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.seen |= {_state(p) for p in self.pids}
            time.sleep(0.001)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _no_worker_stopped(measurer):
    return all(_state(p) not in ("T", "t") for p in measurer.child_pids()["builders"])


class ListTuner(Tuner):
    """Proposes a fixed list of configs in order, and says what comes next (``peek_next``)."""

    def __init__(self, task, indices):
        super().__init__(task)
        self.todo = list(indices)

    def next_batch(self, n):
        out, self.todo = self.todo[:n], self.todo[n:]
        return [self.space.get(i) for i in out]

    def peek_next(self, n):
        return [self.space.get(i) for i in self.todo[:n]]

    def has_next(self):
        return bool(self.todo)


# the tuning job --------------------------------------------------------------------------------

def test_a_job_records_the_same_results_with_and_without_overlap(task, tmp_path, monkeypatch):
    segfault = idx(task, tile_i=[-1, 1], tile_j=[-1, 1])
    monkeypatch.setenv(FAULT_ENV, f"segfault:{segfault}")
    order = [idx(task, tile_i=[-1, 4], tile_j=[-1, 8]), idx(task, add=1.0),
             idx(task, mode="bad_schedule"), segfault, idx(task, tile_i=[-1, 2]),
             idx(task, mode="crash_build"), idx(task, tile_j=[-1, 16]),
             idx(task, tile_i=[-1, 8], tile_j=[-1, 2]), idx(task, tile_i=[-1, 2], tile_j=[-1, 2]),
             idx(task, tile_i=[-1, 2], tile_j=[-1, 4])]
    jobs = {}
    for overlap in (False, True):
        log = tmp_path / f"overlap_{overlap}.jsonl"
        tuner = ListTuner(task, order)
        tuner.batch_size = 4
        tuner.tune(len(order), measure_option=measure_option(
            number=2, repeat=2, timeout=10, n_parallel=2, overlap=overlap),
            callbacks=[autotune.log_to_file(str(log))], quiet=True)
        jobs[overlap] = ([(c.index, r.error_no) for c, r in tuner.history],
                         [(r.index, r.error_no) for r in record.load(log)])
    expected = [E.NO_ERROR, E.WRONG_ANSWER, E.INSTANTIATION_ERROR, E.RUNTIME_ERROR, E.NO_ERROR,
                E.COMPILE_ERROR, E.NO_ERROR, E.NO_ERROR, E.NO_ERROR, E.NO_ERROR]
    assert jobs[True] == jobs[False]
    history, logged = jobs[True]
    assert history == logged == list(zip(order, expected))      # records in order


@pytest.mark.parametrize("cls", [autotune.XGBTuner, autotune.GATuner, autotune.GridSearchTuner])
def test_peek_next_is_what_the_next_batch_proposes(cls):
    """Peeking must not change what the tuner proposes (same seed, same batches)."""
    task = create_task("tiny_matmul", (16, 32, 8))   # (the XGBTuner instantiates configs here)
    kw = {"population": 16, "generations": 1} if cls is autotune.XGBTuner else {}
    peeking, plain = cls(task, seed=3, **kw), cls(task, seed=3, **kw)
    for _ in range(3):
        batch = peeking.next_batch(4)
        assert [c.index for c in batch] == [c.index for c in plain.next_batch(4)]
        ahead = peeking.peek_next(4)
        assert [c.index for c in ahead] == [c.index for c in peeking.peek_next(4)]
        for t in (peeking, plain):
            t.visited |= {c.index for c in batch}
        following = peeking.next_batch(4)
        assert [c.index for c in following[:len(ahead)]] == [c.index for c in ahead]
        assert [c.index for c in following] == [c.index for c in plain.next_batch(4)]
        for t in (peeking, plain):
            t.visited |= {c.index for c in following}
    assert autotune.RandomTuner(task).peek_next(4) == []            # knows nothing ahead


# pausing ---------------------------------------------------------------------------------------

def test_builds_are_stopped_while_a_candidate_is_timed_and_resumed_after(task):
    """A slow build in the lookahead is in flight while the batch is timed: its worker is seen
    stopped, runs again afterwards, and its build timeout does not count the paused time."""
    option = measure_option(number=1, repeat=3, min_repeat_ms=150, timeout=10, build_timeout=4,
                            n_parallel=2)
    ok = [idx(task, tile_i=[-1, 4]), idx(task, tile_j=[-1, 4]), idx(task, tile_i=[-1, 2])]
    slow = idx(task, mode="slow_build")
    with Measurer(task, option) as m:
        with StateWatch(m) as watch:
            res = m.measure_batch(ok[:2], lookahead=[slow, ok[2]])
        assert codes(res) == [E.NO_ERROR, E.NO_ERROR]
        assert "T" in watch.seen                       # a worker was stopped during timing
        assert _no_worker_stopped(m) and m.stats["paused"] > 0.4
        assert m.stats["timing"] >= 2 * 3 * 0.15 and m.stats["build"] > 0
        res = m.measure_batch([slow, ok[2]])
        assert codes(res) == [E.COMPILE_TIMEOUT, E.NO_ERROR]
        assert res[0].error_msg.startswith("build timed out")
        assert 4 <= res[0].all_cost < 4 + 3             # paused time is not build time
        assert _no_worker_stopped(m)


def test_a_run_timeout_while_builds_are_stopped_resumes_them(task):
    """The runner is killed in the middle of its timed calls (the slow kernel is not checked,
    so its first call is a timed one) while the builds are stopped: they go on afterwards."""
    option = measure_option(number=1, repeat=1, timeout=2, build_timeout=6, n_parallel=2,
                            check_correctness=False)
    slow_run, slow_build = idx(task, mode="slow_run"), idx(task, mode="slow_build")
    ok = idx(task, tile_i=[-1, 8])
    with Measurer(task, option) as m:
        runner = m.child_pids()["runner"]
        with StateWatch(m) as watch:
            res = m.measure_batch([slow_run], lookahead=[slow_build, ok])
        assert codes(res) == [E.TIMEOUT] and "killed" in res[0].error_msg
        assert "T" in watch.seen and m.stats["paused"] > 0     # killed while they were stopped
        assert _no_worker_stopped(m)
        res = m.measure_batch([ok, slow_build])
        assert codes(res) == [E.NO_ERROR, E.COMPILE_TIMEOUT]
        assert m.child_pids()["runner"] != runner


def test_ctrl_c_while_builds_are_stopped_leaves_no_process(task):
    before = _children()
    option = measure_option(number=1, repeat=1, timeout=60, n_parallel=2,
                            check_correctness=False)
    m = Measurer(task, option)
    pids = m.child_pids()
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    with StateWatch(m) as watch:
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                m.measure_batch([idx(task, mode="slow_run")],
                                lookahead=[idx(task, mode="slow_build")])
        finally:
            timer.cancel()
    assert "T" in watch.seen                           # interrupted while they were stopped
    assert m.closed
    _assert_gone([pids["runner"], *pids["builders"]], before)


def test_without_parent_death_signal_builds_wait_instead_of_being_stopped(task):
    """A Measurer started from a short-lived thread has no parent-death signal for its workers
    (a stopped worker could then outlive a killed job): running builds finish before a timing
    and none starts during it; nothing is ever stopped."""
    box = {}
    starter = threading.Thread(target=lambda: box.setdefault("m", Measurer(task, measure_option(
        number=1, repeat=3, min_repeat_ms=50, n_parallel=2))))
    starter.start()
    starter.join()
    m = box["m"]
    ok = [idx(task, tile_i=[-1, n]) for n in (2, 4, 8, 16)]
    try:
        with StateWatch(m) as watch:
            res = m.measure_batch(ok[:2], lookahead=ok[2:]) + m.measure_batch(ok[2:])
        assert codes(res) == [E.NO_ERROR] * 4
        assert "T" not in watch.seen and m.stats["paused"] == 0
    finally:
        m.close()


# failures during overlap -----------------------------------------------------------------------

def test_crashes_and_hangs_during_overlap_are_recorded(task, monkeypatch):
    """A runner segfault and hang, and a build worker crash in the lookahead (while the runner
    is busy), each recorded against the right candidate; the others measured normally."""
    segfault, hang = idx(task, tile_i=[-1, 1], tile_j=[-1, 1]), idx(task, tile_i=[-1, 1],
                                                                     tile_j=[-1, 2])
    monkeypatch.setenv(FAULT_ENV, f"segfault:{segfault},hang:{hang}")
    ok = [idx(task, tile_i=[-1, n]) for n in (2, 4, 8, 16)]
    crash = idx(task, mode="crash_build")
    with Measurer(task, measure_option(number=2, repeat=2, timeout=5, build_timeout=20,
                                       n_parallel=2)) as m:
        first = m.measure_batch([ok[0], segfault, ok[1]], lookahead=[crash, ok[2]])
        second = m.measure_batch([crash, ok[2], hang, ok[3]])
        assert _no_worker_stopped(m)
    assert codes(first) == [E.NO_ERROR, E.RUNTIME_ERROR, E.NO_ERROR]
    assert "SIGSEGV" in first[1].error_msg
    assert codes(second) == [E.COMPILE_ERROR, E.NO_ERROR, E.TIMEOUT, E.NO_ERROR]
    assert "build worker process died" in second[0].error_msg
    assert "timeout=5 s" in second[2].error_msg
