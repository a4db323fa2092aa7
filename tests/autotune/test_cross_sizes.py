"""After tuning a symbolic operator at its hint sizes, the best schedules of each hint are
measured at the other hints and between them, and each size of the dispatch runs the schedule
measured fastest there."""
import numpy as np
import pytest

from einloop import autotune, build, lower, te
from einloop.autotune.symbolic import cross_sizes, points as size_points, tune as dynamic
from einloop.autotune.symbolic.dispatch import dispatch_from_records
from einloop.autotune.log import record
from einloop.autotune.space.candidate import StepsCandidate
from einloop.schedule.steps import Step
from einloop.codegen.target import Target
from ops import gemm

FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)


def dense(n, width=24, depth=32):
    ins, outs, _ = gemm(M=n, N=width, K=depth)
    return ins + outs


def test_probes_are_the_hints_and_the_powers_of_two_between_them(monkeypatch):
    assert cross_sizes.probe_points([{"n": 1}, {"n": 32}]) == [
        {"n": n} for n in (1, 2, 4, 8, 16, 32)]
    assert cross_sizes.probe_points([{"n": 3}, {"n": 20}]) == [
        {"n": n} for n in (3, 4, 8, 16, 20)]
    assert cross_sizes.probe_points([{"n": 8}]) == [{"n": 8}]
    two = [{"n": a, "m": b} for a in (1, 4) for b in (2, 8)]
    assert cross_sizes.probe_points(two) == [{"n": a, "m": b} for a in (1, 2, 4)
                                             for b in (2, 4, 8)]
    # too many measurements: the geometric midpoints, then the hints alone
    hints = [{"n": 1}, {"n": 16}, {"n": 256}, {"n": 2048}]
    assert len(cross_sizes.probe_points(hints, 8)) == 12
    monkeypatch.setattr(cross_sizes, "MAX_CROSS", 60)
    assert cross_sizes.probe_points(hints, 8) == [{"n": n} for n in (1, 4, 16, 64, 256, 724,
                                                                      2048)]
    assert cross_sizes.probe_points(hints, 9) == hints


def test_probes_stay_dense_below_the_register_tiles_where_fewer_are_needed(monkeypatch):
    """Too many measurements for every power of two: those up to *dense_below* stay (a tile
    of r rows wastes a share of its work that changes with every n < r), midpoints above."""
    hints = [{"n": 1}, {"n": 16}, {"n": 256}, {"n": 2048}]
    monkeypatch.setattr(cross_sizes, "MAX_CROSS", 120)
    assert cross_sizes.probe_points(hints, 12, dense_below=32) == [
        {"n": n} for n in (1, 2, 4, 8, 16, 32, 64, 256, 724, 2048)]
    # without it, or with still too many, the midpoints alone
    assert cross_sizes.probe_points(hints, 12) == [
        {"n": n} for n in (1, 4, 16, 64, 256, 724, 2048)]
    assert cross_sizes.probe_points(hints, 13, dense_below=32) == [
        {"n": n} for n in (1, 4, 16, 64, 256, 724, 2048)]


@pytest.fixture(scope="module")
def hint_log(tmp_path_factory):
    """A log of the hint searches alone (no cross measurements)."""
    tensors = dense(te.size_var("n"))
    log = str(tmp_path_factory.mktemp("cross") / "dense.jsonl")
    dynamic.tune(tensors, 8, {"n": [1, 32]}, log, "llvm",
                 lambda task: autotune.RandomTuner(task, seed=0),
                 measure_option=autotune.measure_option(**FAST), quiet=True, cross_check=False)
    return log, tensors


@pytest.fixture(scope="module")
def wide_hint_log(tmp_path_factory):
    """The hint searches of a dense layer wide enough to be worth threads at n = 1 (a 256 x 256
    weight: the smaller one above runs serially at every hint, MIN_PARALLEL_POINTS)."""
    tensors = dense(te.size_var("n"), 256, 256)
    log = str(tmp_path_factory.mktemp("wide") / "dense.jsonl")
    dynamic.tune(tensors, 6, {"n": [1, 32]}, log, "llvm",
                 lambda task: autotune.RandomTuner(task, seed=0),
                 measure_option=autotune.measure_option(**FAST), quiet=True, cross_check=False)
    return log, tensors


