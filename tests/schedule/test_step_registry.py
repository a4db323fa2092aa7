"""Meta-test of the step registry (einloop/schedule/steps.py).

Every public Stage/Schedule method that transforms the schedule has a registered step kind (the
short allow-lists below name the rest and why); every registered kind round-trips: recorded ->
JSON -> replayed gives the same lowered IR, and its printed code, run, gives the same lowered IR
too; a step the registry does not accept fails to load with a ScheduleError naming it.
"""
import inspect
import json
import pickle

import pytest

from einloop import te, create_schedule, lower
from einloop.errors import InternalError, ScheduleError
from einloop.schedule import Schedule, Stage
from einloop.schedule import replay as R, steps as S
from einloop.schedule.steps import Step, StepKind

#: public methods that are no step of their own, and why.
STAGE_NOT_STEPS = {
    "iter_var": "accessor: looks a loop up by name",
    "tile": "composite: records split, split and reorder",
}
SCHEDULE_NOT_STEPS = {
    "stage_named": "accessor: looks a stage up by name",
    "apply_steps": "replays recorded steps",
    "copy": "replays recorded steps",
}


def _public_methods(cls):
    return {name for name, member in vars(cls).items()
            if not name.startswith("_") and inspect.isfunction(member)}


@pytest.mark.parametrize("cls, target, not_steps", [
    (Stage, S.StepScope.STAGE, STAGE_NOT_STEPS),
    (Schedule, S.StepScope.SCHEDULE, SCHEDULE_NOT_STEPS),
])
def test_every_transforming_method_is_a_registered_step(cls, target, not_steps):
    methods = _public_methods(cls)
    assert set(not_steps) <= methods, f"stale allow-list entries: {set(not_steps) - methods}"
    known = {k.value: k for k in S.registered_kinds()}
    for name in sorted(methods - set(not_steps)):
        assert name in known, (f"{cls.__name__}.{name} transforms the schedule but has no step kind:"
                               f" register it in einloop/schedule/steps.py (or allow-list it here)")
        assert S.spec(known[name]).target is target, name
    for kind in S.registered_kinds():
        if S.spec(kind).target is target:
            assert kind.value in methods, f"step kind {kind.value} is no method of {cls.__name__}"


def test_every_step_kind_is_registered():
    assert set(S.registered_kinds()) == set(StepKind)


# one example schedule per step kind -------------------------------------------------------------

def _workload():
    """B = 2A; C[i, j] = sum_k B[i, k] * A[k % 8, j]: a producer, a reduction, a shared input."""
    A = te.placeholder((8, 12), name="A")
    B = te.compute((8, 12), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis((0, 12), name="k")
    C = te.compute((8, 12), lambda i, j: te.sum(B[i, k] * A[k % 8, j], axis=k), name="C")
    return A, B, C


def _split(s, A, B, C):
    s[C].split(s[C].op.axis[0], factor=4)
    s[B].split(s[B].op.axis[1], nparts=3)


def _fuse(s, A, B, C):
    s[C].fuse(*s[C].op.axis)


def _reorder(s, A, B, C):
    i, j = s[C].op.axis
    s[C].reorder(j, s[C].op.reduce_axis[0], i)


def _vectorize(s, A, B, C):
    jo, ji = s[B].split(s[B].op.axis[1], factor=4)
    s[B].vectorize(ji)


def _parallel(s, A, B, C):
    s[C].parallel(s[C].op.axis[0])


def _unroll(s, A, B, C):
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=3)
    s[C].unroll(ki)


def _compute_at(s, A, B, C):
    s[B].compute_at(s[C], s[C].op.axis[0])


def _compute_inline(s, A, B, C):
    s[B].compute_inline()


def _compute_root(s, A, B, C):
    s[B].compute_inline()
    s[B].compute_root()


def _cache_write(s, A, B, C):
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(s[C].op.axis[0], factor=2)
    s[CL].compute_at(s[C], io)


def _cache_read(s, A, B, C):
    AL = s.cache_read(A, "local", [C])
    s[AL].compute_at(s[C], s[C].op.axis[0])


