"""einloop.torch.tune_model: a model's kernels extracted as tasks (identical layers one task,
weighted), tuned with one budget into one log, and replayed by torch.compile(backend="einloop",
options={"log": ...}) in a fresh process that measures nothing and warns of nothing, and in a
second one that compiles nothing (every kernel and the kernels' sequence from the compile
cache)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import einloop.torch as et
from einloop.errors import ArgumentError, TuningError

MODEL = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32),
                            torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU()).eval()
x = torch.randn(5, 16)
"""


def _model():
    scope = {}
    exec(MODEL, scope)
    return scope["model"], scope["x"]


def test_identical_layers_are_one_weighted_task():
    model, x = _model()
    with torch.no_grad():
        tasks = et.extract_tasks(model, (x,))
    assert sorted(t.weight for t in tasks) == [1, 2]      # dense+GELU once, dense+ReLU twice
    assert len({t.task.workload_key for t in tasks}) == 2


def test_tuned_log_is_replayed_in_a_fresh_process_without_measuring(tmp_path):
    model, x = _model()
    log = tmp_path / "mlp.jsonl"
    with torch.no_grad():
        progress = et.tune_model(model, (x,), n_trial=6, log=str(log), quiet=True)
    assert sum(tp.trials for tp in progress) == 6
    assert all(tp.best is not None and tp.best > 0 for tp in progress)
    size = log.stat().st_size
    script = MODEL + textwrap.dedent(f"""
        import warnings
        import einloop.torch.backend as be
        from einloop.autotune import UntunedScheduleWarning
        warnings.simplefilter("error", be.BackendWarning)
        warnings.simplefilter("error", UntunedScheduleWarning)
        fast = torch.compile(model, backend="einloop", options={{"log": {str(log)!r}}})
        with torch.no_grad():
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
        from einloop.codegen import cache
        print("replayed", cache.stats.hits, cache.stats.misses)
    """)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(done.stdout.split())
    assert all(r[0] == "replayed" for r in runs)
    assert log.stat().st_size == size                       # nothing measured, nothing written
    hits, misses = map(int, runs[1][1:3])
    assert hits >= 4 and misses == 0, runs                  # 3 kernels and their sequence


def test_bad_calls_say_what_is_wrong(tmp_path):
    model, x = _model()
    with pytest.raises(ArgumentError, match="example_inputs must be a tuple"):
        et.extract_tasks(model, x)
    with pytest.raises(ArgumentError, match="n_trial"):
        et.tune_model(model, (x,), n_trial=0, log=str(tmp_path / "l.jsonl"))
    sorter = torch.nn.Module()
    sorter.forward = lambda t: torch.sort(t).values
    with torch.no_grad(), pytest.raises(TuningError, match="no kernel"):
        et.tune_model(sorter, (x,), n_trial=4, log=str(tmp_path / "l.jsonl"), quiet=True)
    assert not os.path.exists(tmp_path / "l.jsonl")


def test_kernels_are_measured_at_the_thread_count_the_model_runs_with(tmp_path, monkeypatch):
    """As for et.tune: torch's thread count reaches the measuring processes through
    EINLOOP_NUM_THREADS while the model tunes, and the variable is unset again after."""
    import einloop.torch.model_tune as mt
    seen = []

    def recording(*args, **kwargs):
        seen.append(os.environ.get("EINLOOP_NUM_THREADS"))
        raise TuningError("recorded")                   # the round counts its task as failed
    monkeypatch.setattr(mt, "auto_schedule", recording)
    monkeypatch.delenv("EINLOOP_NUM_THREADS", raising=False)
    model, x = _model()
    with torch.no_grad():
        et.tune_model(model, (x,), n_trial=4, log=str(tmp_path / "l.jsonl"), quiet=True)
    assert seen and set(seen) == {str(torch.get_num_threads())}
    assert "EINLOOP_NUM_THREADS" not in os.environ


