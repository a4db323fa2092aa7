"""After a search, its best schedules are measured again side by side (a final round), and the
log's best is the round's while the round is the latest thing measured of that workload.

A search measures each schedule at its own moment, minutes apart, on a machine whose speed
drifts; the round measures its finalists one after the other, several passes over, so that each
pass sees them all at the same moment."""
from einloop import autotune
from einloop.autotune.log.database import (Database, Order, deciding_round, fastest_schedules,
                                           log_to_file, typical_best)
from einloop.autotune.measure.common import measure_option
from einloop.autotune.measure.local import MeasureResult
from einloop.autotune.measure.status import MeasureErrorNo
from einloop.autotune.search.finals import FINAL_PASSES, FINALISTS, final_round
from einloop.autotune.search.tuner import RandomTuner

import auto_ops
import oracle
import tiny_templates  # noqa: F401  (registers tiny_matmul)

FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)


def at(cost, when):
    return MeasureResult((cost,), MeasureErrorNo.NO_ERROR, "", 0.1, when)


def test_the_latest_final_round_decides_until_a_search_measures_again(tmp_path):
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    path = tmp_path / "log.jsonl"
    db = Database(path)
    db.append(task, [1, 2, 3], [at(1.0e-3, 10), at(1.1e-3, 11), at(1.2e-3, 12)])
    assert db.best()[task.workload_key].index == 1          # the search's fastest
    # side by side, config 2 is the faster: 0.90, 0.95, 0.92 against 1.30, 1.20, 1.25
    db.append(task, [2, 1] * 3, [at(c, 20 + n) for n, c in enumerate(
        (0.90e-3, 1.30e-3, 0.95e-3, 1.20e-3, 0.92e-3, 1.25e-3))], final_round=7)
    records = db.query(workload=task.workload_key)
    assert deciding_round(records) == 7
    best = db.best()[task.workload_key]
    assert (best.index, best.final_round, best.mean_cost) == (2, 7, 0.92e-3)
    reread = Database(path)                                 # the round survives the log
    assert reread.best()[task.workload_key].final_round == 7
    with autotune.apply_history_best(str(path)) as ctx:     # and deploying agrees
        assert ctx.best[task.workload_key].index == 2
    # a later round decides in its place
    db.append(task, [1, 2], [at(0.8e-3, 30), at(0.9e-3, 31)], final_round=8)
    assert db.best()[task.workload_key].index == 1
    # a search that measures after the round: the round is no longer the last word
    db.append(task, [4], [at(0.5e-3, 40)])
    assert deciding_round(db.query(workload=task.workload_key)) is None
    assert db.best()[task.workload_key].index == 4
    assert typical_best(db.query(workload=task.workload_key)).index == 4


def test_the_finalists_are_the_fastest_distinct_schedules_by_their_typical_time(tmp_path):
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    db = Database(tmp_path / "log.jsonl")
    db.append(task, [1, 1, 2, 3, 4], [at(c, n) for n, c in enumerate(
        (0.5e-3, 2.0e-3, 1.0e-3, 1.1e-3, 3.0e-3))])
    # config 1: 0.5 and 2.0, typical 2.0 (the slower of two)
    fastest = fastest_schedules(db.query(workload=task.workload_key), 3)
    assert [r.index for r in fastest] == [2, 3, 1]


def _tuned(tmp_path, n_trial):
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    log = tmp_path / "log.jsonl"
    RandomTuner(task, seed=1).tune(n_trial, measure_option=measure_option(**FAST),
                                   callbacks=[log_to_file(str(log))], quiet=True, confirm=False)
    return task, log


def test_a_final_round_measures_the_finalists_in_interleaved_passes_once(tmp_path):
    task, log = _tuned(tmp_path, 20)
    db = Database(log)
    searched = db.query(workload=task.workload_key)
    chosen = fastest_schedules(searched, FINALISTS)
    stats = final_round(task, db, measure_option(**FAST))
    assert stats.round is not None and stats.finalists == len(chosen) == FINALISTS
    assert stats.failed == 0
    round_records = [r for r in Database(log).query(workload=task.workload_key, order=Order.WRITTEN)
                     if r.final_round == stats.round]
    assert [r.index for r in round_records] == [r.index for r in chosen] * FINAL_PASSES
    best = Database(log).best()[task.workload_key]
    assert best.final_round == stats.round
    # measured again only once something new is measured
    assert final_round(task, Database(log), measure_option(**FAST)).round is None
    assert len(Database(log)) == len(searched) + FINALISTS * FINAL_PASSES


def test_a_short_search_has_no_final_round(tmp_path):
    task, log = _tuned(tmp_path, 6)
    stats = final_round(task, Database(log), measure_option(**FAST))
    assert stats.round is None and str(stats) == "no final round"
    assert all(r.final_round is None for r in Database(log))


def test_auto_schedule_ends_with_a_final_round_unless_told_not_to(tmp_path):
    shape = (16, 24, 8)
    for final in (True, False):
        log = tmp_path / f"log_{final}.jsonl"
        s, args = autotune.auto_schedule(auto_ops.gemm(*shape), n_trial=24, log=str(log),
                                         measure_option=measure_option(**FAST), quiet=True,
                                         final=final)
        oracle.check(s, args[:2], args[2:], lambda a, b: [a @ b])
        rounds = {r.final_round for r in Database(log) if r.final_round is not None}
        assert len(rounds) == (1 if final else 0)
        if final:
            best = Database(log).best()
            assert all(r.final_round in rounds for r in best.values())
