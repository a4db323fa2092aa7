"""Tuners, tuning logs, resume, deploy-time lookup and the command line, on real measurements."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from einloop import autotune, build, TuningError, TuningLogError
from einloop.autotune.log import record
from einloop.autotune.task.context import reset_fallback_warnings

import tiny_templates
from tiny_templates import tiny_matmul

ARGS = (16, 32, 8)
FAST = dict(number=2, repeat=2, timeout=10)


@pytest.fixture(scope="module")
def task():
    return autotune.create_task("tiny_matmul", ARGS)


def test_space_index_and_entities_round_trip(task):
    space = task.config_space
    assert len(space) == 5 * 6 * 2            # power-of-two splits of 16 and 32, two knob values
    assert space.dims == [5, 6, 2]
    for index in (0, 1, 7, len(space) - 1):
        cfg = space.get(index)
        assert space.index_of(cfg.knob_indices()) == index
        assert space.from_json(json.loads(json.dumps(cfg.to_json()))).index == index
    with pytest.raises(TuningError, match="outside this space"):
        space.get(len(space))
    assert "60 configurations" in str(space)


def test_split_candidate_cap_keeps_an_even_spread():
    from einloop.autotune.space.knobs import ConfigSpace
    space = ConfigSpace()
    space.define_split("t", 1024, num_outputs=3, max_candidates=5)
    knob = space.knobs["t"]
    assert len(knob) == 5
    assert knob.entities[0].size == (-1, 1, 1) and knob.entities[-1].size == (-1, 1024, 1)
    with pytest.raises(TuningError, match="max_candidates must be a positive integer"):
        space.define_split("u", 64, max_candidates=0)


def test_a_space_larger_than_len_can_return_is_sized_searched_and_indexed():
    import sys
    from einloop.autotune.search.tuner import RandomTuner
    from einloop.autotune.space.knobs import ConfigSpace
    space = ConfigSpace()
    for n in range(70):                 # 2**70 configurations: len() cannot return that
        space.define_knob(f"k{n}", [0, 1])
    assert space.size == 2 ** 70 > sys.maxsize
    last = space.get(space.size - 1)
    assert all(e.val == 1 for e in last.entities.values())
    assert space.point_of(space.size - 1) == [1] * 70

    class Task:                         # only what RandomTuner asks of a task
        config_space = space
    assert space                        # truth needs no len()
    batch = RandomTuner(Task(), seed=0).next_batch(4)
    assert len({c.index for c in batch}) == 4 and all(0 <= c.index < space.size for c in batch)


def test_split_policies():
    from einloop.autotune.space.knobs import factorizations
    assert factorizations(12, 2, "factors", None) == [(1,), (2,), (3,), (4,), (6,), (12,)]
    assert factorizations(12, 2, "power2", None) == [(1,), (2,), (4,), (8,)]
    assert all(a * b <= 8 for a, b in factorizations(8, 3, "power2", None))
    assert factorizations(64, 2, "factors", 8) == [(1,), (2,), (4,), (8,)]


@pytest.mark.parametrize("cls", [autotune.RandomTuner, autotune.GridSearchTuner,
                                 autotune.GATuner, autotune.XGBTuner])
def test_each_tuner_finishes_a_real_job(task, cls, tmp_path):
    log = tmp_path / "log.jsonl"
    tuner = cls(task, seed=1)
    tuner.tune(12, measure_option=autotune.measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(log)])
    assert len(tuner.history) == 12
    assert len({c.index for c, _ in tuner.history}) == 12        # nothing measured twice
    assert tuner.best_config is not None and tuner.best_gflops > 0
    records = record.load(log)
    assert len(records) == 12 and all(r.ok for r in records)
    best = min(records, key=lambda r: r.mean_cost)
    assert best.index == tuner.best_config.index


def test_xgb_tuner_with_knob_features_fits_and_proposes(task):
    """Knob features (one value per knob) train and query the model: its schema is the knobs'."""
    tuner = autotune.XGBTuner(task, seed=1, feature_type="knob", plan_size=8)
    tuner.tune(16, measure_option=autotune.measure_option(**FAST), quiet=True)
    assert len({c.index for c, _ in tuner.history}) == 16
    assert tuner.model.schema["length"] == len(task.config_space.knobs)
    scores = tuner._score([0, 1])
    assert scores.shape == (2,) and np.all(np.isfinite(scores))