def test_one_round_measures_the_contenders_side_by_side_once(hint_log, tmp_path, monkeypatch):
    # two passes show the interleaved repetition as well as the default three, in 2/3 the time
    monkeypatch.setattr(cross_sizes, "PASSES", 2)
    src, tensors = hint_log
    log = str(tmp_path / "dense.jsonl")
    with open(src) as f, open(log, "w") as g:
        g.write(f.read())
    before = record.load(log)
    assert sorted({dict(r.size_point["sizes"])["n"] for r in before}) == [1, 32]
    points = size_points.hint_points(tensors, {"n": [1, 32]})
    target, key = str(Target.parse("llvm")), size_points.symbolic_key(tensors)
    option = autotune.measure_option(**FAST)
    stats = cross_sizes.cross_measure(tensors, autotune.Database(log), points, key, target,
                                      option, quiet=True)
    after = record.load(log)
    new = after[len(before):]
    assert stats.measured == len(new) and stats.probes == 6 and stats.round is not None
    assert all(r.ok for r in new), [r.error_msg for r in new if not r.ok]
    assert {r.size_point["round"] for r in new} == {stats.round}
    # the best two step lists of each hint's search, each measured at every probe size
    best = {}
    for n in (1, 32):
        ranked = sorted((r for r in before if r.ok and dict(r.size_point["sizes"])["n"] == n),
                        key=lambda r: r.mean_cost)
        keys = []
        for r in ranked:
            k = StepsCandidate.from_json(r.candidate["steps"]).key
            if k not in keys:
                keys.append(k)
        best[n] = keys[:2]
    contenders = set(best[1]) | set(best[32])
    measured = {(dict(r.size_point["sizes"])["n"], StepsCandidate.from_json(r.candidate["steps"]).key)
                for r in new}
    # besides, per hint: its best that keeps both cores busy at n = 1 (where its best two do
    # not), and the finer-blocked variant of its best (where that idles a core at half its size)
    steps_of = {StepsCandidate.from_json(r.candidate["steps"]).key:
                StepsCandidate.from_json(r.candidate["steps"]).steps for r in new}
    finer = {}
    for n in (1, 32):
        top = next(r for r in before if r.ok and dict(r.size_point["sizes"])["n"] == n
                   and StepsCandidate.from_json(r.candidate["steps"]).key == best[n][0])
        variant = cross_sizes._finer_blocks(StepsCandidate.from_json(top.candidate["steps"]).steps,
                                            tensors)
        if variant is not None:
            finer[StepsCandidate(variant).key] = variant
    probes = (1, 2, 4, 8, 16, 32)
    everywhere = {k for _, k in measured if all((n, k) in measured for n in probes)}
    extra = everywhere - contenders
    assert len(extra) <= 4
    for k in extra:
        assert k in finer or cross_sizes._busy_at(steps_of[k], tensors, {"n": 1}, 2)
    contenders |= extra
    # and at 16 alone (the probe below the hint 32), the next best of the search at 32
    ranked = [StepsCandidate.from_json(r.candidate["steps"]).key
              for r in sorted((r for r in before if r.ok and dict(r.size_point["sizes"])["n"] == 32),
                              key=lambda r: r.mean_cost)]
    challengers = []
    for k in ranked:
        if k not in contenders and k not in challengers:
            challengers.append(k)
    challengers = challengers[:cross_sizes.CHALLENGERS]
    assert challengers
    assert measured == {(n, k) for n in probes for k in contenders} | {(16, k) for k in
                                                                       challengers}
    assert len(new) == (len(contenders) * 6 + len(challengers)) * cross_sizes.PASSES
    # measured once: a second pass has nothing left to measure
    again = cross_sizes.cross_measure(tensors, autotune.Database(log), points, key, target,
                                      option, quiet=True)
    assert again.measured == 0 and len(record.load(log)) == len(after)
    # the dispatch takes, at each size, the fastest of that round
    d, _ = dispatch_from_records(tensors, after)
    assert [sizes for sizes, _ in d.cases] == [{"n": n} for n in (1, 2, 4, 8, 16, 32)]
    f = build(d, tensors)
    rng = np.random.default_rng(0)
    b = rng.random((32, 24), dtype=np.float32)
    for n in (1, 5, 6, 7, 33):
        a = rng.random((n, 32), dtype=np.float32)
        c = np.full((n, 24), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5, err_msg=f"n={n}")


