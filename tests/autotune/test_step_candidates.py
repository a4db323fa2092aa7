"""One tuning core for both kinds of task: step-list candidates of an operator declared by a
plain function go through the same Measurer (real processes), tuning loop, log,
``einloop log --code`` and ``apply_history_best`` as template configs; template records keep
their format, and a step-list (DAG) record of einloop 0.1 still loads."""
import json
import pickle

import numpy as np
import pytest

from einloop import TuningError, TuningLogError, autotune, build, lower
from einloop.autotune.log import record
from einloop.autotune.space.candidate import CandidateKind, StepsCandidate
from einloop.autotune.task.auto import AutoTask
from einloop.autotune.task.create import task_from_record
from einloop.autotune.measure.common import MeasureErrorNo, measure_option
from einloop.autotune.task.base import TaskKind
from einloop.autotune.search.tuner import Tuner
from einloop.cli import main as cli_main
from einloop.schedule.steps import Step

import dag_ops
import tiny_templates  # noqa: F401  (registers tiny_matmul)

SHAPE = (32, 24, 16)
FAST = dict(number=1, repeat=2, timeout=20, n_parallel=2)


class ListTuner(Tuner):
    """Measures a fixed list of step lists: the shared tuning loop on hand-made candidates."""
    n_seeds = 0                     # no heuristic configs first: only the list

    def __init__(self, task, candidates):
        super().__init__(task)
        self.todo = list(candidates)

    def next_batch(self, n):
        out = [c for c in self.todo if c.key not in self.visited][:n]
        self.todo = [c for c in self.todo if c not in out]
        return out

    def has_next(self):
        return any(c.key not in self.visited for c in self.todo)


@pytest.fixture(scope="module")
def task():
    return autotune.create_task(dag_ops.gemm, SHAPE)


@pytest.fixture(scope="module")
def hand():
    return StepsCandidate.of(dag_ops.hand_gemm_schedule(*SHAPE)[0])


def _gemm_arrays(seed=0):
    rng = np.random.default_rng(seed)
    M, N, K = SHAPE
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    return a, b, np.zeros((M, N), "float32")


def test_a_function_task_takes_step_lists_as_candidates(task, hand):
    assert isinstance(task, AutoTask) and task.kind is TaskKind.AUTO
    assert task.flop == 2 * 32 * 24 * 16
    again = pickle.loads(pickle.dumps(task))               # what a build worker receives
    assert again.workload_key == task.workload_key and again.module == "dag_ops"
    assert task.workload_key != autotune.create_task("tiny_matmul", SHAPE).workload_key
    # a candidate is its steps, by value; it travels to the builder as itself
    assert hand.kind is CandidateKind.STEPS and len(hand.steps) == 5
    assert pickle.loads(pickle.dumps(hand)) == hand and hand.wire is hand
    assert task.candidate(list(hand.steps)) == hand
    assert StepsCandidate.from_json(json.loads(json.dumps(hand.to_json()))) == hand
    assert hand.label.startswith("step list ") and "(5 steps)" in hand.label
    s, args = task.instantiate(hand)
    assert str(lower(s, args)) == str(lower(*dag_ops.hand_gemm_schedule(*SHAPE)))


def test_a_config_is_a_candidate_too():
    task = autotune.create_task("tiny_matmul", SHAPE)
    cfg = task.config_space.get(7)
    assert (cfg.kind, cfg.key, cfg.wire, cfg.fault_index, cfg.label) == \
        (CandidateKind.CONFIG, 7, 7, 7, "config 7")
    assert cfg.to_record() == {"config": cfg.to_json()}
    assert task.candidate(7).index == 7 and task.candidate(cfg) is cfg
    with pytest.raises(TuningError, match="outside the space"):
        task.candidate(len(task.config_space))
    with pytest.raises(TuningLogError, match="holds a step list"):
        task.candidate_from_json({"steps": []})


def test_front_end_mistakes_are_clear_errors(task):
    def local(n):
        return []
    with pytest.raises(TuningError, match="module-level function"):
        autotune.create_task(local, (4,))
    with pytest.raises(TuningError, match="a config .* or a step list"):
        task.candidate("split C")
    with pytest.raises(TuningLogError, match="holds a config"):
        task.candidate_from_json({"config": {"index": 0, "entities": {}}})


