"""Tuning operators with symbolic extents: measured at the hint sizes, logged by workload and
sizes, replayed on the symbolic declaration into a kernel that dispatches each call to the
schedule tuned nearest its sizes; exported with its dispatch table."""
import os
import warnings

import numpy as np
import pytest

from einloop import ScheduleError, TuningError, autotune, build, create_schedule, te
from einloop.errors import ToolchainError
from einloop.autotune.symbolic import cross_sizes, points as size_points, tune as dynamic
from einloop.autotune.symbolic.dispatch import dispatch_from_records
from einloop.autotune.log import record
from einloop.autotune.log.deploy import UntunedScheduleWarning
from einloop.runtime import load_module
from einloop.schedule.dispatch import SizeDispatch
from isolated import loaded_dense_matches_numpy

FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)
HINTS = {"n": [1, 32]}


def dense(n, k=32, m=24):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C]


def check(f, sizes=(1, 5, 32, 77)):
    rng = np.random.default_rng(0)
    b = rng.random((32, 24), dtype=np.float32)
    for n in sizes:
        a = rng.random((n, 32), dtype=np.float32)
        c = np.full((n, 24), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5, err_msg=f"n={n}")


# These tests look at the side-by-side round in full: a budget whose share for the round holds
# all of it (every pass at every power of two), and 4 searched trials per hint.
ROUND_HEAVY = 0.96
# Passes of the round: two show that contenders are measured over and over, interleaved (the
# default three only repeat that); tests that look at the dispatch, not at the round, take one.
TWO_PASSES = 2


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("dyn") / "dense.jsonl")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dynamic, "ROUND_SHARE", ROUND_HEAVY)
        mp.setattr(cross_sizes, "PASSES", TWO_PASSES)
        d, args = autotune.auto_schedule(dense(te.size_var("n")), n_trial=200, log=log, seed=0,
                                         shape_hints=HINTS, quiet=True,
                                         measure_option=autotune.measure_option(**FAST))
    return log, d, args


def test_tuning_gives_a_schedule_per_hint_and_probe_size(tuned):
    _, d, args = tuned
    # the hints and the powers of two between them, where the tuned schedules were measured
    # side by side
    assert isinstance(d, SizeDispatch) and [sizes for sizes, _ in d.cases] == [
        {"n": n} for n in (1, 2, 4, 8, 16, 32)]
    f = build(d, args)
    assert len(f.cases) == 6 and len(f.kernels) <= 4
    check(f)


def test_records_are_keyed_by_workload_and_sizes(tuned):
    log, _, args = tuned
    records = record.load(log)
    key = size_points.symbolic_key(args)
    assert {r.size_point["key"] for r in records} == {key}
    by_size = {}
    for r in records:
        by_size.setdefault(dict(r.size_point["sizes"])["n"], set()).add(r.workload)
    assert sorted(by_size) == [1, 2, 4, 8, 16, 32]
    # each size is its own static workload: the operator bound at that size
    assert all(len(w) == 1 for w in by_size.values()) and len(set.union(*by_size.values())) == 6
    # 8 trials split between the hints, then one round measuring the contenders side by side at
    # the 6 sizes, each pass of the round over
    searched = [r for r in records if "round" not in r.size_point]
    crossed = [r for r in records if "round" in r.size_point]
    assert len(searched) == 8 and len({r.size_point["round"] for r in crossed}) == 1
    passes = TWO_PASSES                     # what the fixture's round measured with
    # contenders at every size: the best 2 of each hint, and per hint at most a busy one and a
    # finer variant; challengers (the next of the search at 32) at 16 alone
    at_16 = [r for r in crossed if dict(r.size_point["sizes"])["n"] == 16]
    elsewhere = [r for r in crossed if dict(r.size_point["sizes"])["n"] != 16]
    per_contender = 5 * passes
    assert len(elsewhere) % per_contender == 0
    contenders = len(elsewhere) // per_contender
    assert 2 <= contenders <= 2 * (cross_sizes.TOP_PER_SIZE + 2)
    challengers = len(at_16) / passes - contenders
    assert 0 <= challengers <= cross_sizes.CHALLENGERS and challengers == int(challengers)