def test_the_latest_round_decides_its_sizes(hint_log):
    """Times of the same kernel logged at other moments do not compare: a size the latest
    round measured takes its choice from that round, even against a faster older record."""
    src, tensors = hint_log
    records = record.load(src)
    at_32 = sorted((r for r in records if r.ok and dict(r.size_point["sizes"])["n"] == 32),
                   key=lambda r: r.mean_cost)
    fast_old, slow = at_32[0], at_32[-1]
    assert fast_old.candidate != slow.candidate
    newer = record.Record(**{**slow.__dict__, "costs": (1.0,),
                             "size_point": {**slow.size_point, "round": 7}})
    other = record.Record(**{**fast_old.__dict__, "costs": (2.0,),
                             "size_point": {**fast_old.size_point, "round": 7}})
    older_round = record.Record(**{**fast_old.__dict__, "costs": (0.5,),
                                   "size_point": {**fast_old.size_point, "round": 3}})
    d, _ = dispatch_from_records(tensors, records + [older_round, newer, other])
    chosen = dict((s["n"], sched) for s, sched in d.cases)[32]
    want, _ = dispatch_from_records(tensors, [newer])
    assert str(lower(chosen, tensors)) == str(lower(want.cases[0][1], tensors))


def test_too_many_cross_measurements_probe_the_hints_only(hint_log, monkeypatch):
    _, tensors = hint_log
    records = record.load(hint_log[0])
    monkeypatch.setattr(cross_sizes, "MAX_CROSS", 1)
    db = autotune.Database.in_memory(records)              # the round's records: kept here
    stats = cross_sizes.cross_measure(
        tensors, db, size_points.hint_points(tensors, {"n": [1, 32]}),
        size_points.symbolic_key(tensors), str(Target.parse("llvm")),
        autotune.measure_option(**FAST), quiet=True)
    sizes = [dict(r.size_point["sizes"])["n"] for r in list(db)[len(records):]]
    assert stats.measured == len(sizes) > 0
    assert set(sizes) == {1, 32}                   # the hints alone


def test_one_schedule_has_nothing_to_be_measured_against(hint_log):
    _, tensors = hint_log
    records = record.load(hint_log[0])
    best = min(records, key=lambda r: r.mean_cost if r.ok else float("inf"))
    stats = cross_sizes.cross_measure(
        tensors, [best], size_points.hint_points(tensors, {"n": [1, 32]}),
        size_points.symbolic_key(tensors), str(Target.parse("llvm")), None, quiet=True)
    assert stats.probes == stats.measured == 0


def test_the_round_measures_the_kernel_the_dispatch_deploys(hint_log):
    """A contender is built once on the symbolic declaration, as the dispatch builds it, and
    timed on arrays of the probe's sizes; the reference stays built for those sizes."""
    import pickle
    from einloop.autotune.measure import builder
    from einloop.autotune.measure.local import Measurer
    _, tensors = hint_log
    task = size_points.bound_task(tensors, {"n": 7}, "llvm", deployed=True)
    blob = pickle.dumps(task)
    ref = builder.build_candidate(blob, None).payload
    steps = task.default_steps()
    cand = builder.build_candidate(blob, task.candidate(steps).wire).payload
    assert ref.kernel.args[0].shape == (7, 32) and not ref.kernel.vars
    assert ref.exact.args[0].dtype == "float64" and ref.exact.args[0].shape == (7, 32)
    assert cand.args[0].shape == ("n", 32) and [v.name for v in cand.vars] == ["n"]
    with Measurer(task, autotune.measure_option(**FAST)) as m:
        result, = m.measure_batch([steps])
    assert result.ok, result