def test_resume_does_not_measure_again(task, tmp_path):
    log = tmp_path / "log.jsonl"
    first = autotune.RandomTuner(task, seed=3)
    first.tune(6, measure_option=autotune.measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(log)])
    second = autotune.RandomTuner(task, seed=3)
    second.tune(10, measure_option=autotune.measure_option(**FAST), quiet=True,
                callbacks=[autotune.log_to_file(log)])
    records = record.load(log)
    assert len(records) == 10                                     # 6 kept + 4 new
    assert len({r.index for r in records}) == 10


def test_log_round_trip_and_truncated_last_line(task, tmp_path):
    log = tmp_path / "log.jsonl"
    tuner = autotune.GridSearchTuner(task)
    tuner.tune(3, measure_option=autotune.measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(log)])
    text = log.read_text()
    log.write_text(text + text.splitlines()[0][:40])               # a killed writer's half line
    with pytest.warns(record.TruncatedLogWarning, match="truncated last record"):
        assert len(record.load(log)) == 3
    tuner2 = autotune.GridSearchTuner(task)                        # appending repairs the end
    with pytest.warns(record.TruncatedLogWarning):
        tuner2.tune(4, measure_option=autotune.measure_option(**FAST), quiet=True,
                    callbacks=[autotune.log_to_file(log)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TuningLogError, match=r"log.jsonl:4"):
            record.load(log)                                      # the half line, now closed
    lines = log.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[-1])["version"] == record.SCHEMA_VERSION


def test_unknown_schema_version_is_a_clear_error(task, tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"version": 99, "einloop": "9.9"}) + "\n")
    with pytest.raises(TuningLogError, match="schema version 99"):
        record.load(log)


def test_apply_history_best_picks_the_best_record(task, tmp_path):
    log = tmp_path / "log.jsonl"
    tuner = autotune.RandomTuner(task, seed=5)
    tuner.tune(8, measure_option=autotune.measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(log)])
    with autotune.apply_history_best(str(log)) as ctx:
        s, args = tiny_matmul(*ARGS)
    expected, _ = task.instantiate(tuner.best_config)
    assert s.steps == expected.steps and ctx.hits == 1
    a = np.random.rand(16, 8).astype("float32")
    b = np.random.rand(8, 32).astype("float32")
    c = np.empty((16, 32), "float32")
    build(s, args)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_fallback_warns_once_per_workload():
    reset_fallback_warnings()
    with pytest.warns(autotune.FallbackConfigWarning, match=r"tiny_matmul\(8, 8, 8\)") as w:
        tiny_matmul(8, 8, 8)
        tiny_matmul(8, 8, 8)
    assert len([x for x in w if issubclass(x.category, autotune.FallbackConfigWarning)]) == 1


def test_apply_history_best_miss_falls_back_or_raises(task, tmp_path):
    log = tmp_path / "log.jsonl"
    autotune.GridSearchTuner(task).tune(2, measure_option=autotune.measure_option(**FAST),
                                        quiet=True, callbacks=[autotune.log_to_file(log)])
    with autotune.apply_history_best(str(log)):
        with pytest.warns(autotune.FallbackConfigWarning, match=r"only for args \(16, 32, 8\)"):
            s, _ = tiny_matmul(8, 8, 8)
    with autotune.apply_history_best(str(log), strict=True):
        with pytest.raises(TuningError, match="no tuned config"):
            tiny_matmul(8, 8, 8)


def test_all_trials_failing_raises_with_the_errors(tmp_path):
    import measure_templates  # noqa: F401  (registers measure_test_broken)
    with pytest.raises(TuningError):
        task = autotune.create_task("measure_test_broken", (16,))
        autotune.RandomTuner(task).tune(3, measure_option=autotune.measure_option(**FAST),
                                        quiet=True)