def _pack(s, A, B, C):
    AP = s.pack(A, 1, 5)                  # read by B and C; 12 columns: a ragged last block
    s[AP].vectorize(s[AP].op.axis[-1])


EXAMPLES = {StepKind.SPLIT: _split, StepKind.FUSE: _fuse, StepKind.REORDER: _reorder,
            StepKind.VECTORIZE: _vectorize, StepKind.PARALLEL: _parallel,
            StepKind.UNROLL: _unroll, StepKind.COMPUTE_AT: _compute_at,
            StepKind.COMPUTE_INLINE: _compute_inline, StepKind.COMPUTE_ROOT: _compute_root,
            StepKind.CACHE_WRITE: _cache_write, StepKind.CACHE_READ: _cache_read}
EXAMPLES[StepKind.PACK] = _pack


def _rfactor(s, A, B, C):
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=5)   # 12 = 2*5 + 2: a guarded tail
    CF = s.rfactor(C, ki, factor_axis=2)
    s[CF].reorder(*s[CF].op.axis[:2], s[CF].op.reduce_axis[0], s[CF].op.axis[2])
    s[CF].vectorize(s[CF].op.axis[2])
    s[CF].compute_at(s[C], s[C].op.axis[0])


EXAMPLES[StepKind.RFACTOR] = _rfactor


def _split_residues(s, A, B, C):
    i, j = s[C].op.axis
    CR = s.split_residues(C, [j, i], [3, 2])      # any data axes, divided or not
    s[CR].reorder(*s[CR].op.axis[:-1], s[CR].op.reduce_axis[0], s[CR].op.axis[-1])
    s[CR].vectorize(s[CR].op.axis[-1])
    s[C].parallel(s[C].op.axis[0])


EXAMPLES[StepKind.SPLIT_RESIDUES] = _split_residues


def _deinterleave(s, A, B, C):
    AD = s.deinterleave(A, 3, [C])                 # A[k % 8, j]: its last axis in 3 classes
    s[AD].parallel(s[AD].op.axis[0])


EXAMPLES[StepKind.DEINTERLEAVE] = _deinterleave


def _prefetch(s, A, B, C):
    i, j = s[C].op.axis
    s[C].prefetch(B, i, offset=2)                  # C's row i reads B's row i


EXAMPLES[StepKind.PREFETCH] = _prefetch


def _nontemporal(s, A, B, C):
    jo, ji = s[B].split(s[B].op.axis[1], factor=4)
    s[B].vectorize(ji)
    s[B].nontemporal()                             # B at the root, each element stored once


EXAMPLES[StepKind.NONTEMPORAL] = _nontemporal


def _storage_order(s, A, B, C):
    i, j = s[B].op.axis
    s[B].storage_order(j, i)                       # B at the root, stored column by column


EXAMPLES[StepKind.STORAGE_ORDER] = _storage_order

#: a user's tensor intrinsic the example tensorizes with: C[4] += X[0] * Y[0, 4] (only lowered)
_X = te.placeholder((1,), name="X")
_Y = te.placeholder((1, 4), name="Y")
_r = te.reduce_axis((0, 1), name="r")
FMA4 = te.TensorIntrin(
    "test_step_registry.fma4",
    te.compute((4,), lambda j: te.sum(_X[_r] * _Y[_r, j], axis=_r), name="T"),
    "  %a = load float, ptr %in0\n  ret void", features=("fma",))


def _tensorize(s, A, B, C):
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=4)
    s[C].reorder(i, jo, s[C].op.reduce_axis[0], ji)
    s[C].tensorize(ji, FMA4)                       # C[i, 4jo:+4] += B[i, k] * A[k % 8, 4jo:+4]


EXAMPLES[StepKind.TENSORIZE] = _tensorize


def _scheduled(kind):
    A, B, C = _workload()
    s = create_schedule(C)
    EXAMPLES[kind](s, A, B, C)
    return s, [A, C]


def _ir(s, args):
    return str(lower(s, args))