def test_kernels_are_measured_with_the_weights_evicted_unless_told_otherwise(tmp_path,
                                                                             monkeypatch):
    """The model's weights are evicted before each timed call, as its other layers evict them
    (CacheFlush.CONSTANTS); a measure_option of the caller's is used as given."""
    import einloop.torch.model_tune as mt
    from einloop import autotune
    seen = []

    def recording(*args, measure_option=None, **kwargs):
        seen.append(measure_option.cache_flush)
        raise TuningError("recorded")
    monkeypatch.setattr(mt, "auto_schedule", recording)
    model, x = _model()
    with torch.no_grad():
        et.tune_model(model, (x,), n_trial=4, log=str(tmp_path / "a.jsonl"), quiet=True)
        assert seen and set(seen) == {autotune.CacheFlush.CONSTANTS}
        seen.clear()
        et.tune_model(model, (x,), n_trial=4, log=str(tmp_path / "b.jsonl"), quiet=True,
                      measure_option=autotune.measure_option(number=2))
        assert seen and set(seen) == {autotune.CacheFlush.NONE}
    # and the tasks of a model declare its weights constant: there is something to evict
    with torch.no_grad():
        tasks = et.extract_tasks(model, (x,))
    assert all(any(getattr(t.op, "constant", False) for t in task.tensors) for task in tasks)


def test_a_task_whose_space_is_used_up_leaves_the_budget_to_the_others(tmp_path, monkeypatch):
    """The scheduler counts what each round measured: a task whose round measured nothing (its
    space used up) gets no more rounds, and the other task gets the rest of the budget; with
    every task used up the job ends before its budget."""
    import einloop.torch.model_tune as mt
    model, x = _model()
    with torch.no_grad():
        tasks = et.extract_tasks(model, (x,))
    small, large = (t.task.workload_key for t in tasks)       # two tasks: spaces of 3 and 1000
    space = {small: 3, large: 1000}
    logged = {small: 0, large: 0}

    def fake_tune(tensors, n_trial, **kw):
        key = mt.AutoTask.of_tensors(tensors, kw["target"]).workload_key
        logged[key] = min(n_trial, space[key])                  # measures up to its space
    monkeypatch.setattr(mt, "auto_schedule", fake_tune)
    monkeypatch.setattr(mt, "_logged", lambda db, task: (
        logged[task.workload_key], 1e-3 * (2 if task.workload_key == small else 1)))
    # each logged trial a distinct schedule, all counted by a resumed search
    monkeypatch.setattr(mt, "_schedules", lambda db, task: logged[task.workload_key])
    monkeypatch.setattr(mt, "resumable_trials", lambda task, db: logged[task.workload_key])
    with torch.no_grad():
        progress = et.tune_model(model, (x,), n_trial=100, log=str(tmp_path / "l.jsonl"),
                                 quiet=True)
    by_key = {tp.mt.task.workload_key: tp for tp in progress}
    assert by_key[small].exhausted and logged[small] == 3
    assert logged[large] == 100 - 3                             # the rest of the budget
    space[large] = 40
    logged.update({small: 0, large: 0})
    with torch.no_grad():
        et.tune_model(model, (x,), n_trial=100, log=str(tmp_path / "m.jsonl"), quiet=True)
    assert logged == {small: 3, large: 40}                      # both used up: it ends early


def test_a_resumed_log_counts_toward_n_trial_and_tuning_goes_on(tmp_path):
    """A second tune_model with a larger n_trial on the same log measures the difference:
    the log's trials count (as auto_schedule counts them), and no task is taken for used up
    because its first round found the log already holding what was asked of it."""
    model, x = _model()
    log = tmp_path / "mlp.jsonl"
    with torch.no_grad():
        et.tune_model(model, (x,), n_trial=6, log=str(log), quiet=True)
        lines = len(log.read_text().splitlines())
        progress = et.tune_model(model, (x,), n_trial=12, log=str(log), quiet=True)
    assert sum(tp.trials for tp in progress) == 12
    assert not any(tp.exhausted for tp in progress)
    assert len(log.read_text().splitlines()) == lines + 6


