"""After tuning a symbolic operator at its hint sizes, the best schedules of each hint are
measured at the other hints and between them, and each size of the dispatch runs the schedule
measured fastest there."""
import numpy as np
import pytest

from einloop import autotune, build, te
from einloop.autotune import cross_sizes, dynamic, record
from einloop.autotune.candidate import StepsCandidate
from einloop.codegen.target import Target
from ops import gemm

FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)


def dense(n):
    ins, outs, _ = gemm(M=n, N=24, K=32)
    return ins + outs


def test_probes_are_the_hints_and_their_geometric_midpoints():
    assert cross_sizes.probe_points([{"n": 1}, {"n": 32}]) == [{"n": 1}, {"n": 6}, {"n": 32}]
    assert cross_sizes.probe_points([{"n": 1}, {"n": 16}, {"n": 256}]) == [
        {"n": 1}, {"n": 4}, {"n": 16}, {"n": 64}, {"n": 256}]
    assert cross_sizes.probe_points([{"n": 8}]) == [{"n": 8}]
    two = [{"n": a, "m": b} for a in (1, 16) for b in (2, 8)]
    assert cross_sizes.probe_points(two) == [{"n": a, "m": b} for a in (1, 4, 16)
                                             for b in (2, 4, 8)]


@pytest.fixture(scope="module")
def hint_log(tmp_path_factory):
    """A log of the hint searches alone (no cross measurements)."""
    tensors = dense(te.size_var("n"))
    log = str(tmp_path_factory.mktemp("cross") / "dense.jsonl")
    dynamic.tune(tensors, 8, {"n": [1, 32]}, log, "llvm",
                 lambda task: autotune.RandomTuner(task, seed=0),
                 measure_option=autotune.measure_option(**FAST), quiet=True, cross_check=False)
    return log, tensors


def test_cross_measurement_logs_the_other_sizes_schedules_once(hint_log, tmp_path):
    src, tensors = hint_log
    log = str(tmp_path / "dense.jsonl")
    with open(src) as f, open(log, "w") as g:
        g.write(f.read())
    before = record.load(log)
    assert sorted({dict(r.dynamic["sizes"])["n"] for r in before}) == [1, 32]
    points = dynamic.hint_points(tensors, {"n": [1, 32]})
    target, key = str(Target.parse("llvm")), dynamic.dynamic_key(tensors)
    option = autotune.measure_option(**FAST)
    stats = cross_sizes.cross_measure(tensors, before, points, key, target,
                                      [record.log_to_file(log)], option, quiet=True)
    after = record.load(log)
    new = after[len(before):]
    assert stats.measured == len(new) > 0 and stats.probes >= 1
    # every new record is a step list that was tuned at another size, measured here
    tuned = {}
    for r in before:
        tuned.setdefault(dict(r.dynamic["sizes"])["n"], set()).add(
            StepsCandidate.from_json(r.candidate["steps"]).key)
    for r in new:
        n = dict(r.dynamic["sizes"])["n"]
        steps = StepsCandidate.from_json(r.candidate["steps"]).key
        assert n in (1, 6, 32) and steps not in tuned.get(n, ())
        assert any(steps in keys for size, keys in tuned.items() if size != n)
    assert sum(dict(r.dynamic["sizes"])["n"] == 6 for r in new) >= 2
    # measured once: a second pass over the log has nothing left to measure
    again = cross_sizes.cross_measure(tensors, after, points, key, target,
                                      [record.log_to_file(log)], option, quiet=True)
    assert again.measured == 0 and len(record.load(log)) == len(after)
    # the dispatch takes, at each size, the fastest step list measured there
    d, _ = dynamic.dispatch_from_records(tensors, after)
    assert [sizes for sizes, _ in d.cases] == [{"n": 1}, {"n": 6}, {"n": 32}]
    f = build(d, tensors)
    rng = np.random.default_rng(0)
    b = rng.random((32, 24), dtype=np.float32)
    for n in (1, 5, 6, 7, 33):
        a = rng.random((n, 32), dtype=np.float32)
        c = np.full((n, 24), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5, err_msg=f"n={n}")


def test_too_many_cross_measurements_probe_the_hints_only(hint_log, monkeypatch):
    _, tensors = hint_log
    records = record.load(hint_log[0])
    monkeypatch.setattr(cross_sizes, "MAX_CROSS", 2)
    sizes = []
    stats = cross_sizes.cross_measure(
        tensors, records, dynamic.hint_points(tensors, {"n": [1, 32]}),
        dynamic.dynamic_key(tensors), str(Target.parse("llvm")),
        [lambda job, cands, results: sizes.extend(dict(job.task.dynamic["sizes"])["n"]
                                                  for _ in results)],
        autotune.measure_option(**FAST), quiet=True)
    assert stats.measured == len(sizes) > 0
    assert set(sizes) <= {1, 32}                   # no midpoint probed


def test_one_schedule_has_nothing_to_be_measured_against(hint_log):
    _, tensors = hint_log
    records = record.load(hint_log[0])
    best = min(records, key=lambda r: r.mean_cost if r.ok else float("inf"))
    stats = cross_sizes.cross_measure(
        tensors, [best], dynamic.hint_points(tensors, {"n": [1, 32]}),
        dynamic.dynamic_key(tensors), str(Target.parse("llvm")), [], None, quiet=True)
    assert stats.probes == stats.measured == 0