def test_a_symbolic_signature_fits_arrays_binding_each_extent_once():
    from einloop.autotune.measure.runner import fits
    sym = [("float32", ("n", 32)), ("float32", (32, 24)), ("float32", ("n", 24))]
    assert fits(sym, [("float32", (7, 32)), ("float32", (32, 24)), ("float32", (7, 24))])
    assert not fits(sym, [("float32", (7, 32)), ("float32", (32, 24)), ("float32", (8, 24))])
    assert not fits(sym, [("float64", (7, 32)), ("float32", (32, 24)), ("float32", (7, 24))])
    assert not fits(sym, [("float32", (7, 32)), ("float32", (32, 25)), ("float32", (7, 24))])
    assert not fits(sym[:2], sym)


def test_a_contender_that_keeps_the_cores_busy_at_the_smallest_size(wide_hint_log):
    """A schedule parallel over blocks of 8 rows runs on one core at n = 1: where a hint's
    best two are such, its best parallel one at the smallest size is measured too."""
    from einloop.autotune.space.sketch.analysis import MachineModel as Machine
    _, tensors = wide_hint_log
    records = record.load(wide_hint_log[0])
    key, target = size_points.symbolic_key(tensors), str(Target.parse("llvm"))
    points = size_points.hint_points(tensors, {"n": [1, 32]})
    cores = Machine.of("llvm").cores
    chosen = cross_sizes._contenders(autotune.Database.in_memory(records), key, target, ["n"],
                                     tensors, points)
    busy = [cross_sizes._busy_at(steps, tensors, {"n": 1}, cores) for _, steps in chosen]
    assert cores < 2 or any(busy)
    # a row-block-parallel schedule is not busy at n = 1, a column-parallel one is
    row_par = [Step("split", "C", {"axis": "i", "factor": 8}),
               Step("parallel", "C", {"axis": "i.outer"})]
    col_par = [Step("split", "C", {"axis": "j", "factor": 8}),
               Step("parallel", "C", {"axis": "j.outer"})]
    assert not cross_sizes._busy_at(row_par, tensors, {"n": 1}, 2)
    assert cross_sizes._busy_at(row_par, tensors, {"n": 16}, 2)
    assert cross_sizes._busy_at(col_par, tensors, {"n": 1}, 2)


def test_the_round_times_each_measurement_for_at_least_min_repeat_ms():
    """Five calls of a 50 us kernel pay its threads' wake-up each time: the round's
    measurements last MIN_REPEAT_MS at least, whatever else the user's option says."""
    from einloop.autotune.measure import common as measure
    settled = measure.settled(autotune.measure_option(number=2, min_repeat_ms=0, timeout=7))
    assert settled.min_repeat_ms == measure.MIN_REPEAT_MS >= 10
    assert settled.number == 2 and settled.timeout == 7
    assert measure.settled(None).min_repeat_ms == measure.MIN_REPEAT_MS
    longer = autotune.measure_option(min_repeat_ms=500)
    assert measure.settled(longer).min_repeat_ms == 500