def test_cli_tune_then_log(tmp_path):
    log = tmp_path / "cli.jsonl"
    here = os.path.dirname(tiny_templates.__file__)
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    tune = subprocess.run([sys.executable, "-m", "einloop", "tune", "tiny_templates:tiny_matmul",
                           "--args", "16", "32", "8", "--trials", "6", "--log", str(log),
                           "--tuner", "random", "--seed", "0", "--number", "2", "--repeat", "2",
                           "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert tune.returncode == 0, tune.stderr
    assert "best:" in tune.stdout and len(record.load(log)) == 6
    show = subprocess.run([sys.executable, "-m", "einloop", "log", str(log), "--code"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert show.returncode == 0, show.stderr
    assert "tiny_matmul(16, 32, 8)" in show.stdout and "s[C].split(i, factor=" in show.stdout
    bad = subprocess.run([sys.executable, "-m", "einloop", "tune", "no_such_module:x"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "cannot import 'no_such_module'" in bad.stderr


def test_xgb_tuner_warm_starts_from_another_shapes_log(tmp_path):
    log = tmp_path / "shape_a.jsonl"
    task_a = autotune.create_task("tiny_matmul", (16, 32, 8))
    autotune.RandomTuner(task_a, seed=0).tune(20, measure_option=autotune.measure_option(**FAST),
                                              quiet=True, callbacks=[autotune.log_to_file(log)])
    task_b = autotune.create_task("tiny_matmul", (32, 16, 8))
    tuner = autotune.XGBTuner(task_b, seed=0, plan_size=8)
    assert tuner.load_history([str(log)]) == 20
    assert tuner.model.has_base and tuner.model.source == "base"   # ranks before own data
    tuner.tune(8, measure_option=autotune.measure_option(**FAST), quiet=True)
    assert tuner.best_gflops > 0


def test_ctrl_c_stops_cleanly_and_keeps_the_log(tmp_path):
    import signal
    import time
    log = tmp_path / "interrupted.jsonl"
    here = os.path.dirname(tiny_templates.__file__)
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # long enough (84 configs, 1000 runs each) that the job is still busy when the signal comes
    proc = subprocess.Popen([sys.executable, "-m", "einloop", "tune", "tiny_templates:tiny_matmul",
                             "--args", "32", "64", "16", "--trials", "60", "--log", str(log),
                             "--tuner", "grid", "--number", "1000", "--repeat", "3", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and len(record.load(log)) < 8:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 1), err
    assert "interrupted" in err + out
    records = record.load(log)                    # every line whole: load() would raise if not
    assert 8 <= len(records) < 60


def test_flops_count_arithmetic_not_index_math():
    from einloop import te
    from einloop.autotune.task.base import count_flops
    A = te.placeholder((1, 3, 8, 8), name="A")
    W = te.placeholder((4, 3, 3, 3), name="W")
    P = te.compute((1, 3, 10, 10), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < 9, w >= 1, w < 9), A[n, c, h - 1, w - 1], 0.0), name="P")
    c, r, s = (te.reduce_axis((0, e), name=nm) for e, nm in ((3, "c"), (3, "r"), (3, "s")))
    O = te.compute((1, 4, 8, 8), lambda n, k, y, x: te.sum(
        P[n, c, y + r, x + s] * W[k, c, r, s], axis=[c, r, s]), name="O")
    assert count_flops([O]) == 2 * 4 * 8 * 8 * 27              # a multiply and an add per tap
    E = te.compute((4,), lambda i: te.exp(A[0, 0, 0, i] * 2.0) + 1.0, name="E")
    assert count_flops([E]) == 4 * 3


@pytest.mark.parametrize("cls", [autotune.RandomTuner, autotune.GATuner, autotune.XGBTuner])
def test_a_seed_fixes_the_search_decisions(task, cls):
    first = [c.index for c in cls(task, seed=7).next_batch(8)]
    again = [c.index for c in cls(task, seed=7).next_batch(8)]
    other = [c.index for c in cls(task, seed=8).next_batch(8)]
    assert first == again and len(set(first)) == 8
    assert first != other