def test_step_lists_are_measured_logged_printed_and_deployed(task, hand, tmp_path, capsys):
    log = str(tmp_path / "gemm_steps.jsonl")
    broken = StepsCandidate((Step("split", "C", {"axis": "no_such_axis", "factor": 2}),))
    tuner = ListTuner(task, [hand, broken, StepsCandidate(())])
    tuner.tune(3, measure_option=measure_option(**FAST), callbacks=[autotune.log_to_file(log)],
               quiet=True)
    by_key = {c.key: r for c, r in tuner.history}
    assert by_key[hand.key].ok and by_key[StepsCandidate(()).key].ok
    assert by_key[broken.key].error_no is MeasureErrorNo.INSTANTIATION_ERROR
    assert "no_such_axis" in by_key[broken.key].error_msg

    # read back: records of the operator holding their step lists
    records = record.load(log)
    assert len(records) == 3
    assert {r.kind for r in records} == {TaskKind.AUTO}
    assert {r.candidate_kind for r in records} == {CandidateKind.STEPS}
    assert task.candidate(task.candidate_from_json(records[0].candidate)) in \
        {hand, broken, StepsCandidate(())}
    assert {r.error_no for r in records} == {MeasureErrorNo.NO_ERROR,
                                             MeasureErrorNo.INSTANTIATION_ERROR}

    # einloop log --code prints the best step list as schedule code that runs as is
    assert cli_main(["log", log]) == 0
    summary = capsys.readouterr().out
    assert "gemm(32, 24, 16)" in summary and "best step list" in summary
    assert cli_main(["log", log, "--code"]) == 0
    code = capsys.readouterr().out
    assert "from dag_ops import gemm" in code and "s = create_schedule([C])" in code
    namespace = {"print": lambda *a, **k: None}
    exec(compile(code, "<einloop log --code>", "exec"), namespace)
    best = autotune.pick_best(records)[task.workload_key]
    expected = lower(*task.instantiate(task.candidate_from_json(best.candidate)))
    assert str(lower(namespace["s"], namespace["args"])) == str(expected)

    # deploy: the best logged step list, replayed on fresh tensors, computes A @ B
    with autotune.apply_history_best(log) as ctx:
        cand, reason = ctx.lookup(task.workload, task)
        assert cand == task.candidate_from_json(best.candidate) and "best of the log" in reason
        s, args = ctx.instantiate(task)
    assert ctx.hits == 1 and s.steps == list(cand.steps)
    a, b, c = _gemm_arrays()
    build(s, args)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_an_operator_missing_from_the_log_falls_back_once_or_raises(task, tmp_path):
    other = autotune.create_task(dag_ops.scaled_relu, (64,))
    log = tmp_path / "empty_but_other.jsonl"
    res = autotune.MeasureResult((1e-6,), MeasureErrorNo.NO_ERROR, "", 0.1, 0.0)
    record.append(str(log), [record.encode(other, StepsCandidate(()), res)])
    ctx = autotune.apply_history_best(str(log))
    with pytest.warns(autotune.UntunedScheduleWarning, match="no records of an operator"):
        s, args = ctx.instantiate(task)
    assert s.steps == list(task.default_steps()) and ctx.misses == 1
    with pytest.raises(TuningError, match="strict=True"):
        autotune.apply_history_best(str(log), strict=True).instantiate(task)
    s, _ = ctx.instantiate(other)
    assert ctx.hits == 1


def _step_record_line(task, steps_json):
    res = autotune.MeasureResult((1e-6,), MeasureErrorNo.NO_ERROR, "", 0.1, 0.0)
    d = json.loads(record.encode(task, StepsCandidate(()), res))
    d["steps"] = steps_json
    return json.dumps(d)