def test_a_stalled_task_with_fewer_trials_goes_before_a_larger_one_with_many():
    """The scheduler's choice between two tasks whose last rounds found nothing better: the
    one with fewer trials for the time it costs goes first (a slow start on one kernel does
    not starve it), and a round that did cut a task's time keeps that task going."""
    from types import SimpleNamespace
    from einloop.torch.model_tune import TaskProgress

    def task(best, trials, gain, weight=1):
        tp = TaskProgress(SimpleNamespace(weight=weight))
        tp.best, tp.trials, tp.gain = best, trials, gain
        return tp
    large, small = task(3.9e-3, 600, 0.0), task(2.9e-3, 71, 0.0)
    assert max([large, small], key=TaskProgress.expected_saving) is small
    assert task(2.9e-3, 71, 0.0, weight=12).expected_saving() == \
        pytest.approx(12 * small.expected_saving())
    improving = task(3.9e-3, 600, 0.3)
    assert max([improving, small], key=TaskProgress.expected_saving) is improving
    assert task(1e-3, 0, 0.0).expected_saving() == pytest.approx(1e-3)   # at most its time


def test_each_task_ends_with_one_final_round_beyond_the_budget(tmp_path):
    """After all its rounds, each task searched enough has its best schedules measured side by
    side once (einloop.autotune.search.finals), and the model deploys that round's winners;
    those measurements do not count toward n_trial, and a job resumed with nothing left to
    measure measures nothing again."""
    from einloop.autotune.log.database import Database
    from einloop.autotune.search.finals import FINALS_MIN_SCHEDULES
    model, x = _model()
    log = tmp_path / "mlp.jsonl"
    with torch.no_grad():
        progress = et.tune_model(model, (x,), n_trial=36, log=str(log), quiet=True)
    db = Database(log)
    searched = [r for r in db if r.final_round is None]
    assert sum(tp.trials for tp in progress) <= 36
    best = db.best()
    for tp in progress:
        key = tp.mt.task.workload_key
        schedules = {str(r.candidate) for r in searched if r.workload == key}
        rounds = {r.final_round for r in db if r.workload == key and r.final_round}
        assert len(rounds) == (1 if len(schedules) >= FINALS_MIN_SCHEDULES else 0), key
        if rounds:
            assert best[key].final_round in rounds
            assert tp.best == pytest.approx(best[key].mean_cost)
    lines = len(log.read_text().splitlines())
    with torch.no_grad():
        et.tune_model(model, (x,), n_trial=36, log=str(log), quiet=True)
    assert len(log.read_text().splitlines()) == lines
    assert any(r.final_round for r in db)


def test_a_round_asks_for_its_trials_beyond_those_the_search_resumes_from(tmp_path):
    """Records a resumed search does not count (of another version's space, or measured as
    bare step lists) are measured again by it; each round still asks for its own trials beyond
    what the search counts, so such records do not turn one task's first round into a round of
    all its records, leaving nothing to the next task."""
    import json
    model, x = _model()
    log = tmp_path / "mlp.jsonl"
    with torch.no_grad():
        first = et.tune_model(model, (x,), n_trial=8, log=str(log), quiet=True)
    before = {tp.mt.task.workload_key: tp.records for tp in first}
    lines = []
    for line in log.read_text().splitlines():                 # no config index: uncounted
        d = json.loads(line)
        d.pop("config_index", None)
        lines.append(json.dumps(d))
    log.write_text("\n".join(lines) + "\n")
    with torch.no_grad():
        progress = et.tune_model(model, (x,), n_trial=16, log=str(log), quiet=True)
    grown = {tp.mt.task.workload_key: tp.records - before[tp.mt.task.workload_key]
             for tp in progress}
    assert sorted(grown.values()) == [4, 4], grown             # 8 left: four each