@pytest.mark.parametrize("kind", list(StepKind), ids=lambda k: k.value)
def test_step_kind_round_trips_through_json(kind):
    assert kind in EXAMPLES, f"add an example schedule using {kind.value} to EXAMPLES"
    s, args = _scheduled(kind)
    assert kind in {st.kind for st in s.steps}
    payload = json.loads(json.dumps(S.steps_to_json(s.steps)))
    loaded = S.steps_from_json(payload)
    assert loaded == tuple(s.steps)
    A2, B2, C2 = _workload()
    assert _ir(R.replay(loaded, [C2]), [A2, C2]) == _ir(s, args)
    assert _ir(R.replay(payload, C2), [A2, C2]) == _ir(s, args)


@pytest.mark.parametrize("kind", list(StepKind), ids=lambda k: k.value)
def test_step_kind_prints_code_that_rebuilds_the_schedule(kind):
    s, args = _scheduled(kind)
    code = R.steps_to_code(s)
    A2, B2, C2 = _workload()
    namespace = {"C": C2, "create_schedule": create_schedule}
    exec(compile(code, f"<{kind.value} code>", "exec"), namespace)
    assert _ir(namespace["s"], [A2, C2]) == _ir(s, args), code
    assert R.steps_to_code(s.steps, s.outputs) == code
    text = str(s)                                  # the readable form names every step kind
    assert all(f".{st.kind.value}(" in text for st in s.steps)


def test_printed_code_reads_like_a_schedule():
    A, B, C = _workload()
    s = create_schedule(C)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=4)
    f = s[C].fuse(i, jo)
    s[B].compute_at(s[C], f)
    s[C].vectorize(ji)
    CL = s.cache_read(B, "local", [C])
    assert R.steps_to_code(s).splitlines() == [
        "s = create_schedule([C])",
        "i, j = s[C].op.axis",
        "k, = s[C].op.reduce_axis",
        "j_outer, j_inner = s[C].split(j, factor=4)",
        "i_j_outer_fused = s[C].fuse(i, j_outer)",
        "B = C.op.input_tensors[0]",
        "s[B].compute_at(s[C], i_j_outer_fused)",
        "s[C].vectorize(j_inner)",
        "B_local = s.cache_read(B, 'local', [C])",
    ]
    assert CL.name == "B.local"
    assert str(s).splitlines()[1:] == [
        "s[C].split(j, factor=4)", "s[C].fuse(i, j.outer)", "s[B].compute_at(s[C], i.j.outer.fused)",
        "s[C].vectorize(j.inner)", "s.cache_read(B, 'local', [C])"]


def test_a_log_written_before_the_registry_still_loads():
    """The JSON field names (and defaults) of the step format are what earlier logs hold."""
    old = [{"kind": "cache_write", "stage": "C", "args": {"scope": "local"}},
           {"kind": "split", "stage": "C", "args": {"axis": "i", "factor": 4}},
           {"kind": "fuse", "stage": "C", "args": {"outer": "i.outer", "inner": "i.inner"}},
           {"kind": "reorder", "stage": "C", "args": {"axes": ["j", "i.outer.i.inner.fused"]}},
           {"kind": "compute_at", "stage": "C.local", "args": {"parent": "C", "axis": "j"}},
           {"kind": "cache_read", "stage": "A", "args": {"scope": "local", "readers": ["B"]}},
           {"kind": "split", "stage": "B", "args": {"axis": "j", "nparts": 2}},
           {"kind": "unroll", "stage": "B", "args": {"axis": "j.inner"}},
           {"kind": "parallel", "stage": "B", "args": {"axis": "i"}},
           {"kind": "vectorize", "stage": "C", "args": {"axis": "i.outer.i.inner.fused"}},
           {"kind": "compute_inline", "stage": "A.local", "args": {}},
           {"kind": "compute_root", "stage": "A.local"}]
    steps = S.steps_from_json(old)
    assert [st.to_json() for st in steps[:-1]] == old[:-1]
    assert steps[-1].to_json() == {"kind": "compute_root", "stage": "A.local", "args": {}}
    A, B, C = _workload()
    s = R.replay(steps, C)
    assert s.steps == list(steps)
    lower(s, [A, C])


