"""``autotune.auto_schedule``: tune and log, replay the best in a fresh process without measuring
(also for the operator declared with other names), one warning when nothing is tuned, seeds
measured first, and clear errors for bad arguments."""
import os
import warnings

import pytest

from einloop import TuningError, autotune, te
from einloop.autotune.log import record
from einloop.autotune.task.auto import AutoTask

import auto_ops
import oracle
from isolated import run_isolated

SHAPE = (16, 24, 8)
FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)


@pytest.fixture(scope="module")
def tuned_log(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("auto") / "gemm.jsonl")
    s, args = autotune.auto_schedule(auto_ops.gemm(*SHAPE), n_trial=6, log=log, seed=0,
                                     measure_option=autotune.measure_option(**FAST), quiet=True)
    oracle.check(s, args[:2], args[2:], lambda a, b: [a @ b])
    return log


def test_auto_schedule_tunes_logs_self_contained_records(tuned_log):
    records = record.load(tuned_log)
    assert len(records) == 6 and all(r.ok for r in records)
    task = AutoTask.of_tensors(auto_ops.gemm(*SHAPE))
    assert {r.workload for r in records} == {task.workload_key}
    assert all("config_index" in r.candidate and r.candidate["names"] == task.names
               for r in records)


def test_replay_in_a_fresh_process_measures_nothing_and_matches_numpy(tuned_log):
    best = min((r for r in record.load(tuned_log) if r.ok), key=lambda r: r.mean_cost)
    out = run_isolated(f"""
        import sys, warnings
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from einloop import autotune
        from einloop.autotune.measure import local as measure
        import auto_ops, oracle

        def no_measuring(*a, **k):
            raise AssertionError("deploy must not measure")
        measure.Measurer.__init__ = no_measuring
        warnings.simplefilter("error")              # a miss would warn
        for fn in (auto_ops.gemm, auto_ops.gemm_renamed):
            with autotune.apply_history_best({tuned_log!r}) as ctx:
                s, args = autotune.auto_schedule(fn(*{SHAPE!r}))
            assert ctx.hits == 1, ctx.hits
            oracle.check(s, args[:2], args[2:], lambda a, b: [a @ b])
            print(len(s.steps))
        s, args = autotune.auto_schedule(auto_ops.gemm_renamed, log={tuned_log!r}, args={SHAPE!r})
        print(len(s.steps))
    """)
    assert out.split() == [str(len(best.candidate["steps"]))] * 3


def test_untuned_operator_gets_the_default_schedule_and_one_warning(tuned_log):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with autotune.apply_history_best(tuned_log):
            for _ in range(2):
                s, args = autotune.auto_schedule(auto_ops.gemm(8, 8, 8))
    got = [w for w in caught if issubclass(w.category, autotune.UntunedScheduleWarning)]
    assert len(got) == 1
    msg = str(got[0].message)
    assert msg.startswith("no tuned schedule for C [") and "n_trial" in msg
    assert "the log tuned C only for other shapes, dtypes or expressions)" in msg
    task = AutoTask.of_tensors(args)
    assert tuple(s.steps) == task.default_steps()
    oracle.check(s, args[:2], args[2:], lambda a, b: [a @ b])


def test_untuned_without_a_context_warns_once_per_operator():
    tensors = auto_ops.dense_relu(4, 8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        autotune.auto_schedule(tensors)
        autotune.auto_schedule(auto_ops.dense_relu(4, 8, 8))
    got = [w for w in caught if issubclass(w.category, autotune.UntunedScheduleWarning)]
    assert len(got) == 1 and "apply_history_best" in str(got[0].message)


def test_seed_configs_are_measured_first(tmp_path):
    task = autotune.create_task(auto_ops.dense_relu, (8, 16, 16))
    seeds = [c.index for c in task.seed_configs(2)]
    tuner = autotune.XGBTuner(task, seed=0)
    tuner.n_seeds = 2
    tuner.tune(3, measure_option=autotune.measure_option(**FAST), quiet=True)
    assert [c.index for c, _ in tuner.history][:len(seeds)] == seeds


@pytest.mark.parametrize("kw, match", [
    (dict(n_trial=0), "n_trial must be a positive integer"),
    (dict(n_trial=2.5), "n_trial must be a positive integer"),
    (dict(tuner="annealing"), "tuner must be one of 'xgb', 'ga', 'random'"),
    (dict(log=42), "log must be a path"),
    (dict(time_budget_s=-1), "time_budget_s must be a positive number"),
    (dict(log="/nonexistent/x.jsonl"), "no tuning log at"),
])
def test_bad_arguments_are_clear_errors(kw, match):
    with pytest.raises(TuningError, match=match):
        autotune.auto_schedule(auto_ops.gemm(4, 4, 4), **kw)


def test_what_is_not_an_operator_is_a_clear_error():
    with pytest.raises(TuningError, match="expected the operator's tensors"):
        autotune.auto_schedule(42)
    with pytest.raises(TuningError, match="no computed tensor"):
        autotune.auto_schedule([auto_ops.gemm(4, 4, 4)[0]])


def test_fixed_and_symbolic_searches_measure_with_one_protocol(monkeypatch):
    """auto_schedule times every candidate for MIN_REPEAT_MS at least, as the symbolic hint
    searches do: five quick calls of a small parallel kernel time its threads' wake-up."""
    from einloop.autotune.measure import common as measure
    from einloop.autotune.search.tuner import Tuner
    seen = []

    def capture(self, n_trial, measure_option=None, **kw):
        seen.append(measure_option)
        raise KeyboardInterrupt          # stop before measuring anything

    monkeypatch.setattr(Tuner, "tune", capture)
    with pytest.raises(KeyboardInterrupt):
        autotune.auto_schedule(auto_ops.gemm(*SHAPE), n_trial=2,
                               measure_option=autotune.measure_option(**FAST), quiet=True)
    assert seen[0].min_repeat_ms == measure.MIN_REPEAT_MS and seen[0].number == 1


def test_a_space_smaller_than_n_trial_ends_with_a_line_saying_it_is_exhausted(capfd):
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    autotune.auto_schedule([A, B], n_trial=50, quiet=False,
                           measure_option=autotune.measure_option(number=1, repeat=1))
    out, err = capfd.readouterr()
    err = err.replace("\r", "\n")
    line = next(x for x in (out + err).splitlines() if "is exhausted" in x)
    # the trials left measure its one schedule again (RECHECK_MEASUREMENTS), within n_trial
    assert "all 1 of its candidates are measured, then 2 more measurements" in line
    assert "(47 of n_trial=50 left unused)" in line
    # the bar ends full, not frozen at 1/50
    assert err.rstrip().splitlines()[-1].startswith("tuning B: 100%|")