@pytest.mark.parametrize("steps_json,message", [
    ([{"kind": "splitt", "stage": "C", "args": {}}], "splitt"),
    ([{"kind": "split", "stage": "C", "args": {"axis": "i", "factor": "four"}}], "factor"),
    ({"kind": "split"}, "list"),
])
def test_a_malformed_step_record_is_an_error_naming_the_line(task, hand, tmp_path, steps_json,
                                                            message):
    log = tmp_path / "bad.jsonl"
    good = _step_record_line(task, hand.to_json())
    log.write_text(good + "\n" + _step_record_line(task, steps_json) + "\n" + good + "\n")
    with pytest.raises(TuningLogError, match=rf"bad.jsonl:2: the record's step list is "
                                             rf"malformed: .*{message}"):
        record.load(str(log))


def test_a_record_holds_exactly_one_candidate(task, hand, tmp_path):
    d = json.loads(_step_record_line(task, hand.to_json()))
    d["config"] = {"index": 0, "entities": {}}
    log = tmp_path / "two.jsonl"
    log.write_text(json.dumps(d) + "\n")
    with pytest.raises(TuningLogError, match="two.jsonl:1: a record holds exactly one candidate"):
        record.load(str(log))


# a record as einloop wrote it before step lists existed (schema version 1)
OLD_TEMPLATE_RECORD = (
    '{"config": {"entities": {"tile_i": [-1, 4], "tile_j": [-1, 2], "vectorize": true}, '
    '"index": 7}, "einloop": "0.1.0", "result": {"all_cost": 0.5, "costs": [1e-05, 2e-05], '
    '"error_kind": "NO_ERROR", "error_msg": "", "error_no": 0}, "task": {"args": [16, 32, 8], '
    '"cpu": "znver3", "flop": 8192, "kwargs": {}, "module": "tiny_templates", "target": '
    '"llvm -mcpu=znver3", "template": "tiny_matmul", "workload": '
    '"[\\"tiny_matmul\\", [16, 32, 8], {}]"}, "timestamp": 1700000000.0, "version": 1}')


def test_template_records_keep_their_format_and_old_logs_load(tmp_path):
    log = tmp_path / "old.jsonl"
    log.write_text(OLD_TEMPLATE_RECORD + "\n")
    (r,) = record.load(str(log))
    assert (r.kind, r.candidate_kind, r.name, r.template) == \
        (TaskKind.TEMPLATE, CandidateKind.CONFIG, "tiny_matmul", "tiny_matmul")
    assert r.config["index"] == 7 == r.index and r.ok and r.error_no is MeasureErrorNo.NO_ERROR
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    assert task.candidate_from_json(r.candidate).index == 7
    # what this version writes for a template is laid out exactly as before
    res = autotune.MeasureResult((1e-05, 2e-05), MeasureErrorNo.NO_ERROR, "", 0.5, 1700000000.0)
    new, old = json.loads(record.encode(task, task.config_space.get(7), res)), \
        json.loads(OLD_TEMPLATE_RECORD)
    # ... plus where the template's module is, as auto records say (einloop log --code uses it)
    assert new["task"].pop("module_file").endswith("tiny_templates.py")
    for d in (new, old):
        d.pop("einloop")
        d["task"].pop("target"), d["task"].pop("cpu")
    assert new == old


# a record of a step-list (DAG) task, as einloop 0.1 wrote them before auto-scheduling replaced it
OLD_DAG_RECORD = (
    '{"einloop": "0.1.0", "result": {"all_cost": 0.1, "costs": [1e-06], "error_kind": '
    '"NO_ERROR", "error_msg": "", "error_no": 0}, "steps": [], "task": {"args": [8, 8, 8], '
    '"cpu": "znver3", "flop": 1024, "function": "gemm", "kind": "dag", "kwargs": {}, "module": '
    '"dag_ops", "target": "llvm -mcpu=znver3", "workload": "{\\"args\\": [8, 8, 8], '
    '\\"dag\\": \\"gemm\\", \\"kwargs\\": {}}"}, "timestamp": 1700000000.0, "version": 1}')


def test_old_dag_records_load_and_asking_for_their_task_says_what_to_do(tmp_path):
    log = tmp_path / "old_dag.jsonl"
    log.write_text(OLD_DAG_RECORD + "\n")
    (r,) = record.load(str(log))
    assert (r.kind, r.candidate_kind, r.name) == (TaskKind.DAG, CandidateKind.STEPS, "gemm")
    with pytest.raises(TuningLogError, match="no longer tunes.*auto_schedule"):
        task_from_record(r)
