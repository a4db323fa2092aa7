"""The record database: queries by workload or symbolic key and target, fastest first; appends
that are durable when they return; one read of the log per job; another store plugs in."""
import json
import sqlite3

import pytest

from einloop import TuningLogError, autotune, te
from einloop.autotune.log import record
from einloop.autotune.log.database import Database, Order, RecordStore, log_to_file
from einloop.autotune.measure.local import MeasureResult
from einloop.autotune.measure.status import MeasureErrorNo
from einloop.autotune.symbolic import cross_sizes, points as size_points
from einloop.autotune.symbolic import tune as dynamic_tune
from einloop.autotune.symbolic.dispatch import dispatch_from_records
from einloop.autotune.symbolic.tune import tune
from ops import gemm

import tiny_templates  # noqa: F401  (registers tiny_matmul)

FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)


def ok(cost, when=0.0):
    return MeasureResult((cost, cost), MeasureErrorNo.NO_ERROR, "", 0.1, when)


def failed(when=0.0):
    return MeasureResult((), MeasureErrorNo.COMPILE_ERROR, "no", 0.1, when)


@pytest.fixture(scope="module")
def tasks():
    return (autotune.create_task("tiny_matmul", (16, 32, 8)),
            autotune.create_task("tiny_matmul", (8, 16, 8)))


def dense(n):
    ins, outs, _ = gemm(M=n, N=24, K=32)
    return ins + outs


def test_queries_by_workload_and_target_fastest_first(tasks, tmp_path):
    big, small = tasks
    db = Database(tmp_path / "log.jsonl")
    db.append(big, [3, 1, 4, 5, 9], [ok(3e-3), ok(1e-3), failed(), ok(1e-3), ok(2e-3)])
    db.append(small, [0, 2], [ok(5e-4), ok(7e-4)])
    got = db.query(workload=big.workload_key)
    assert [r.index for r in got] == [1, 5, 9, 3]        # a tie keeps the order written
    assert [r.index for r in db.query(workload=big.workload_key, ok_only=False)] == \
        [1, 5, 9, 3, 4]                                   # a failure is slowest
    assert [r.index for r in db.query(workload=big.workload_key, ok_only=False,
                                      order=Order.WRITTEN)] == [3, 1, 4, 5, 9]
    assert [r.index for r in db.query()] == [0, 2, 1, 5, 9, 3]
    assert db.query(workload=big.workload_key, target="llvm -mcpu=none") == []
    assert db.query(workload=big.workload_key, target=big.target) == got
    assert db.query(workload="no such workload") == []
    best = db.best()
    assert {k: r.index for k, r in best.items()} == {big.workload_key: 1, small.workload_key: 0}
    assert db.best(target="llvm -mcpu=none") == {}
    with pytest.raises(TypeError, match="not both"):
        db.query(workload=big.workload_key, symbolic_key="x")


def test_pick_best_is_the_fastest_error_free_record_per_workload(tasks, tmp_path):
    big, small = tasks
    db = Database(tmp_path / "log.jsonl")
    db.append(big, [2, 6, 7], [ok(2e-3), ok(2e-3), failed()])
    db.append(small, [1], [failed()])
    records = record.load(tmp_path / "log.jsonl")
    best = autotune.pick_best(records)
    assert list(best) == [big.workload_key] and best[big.workload_key].index == 2
    assert autotune.pick_best(records, big.target)[big.workload_key].index == 2
    assert autotune.pick_best(records, "llvm -mcpu=none") == {}


def test_appends_are_in_the_file_when_they_return_and_read_once(tasks, tmp_path, monkeypatch):
    big, _ = tasks
    path = tmp_path / "sub" / "log.jsonl"
    loads = []
    real = record.load
    monkeypatch.setattr(record, "load", lambda p: loads.append(p) or real(p))
    db = Database(path)
    db.append(big, [0, 1], [ok(2e-3), ok(1e-3)])        # not read yet: nothing in memory
    assert loads == [] and len(real(path)) == 2
    assert [r.index for r in db.query()] == [1, 0]          # read now: each record once
    assert len(loads) == 1
    new = db.append(big, [2], [ok(5e-4)])
    assert [r.index for r in new] == [2] and [r.index for r in db.query()] == [2, 1, 0]
    assert len(loads) == 1                                   # appended to memory, not re-read
    assert [r.index for r in real(path)] == [0, 1, 2]       # and to the file, durably
    assert [r.__dict__ for r in db] == [r.__dict__ for r in real(path)]
    # a killed writer's half line is closed by the next append, as record.append does
    path.write_text(path.read_text() + path.read_text().splitlines()[0][:30])
    with pytest.warns(record.TruncatedLogWarning):
        again = Database(path).load()
    assert len(again) == 3
    again.append(big, [3], [ok(1e-3)])
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[-1])["config"]["index"] == 3
    assert [r.index for r in again] == [0, 1, 2, 3]