def test_deploy_replays_the_log_without_measuring(tuned):
    log, d, _ = tuned
    tensors = dense(te.size_var("batch"))            # other names: the same operator
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with autotune.apply_history_best(log):
            d2, args = autotune.auto_schedule(tensors)
    assert [s for s, _ in d2.cases] == [{"batch": n} for n in (1, 2, 4, 8, 16, 32)]
    check(build(d2, args))


def test_the_dispatching_kernel_exports_and_loads_without_the_compiler(tuned, tmp_path):
    _, d, args = tuned
    f = build(d, args, name="dense")
    try:
        lib = f.export_library(tmp_path / "dense.so")
    except ToolchainError as exc:                   # no C compiler on this machine
        pytest.skip(f"export_library: {exc}")
    assert loaded_dense_matches_numpy(lib, 32, 24, (1, 3, 40), "dense").strip() == \
        "DispatchKernel"
    assert len(load_module(lib)["dense"].cases) == 6


def test_a_step_list_that_does_not_replay_symbolically_is_skipped_and_counted(tuned):
    log, _, args = tuned
    records = record.load(log)
    best = min((r for r in records if dict(r.size_point["sizes"])["n"] == 32),
               key=lambda r: r.mean_cost)
    # a faster fake record of the same size, of the latest round of cross-size measurements
    # (which decides the size), unrolling the loop over n: no symbolic replay
    last = max(r.size_point["round"] for r in records if "round" in r.size_point)
    bad_steps = [{"kind": "unroll", "stage": "C", "args": {"axis": "i"}}]
    fake = record.Record(**{**best.__dict__, "candidate": {**best.candidate,
                                                            "steps": bad_steps},
                            "costs": (1e-9,), "size_point": {**best.size_point, "round": last}})
    d, stats = dispatch_from_records(args, records + [fake])
    assert stats.skipped == 1 and stats.fallbacks == 0
    assert "cannot be unrolled" in stats.reasons[0]
    check(build(d, args))


def test_nothing_tuned_warns_once_and_still_works():
    tensors = dense(te.size_var("n"), k=32, m=24)
    with pytest.warns(UntunedScheduleWarning, match="symbolic extents"):
        d, args = autotune.auto_schedule(tensors)
    check(build(d, args))


def test_hint_errors():
    n = te.size_var("n")
    with pytest.raises(TuningError, match="names 'm', which the operator has no symbolic"):
        size_points.hint_points(dense(n), {"m": [1]})
    with pytest.raises(TuningError, match=r"shape_hints\['n'\] must be a non-empty list of "
                                          r"ints >= 1"):
        size_points.hint_points(dense(n), {"n": [0, 4]})
    m = te.size_var("m")
    big = [te.placeholder((n, m), name="X")]
    big.append(te.compute((n, m), lambda i, j: big[0][i, j] * 2.0, name="Y"))
    with pytest.raises(TuningError, match="25 size combinations"):
        size_points.hint_points(big, {"n": [1, 2, 3, 4, 5], "m": [1, 2, 3, 4, 5]})
    assert size_points.hint_points(dense(n)) == [{"n": h} for h in size_points.DEFAULT_HINTS]
    with pytest.raises(TuningError, match="shape_hints are for operators with symbolic"):
        autotune.auto_schedule(dense(8), n_trial=1, shape_hints={"n": [1]})