def test_steps_are_values():
    s, _ = _scheduled(StepKind.CACHE_READ)
    st = s.steps[0]
    assert st.kind is StepKind.CACHE_READ and st.args["readers"] == ("C",)
    assert pickle.loads(pickle.dumps(st)) == st and hash(Step.from_json(st.to_json())) == hash(st)
    with pytest.raises(TypeError):
        st.args["scope"] = "global"
    assert Step("split", "C", {"axis": "i", "factor": 2}) == \
        Step(StepKind.SPLIT, "C", {"axis": "i", "factor": 2, "nparts": None})


# loading what the registry does not accept --------------------------------------------------------

@pytest.mark.parametrize("bad, message", [
    ({"kind": "bind", "stage": "C", "args": {}}, r"unknown schedule step kind 'bind'; the known "
                                                    r"kinds are split, fuse"),
    ({"kind": "split", "stage": "C", "args": {"factor": 4}},
     r"schedule step split on stage C lacks the argument 'axis'"),
    ({"kind": "split", "stage": "C", "args": {"axis": "i", "factor": "4"}},
     r"schedule step split on stage C: argument 'factor' must be a positive integer, got '4'"),
    ({"kind": "split", "stage": "C", "args": {"axis": "i", "factor": 0}},
     r"argument 'factor' must be a positive integer, got 0"),
    ({"kind": "split", "stage": "C", "args": {"axis": "i", "nparts": True}},
     r"argument 'nparts' must be a positive integer, got True"),
    ({"kind": "split", "stage": "C", "args": {"axis": "i", "factor": 2, "nparts": 2}},
     r"schedule step split on stage C: give exactly one of the arguments 'factor' and 'nparts'"),
    ({"kind": "split", "stage": "C", "args": {"axis": "i"}},
     r"give exactly one of the arguments 'factor' and 'nparts'"),
    ({"kind": "split", "stage": "C", "args": {"axis": "i", "factr": 2}},
     r"schedule step split on stage C: unknown argument 'factr' \(its arguments are axis, factor, "
     r"nparts\)"),
    ({"kind": "vectorize", "stage": "C", "args": {"axis": 3}},
     r"schedule step vectorize on stage C: argument 'axis' must be a non-empty string, got 3"),
    ({"kind": "reorder", "stage": "C", "args": {"axes": "i"}},
     r"schedule step reorder on stage C: argument 'axes' must be a non-empty list of non-empty "
     r"strings, got 'i'"),
    ({"kind": "cache_read", "stage": "A", "args": {"readers": []}},
     r"schedule step cache_read on stage A: argument 'readers' must be a non-empty list"),
    ({"kind": "compute_inline", "stage": "", "args": {}},
     r"schedule step compute_inline: 'stage' must be a stage name"),
    ({"kind": "split", "stage": "C", "args": [4]}, r"malformed schedule step"),
    ({"kind": "split", "stage": "C", "args": {}, "when": 1}, r"unexpected key 'when'"),
    ("split", r"malformed schedule step 'split'"),
])
def test_loading_a_bad_step_names_it_and_the_field(bad, message):
    with pytest.raises(ScheduleError, match=message):
        S.steps_from_json([bad])
    A, B, C = _workload()
    s = create_schedule(C)
    with pytest.raises(ScheduleError, match=message):
        s.apply_steps([{"kind": "split", "stage": "C", "args": {"axis": "i", "factor": 2}}, bad])
    assert not s.steps                            # validated before any step is applied


def test_steps_must_come_as_a_list():
    with pytest.raises(ScheduleError, match=r"schedule steps must be a JSON list of steps"):
        S.steps_from_json({"kind": "split"})
    with pytest.raises(ScheduleError, match=r"steps_to_code: give the output tensors"):
        R.steps_to_code([])


def test_a_primitive_recording_a_step_its_entry_rejects_is_an_internal_error():
    A, B, C = _workload()
    s = create_schedule(C)
    with pytest.raises(InternalError, match=r"a primitive recorded a step its registry entry "
                                            r"rejects: .*lacks the argument 'axis'"):
        S.record(s, StepKind.SPLIT, "C", factor=2)


def test_a_bad_scope_is_refused_by_the_primitive():
    A, B, C = _workload()
    s = create_schedule(C)
    with pytest.raises(ScheduleError, match=r"cache_write of C: the scope must be a name such as "
                                            r"'local', got None"):
        s.cache_write(C, None)