def test_finer_blocks_split_the_outer_block_of_a_symbolic_axis_like_the_split_inside_it():
    """Tuned at 16 rows, a schedule parallel over blocks of 8 (4-row tiles) runs on one core at
    8 rows: its variant over blocks of 4 keeps the same micro-kernel and both cores busy."""
    tensors = dense(te.size_var("n"))
    steps = (Step("split", "C", {"axis": "i", "factor": 8}),
             Step("split", "C", {"axis": "i.inner", "factor": 4}),
             Step("split", "C", {"axis": "j", "factor": 8}),
             Step("parallel", "C", {"axis": "i.outer"}))
    finer = cross_sizes._finer_blocks(steps, tensors)
    assert finer == (Step("split", "C", {"axis": "i", "factor": 4}),) + steps[1:]
    assert not cross_sizes._busy_at(steps, tensors, {"n": 8}, 2)
    assert cross_sizes._busy_at(finer, tensors, {"n": 8}, 2)
    # nothing finer to take: no split inside the outer one, or one as wide
    assert cross_sizes._finer_blocks(steps[:1] + steps[2:], tensors) is None
    same = (Step("split", "C", {"axis": "i", "factor": 4}),) + steps[1:]
    assert cross_sizes._finer_blocks(same, tensors) is None
    # the variant computes the same results
    from einloop.schedule.replay import replay
    f = build(replay(finer, tensors[-1:]), tensors)
    rng = np.random.default_rng(2)
    b = rng.random((32, 24), dtype=np.float32)
    for n in (1, 7, 8, 13):
        a = rng.random((n, 32), dtype=np.float32)
        c = np.full((n, 24), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5, err_msg=f"n={n}")


def test_work_at_a_size_counts_the_rows_a_padded_tile_computes():
    """An accumulator tile of 6 rows computes 12 rows at n = 7 (its tail padded), as at 12; a
    tile of 1 row computes 7.  The plain schedule's stores grow with n exactly."""
    tensors = dense(te.size_var("n"))
    tile6 = (Step("cache_write", "C", {"scope": "local"}),
             Step("split", "C", {"axis": "i", "factor": 6}),
             Step("compute_at", "C.local", {"parent": "C", "axis": "i.outer"}))
    plain = ()
    at = {n: cross_sizes._stores_at(tile6, tensors, {"n": n}) for n in (6, 7, 12)}
    assert at[7] == at[12] == 2 * at[6]
    per_row = cross_sizes._stores_at(plain, tensors, {"n": 1})
    assert cross_sizes._stores_at(plain, tensors, {"n": 7}) == 7 * per_row
    # 24 columns, 32 terms and an initial value per element
    assert per_row == 24 * (32 + 1)
    assert cross_sizes._stores_at((Step("split", "C", {"axis": "zz", "factor": 2}),),
                                  tensors, {"n": 4}) is None


def test_challengers_below_a_hint_are_its_schedules_fastest_for_their_work_there(hint_log):
    """At the probe below the hint 32 (16): the hint's step lists that are not contenders,
    at most CHALLENGERS, each ranked by its time at 32 times its work at 16 over its work at
    32; a schedule that pads 16 rows to 32 ranks by its whole time."""
    log, tensors = hint_log
    records = record.load(log)
    key, target = size_points.symbolic_key(tensors), str(Target.parse("llvm"))
    points = size_points.hint_points(tensors, {"n": [1, 32]})
    probes = cross_sizes.probe_points(points)
    db = autotune.Database.in_memory(records)
    contenders = cross_sizes._contenders(db, key, target, ["n"], tensors, points)
    taken = {k for k, _ in contenders}
    chosen = cross_sizes._challengers(db, key, target, ["n"], tensors, points, probes, taken)
    assert set(chosen) <= {(16,)}
    picked = chosen.get((16,), [])
    assert len(picked) <= cross_sizes.CHALLENGERS and not taken & {k for k, _ in picked}
    score = {}
    for r in records:
        if r.ok and dict(r.size_point["sizes"])["n"] == 32:
            steps = StepsCandidate.from_json(r.candidate["steps"]).steps
            k = StepsCandidate(steps).key
            if k in taken:
                continue
            ratio = (cross_sizes._stores_at(steps, tensors, {"n": 16})
                     / cross_sizes._stores_at(steps, tensors, {"n": 32}))
            score[k] = min(score.get(k, float("inf")), r.mean_cost * ratio)
    assert [k for k, _ in picked] == sorted(score, key=score.get)[:len(picked)]
    assert len(picked) == min(cross_sizes.CHALLENGERS, len(score))