def test_open_needs_the_log_and_memory_writes_nowhere(tasks, tmp_path):
    with pytest.raises(TuningLogError, match="no tuning log at"):
        Database.open(tmp_path / "missing.jsonl")
    assert len(Database(tmp_path / "missing.jsonl")) == 0       # lazily: a missing log is empty
    mem = Database.in_memory()
    mem.append(tasks[0], [0], [ok(1e-3)])
    assert len(mem) == 1 and list(tmp_path.iterdir()) == []
    assert isinstance(mem, RecordStore) and not isinstance([], RecordStore)


def test_a_tuner_resumes_from_its_database_without_reading_the_log_again(tasks, tmp_path,
                                                                         monkeypatch):
    big, _ = tasks
    path = tmp_path / "log.jsonl"
    cb = log_to_file(path)
    first = autotune.RandomTuner(big, seed=3)
    first.tune(4, measure_option=autotune.measure_option(**FAST), quiet=True, callbacks=[cb])
    loads = []
    real = record.load
    monkeypatch.setattr(record, "load", lambda p: loads.append(p) or real(p))
    second = autotune.RandomTuner(big, seed=3)              # the same callback: the same records
    second.tune(6, measure_option=autotune.measure_option(**FAST), quiet=True, callbacks=[cb])
    assert loads == [] and len(second.history) == 6
    assert len({r.index for r in real(path)}) == len(real(path)) == 6


class SqliteStore:
    """A RecordStore kept in SQLite: what a store other than a JSON Lines log needs to do."""

    def __init__(self):
        self.db = sqlite3.connect(":memory:")
        self.db.execute("create table r (seq integer primary key, workload, key, target, ok, "
                        "cost, line)")

    def append(self, task, candidates, results):
        out = []
        for c, res in zip(candidates, results):
            line = record.encode(task, c, res)
            r = record.decode(line)
            self.db.execute("insert into r (workload, key, target, ok, cost, line) values "
                            "(?, ?, ?, ?, ?, ?)", (r.workload, r.size_point.get("key"), r.target,
                                                   r.ok, r.mean_cost, line))
            out.append(r)
        return out

    def query(self, *, workload=None, symbolic_key=None, target=None, ok_only=True,
              order=Order.FASTEST):
        where, args = ["1"], []
        for column, value in (("workload", workload), ("key", symbolic_key), ("target", target)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if ok_only:
            where.append("ok")
        by = "cost, seq" if order is Order.FASTEST else "seq"
        rows = self.db.execute(f"select line from r where {' and '.join(where)} order by {by}",
                               args)
        return [record.decode(line) for line, in rows]

    def best(self, target=None):
        out = {}
        for r in self.query(target=target):
            out.setdefault(r.workload, r)
        return out

    def __iter__(self):
        return iter(self.query(ok_only=False, order=Order.WRITTEN))

    def __len__(self):
        return self.db.execute("select count(*) from r").fetchone()[0]


def test_another_store_serves_a_tuner_and_the_deploy_lookup(tasks, tmp_path):
    big, _ = tasks
    store = SqliteStore()
    assert isinstance(store, RecordStore)
    autotune.RandomTuner(big, seed=1).tune(4, measure_option=autotune.measure_option(**FAST),
                                           quiet=True, callbacks=[log_to_file(store)])
    assert len(store) == 4
    resumed = autotune.RandomTuner(big, seed=1)
    resumed.tune(4, measure_option=autotune.measure_option(**FAST), quiet=True,
                 callbacks=[log_to_file(store)])
    assert len(store) == 4 and len(resumed.history) == 4    # all four resumed, none measured
    with autotune.apply_history_best(store) as ctx:
        assert ctx.lookup(big.workload)[0].index == store.best()[big.workload_key].index


def test_a_symbolic_tuning_job_reads_its_log_once(tmp_path, monkeypatch):
    """Searches at two sizes, a cross-size round and the dispatch: one read of the log (the
    searches, the round and the dispatch each read it again before the database)."""
    loads = []
    real = record.load
    monkeypatch.setattr(record, "load", lambda p: loads.append(p) or real(p))
    tensors = dense(te.size_var("n"))
    log = str(tmp_path / "dense.jsonl")
    monkeypatch.setattr(dynamic_tune, "ROUND_SHARE", 0.9)   # 3 trials per size, a full round
    monkeypatch.setattr(cross_sizes, "PASSES", 1)           # of one pass: the reads are the same
    d = tune(tensors, 60, {"n": [1, 8]}, log, "llvm",
             lambda task: autotune.RandomTuner(task, seed=0),
             measure_option=autotune.measure_option(**FAST), quiet=True)
    assert loads == [log]
    records = real(log)
    assert any("round" in r.size_point for r in records)        # the round ran
    assert {r.size_point["key"] for r in records} == {size_points.symbolic_key(tensors)}
    # the dispatch made from the job's database is the one a fresh read of the log makes
    again, _ = dispatch_from_records(tensors, Database.open(log))
    cases = [s for s, _ in d.cases]
    assert cases == [s for s, _ in again.cases]
    # the searched sizes, and between them a size the round added (which one depends on the
    # configs the seeded random tuner drew from the space)
    assert cases[0] == {"n": 1} and cases[-1] == {"n": 8} and len(cases) >= 3