def test_dispatch_picks_the_nearest_size_in_log_scale():
    n = te.size_var("n")
    tensors = dense(n)
    d = SizeDispatch([({"n": 1}, create_schedule(tensors[-1])),
                      ({"n": 256}, create_schedule(tensors[-1]))])
    s = d.cases[1][1]
    s[tensors[-1]].split(tensors[-1].op.axis[0], factor=4)        # a different kernel
    f = build(d, tensors)
    small, large = f.cases[0][1], f.cases[1][1]
    assert small is not large
    # 16 is the log-scale midpoint of 1 and 256: a tie, which goes to the larger size
    for size, want in ((1, small), (15, small), (16, large), (17, large), (1000, large)):
        assert f.choose((size,)) is want, size
    with pytest.raises(ScheduleError, match="sizes the same extents"):
        SizeDispatch([({"n": 1}, s), ({"m": 2}, s)])


def test_cli_tunes_a_symbolic_function_at_its_hints(tmp_path, capsys, monkeypatch):
    from einloop.cli import main
    monkeypatch.setattr(dynamic, "ROUND_SHARE", ROUND_HEAVY)
    monkeypatch.setattr(cross_sizes, "PASSES", 1)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    log = str(tmp_path / "dense.jsonl")
    rc = main(["tune", os.path.join(root, "examples", "dense_dynamic.py") + ":dense",
               "--args", "32", "24", "--trials", "100", "--shape-hints", "n=1,16", "--log", log,
               "--number", "1", "--repeat", "1", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "symbolic extents n; tuning at 2 sizes" in out and "tuned at 2 sizes" in out
    assert "nearest of 5 sizes" in out
    assert sorted({dict(r.size_point["sizes"])["n"] for r in record.load(log)}) == [1, 2, 4, 8, 16]
    rc = main(["tune", os.path.join(root, "examples", "dense_dynamic.py") + ":dense",
               "--args", "32", "24", "--trials", "1", "--shape-hints", "n=one"])
    assert rc == 2 and "write NAME=SIZE,SIZE" in capsys.readouterr().err


def test_a_function_that_raises_while_declaring_is_a_tuning_error():
    def broken(n):
        raise ValueError("no such layer")
    with pytest.raises(TuningError, match=r"broken\(3\) raised ValueError while declaring its "
                                          r"tensors: no such layer"):
        autotune.auto_schedule(broken, args=(3,))


def test_tuning_without_a_log_dispatches_from_the_records_of_the_job(monkeypatch):
    monkeypatch.setattr(dynamic, "ROUND_SHARE", ROUND_HEAVY)
    monkeypatch.setattr(cross_sizes, "PASSES", 1)
    d, args = autotune.auto_schedule(dense(te.size_var("n")), n_trial=100, seed=1,
                                     shape_hints={"n": [2, 16]}, quiet=True,
                                     measure_option=autotune.measure_option(**FAST))
    assert [sizes for sizes, _ in d.cases] == [{"n": 2}, {"n": 4}, {"n": 8}, {"n": 16}]
    check(build(d, args))


def test_n_trial_bounds_every_measurement_and_a_line_says_how_they_were_spent(tmp_path, capfd):
    log = str(tmp_path / "dense.jsonl")
    autotune.auto_schedule(dense(te.size_var("n")), n_trial=12, log=log, seed=0,
                           shape_hints={"n": [1, 8, 32]}, quiet=False,
                           measure_option=autotune.measure_option(**FAST))
    err = capfd.readouterr().err
    measured = record.load(log)
    assert 0 < len(measured) <= 12
    line = next(x for x in err.splitlines() if x.startswith("auto_schedule: n_trial=12:"))
    searched = sum(1 for r in measured if size_points.searched(r))
    assert f"{searched} measured by the searches at 3 sizes" in line, line
    assert ("side by side" in line) or ("no side-by-side round" in line), line
    # a rerun with the same budget measures within it again (the log's trials count for the
    # searches, so the round gets what they leave)
    autotune.auto_schedule(dense(te.size_var("n")), n_trial=12, log=log, seed=0,
                           shape_hints={"n": [1, 8, 32]}, quiet=True,
                           measure_option=autotune.measure_option(**FAST))
    assert len(record.load(log)) - len(measured) <= 12
