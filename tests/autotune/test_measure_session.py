"""One set of measuring processes for the tasks of a job (``autotune.shared_processes``): the
second task is measured by the first task's build workers and runner, against its own
reference, and leaving the block stops them."""
import os

import pytest

import dag_ops
from einloop import autotune
from einloop.autotune.measure.common import MeasureErrorNo, measure_option
from einloop.autotune.measure.open import open_measurer
from einloop.autotune.measure.session import current_session
from einloop.autotune.space.candidate import StepsCandidate
from einloop.autotune.task.create import create_task
from einloop.schedule.steps import Step

OPTION = measure_option(number=1, repeat=1, timeout=20, n_parallel=2)
SPLIT = StepsCandidate((Step("split", "C", {"axis": "i", "factor": 4}),))


def alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                                # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pids(m):
    p = m.child_pids()
    return [p["runner"], *p["builders"]]


def test_tasks_of_a_block_share_the_processes_and_each_is_checked_against_its_own_reference():
    small, large = (create_task(dag_ops.scaled_relu, (n,)) for n in (64, 96))
    with autotune.shared_processes():
        with open_measurer(small, OPTION) as m:
            first = pids(m)
            # the split is built for 64 in the background, then asked for at 96: the same
            # step list is another kernel there, checked against the 96 reference
            r = m.measure_batch([StepsCandidate(())], lookahead=[SPLIT])
        assert r[0].error_no is MeasureErrorNo.NO_ERROR and not m.closed
        with open_measurer(large, OPTION) as m2:
            assert m2 is m and m.task is large and pids(m2) == first
            r = m2.measure_batch([SPLIT, StepsCandidate(())])
        assert [x.error_no for x in r] == [MeasureErrorNo.NO_ERROR] * 2, r
        assert all(alive(p) for p in first)
    assert current_session() is None and m.closed
    assert not any(alive(p) for p in first)


def test_another_measure_option_starts_other_processes():
    task = create_task(dag_ops.scaled_relu, (64,))
    with autotune.shared_processes():
        with open_measurer(task, OPTION) as m:
            first = pids(m)
        other = measure_option(number=2, repeat=1, timeout=20, n_parallel=2)
        with open_measurer(task, other) as m2:
            assert m2 is not m and m.closed and not any(alive(p) for p in first)
            r = m2.measure_batch([StepsCandidate(())])
        assert r[0].error_no is MeasureErrorNo.NO_ERROR
    assert m2.closed


def test_an_exception_in_a_borrowing_block_stops_the_processes():
    task = create_task(dag_ops.scaled_relu, (64,))
    with autotune.shared_processes():
        with pytest.raises(KeyboardInterrupt):
            with open_measurer(task, OPTION) as m:
                first = pids(m)
                raise KeyboardInterrupt
        assert m.closed and not any(alive(p) for p in first)
        with open_measurer(task, OPTION) as m2:      # the next task gets new ones
            assert m2 is not m
            assert m2.measure_batch([SPLIT])[0].error_no is MeasureErrorNo.NO_ERROR


def test_tuners_in_a_block_log_what_they_would_log_alone(tmp_path):
    tasks = [create_task(dag_ops.scaled_relu, (n,)) for n in (64, 96, 128)]
    log = str(tmp_path / "three.jsonl")
    measured = 0
    with autotune.shared_processes():
        for t in tasks:
            tuner = autotune.RandomTuner(t)
            tuner.tune(4, measure_option=OPTION, callbacks=[autotune.log_to_file(log)],
                       quiet=True)
            assert tuner.best_config is not None
            measured += tuner.measured + tuner.rechecked    # a small space is measured again
    records = autotune.load_log(log)
    assert len(records) == measured >= 6 and all(r.ok for r in records)
    assert len({r.workload for r in records}) == 3
