"""``s.rfactor``: a reduction loop becomes a data axis of a partial-reduction stage.

Every schedule is checked against NumPy (tests/oracle.py); the structure of the new stages
(shape, axes, where the guard of a ragged split goes) is checked on the schedule and lowered IR.
"""
import json
import warnings
import weakref

import numpy as np
import pytest

from einloop import te, create_schedule, lower
from einloop.errors import VectorizeWarning
from einloop.schedule import replay as R, steps as S

import ops
from oracle import check, random_inputs, run


def row_reduce(reducer, M=5, N=37, dtype="float32"):
    A = te.placeholder((M, N), name="A", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((M,), lambda i: reducer(A[i, k], axis=k), name="C")
    return A, C


REDUCERS = {
    "sum": (te.sum, lambda a: a.sum(1)),
    "max": (te.max, lambda a: a.max(1)),
    "min": (te.min, lambda a: a.min(1)),
    "prod": (te.prod, lambda a: a.prod(1)),
}


@pytest.mark.parametrize("factor", [1, 4, 5, 37, 64], ids=lambda f: f"factor{f}")
@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_every_reducer_with_dividing_and_ragged_splits(name, factor):
    reducer, ref = REDUCERS[name]
    A, C = row_reduce(reducer, N=20 if name == "prod" else 37)
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=factor)
    CF = s.rfactor(C, ki)
    assert CF.name == "C.rf" and CF.shape == (min(factor, A.shape[1]), 5)
    assert [st.name for st in s.stages] == ["A", "C.rf", "C"]
    assert [iv.name for iv in s[C].op.reduce_axis] == ["k.inner"]
    check(s, [A], [C], lambda a: [ref(a)], positive=name == "prod")


def test_a_custom_reducer_is_combined_by_itself():
    """C combines C.rf's partials with the user's combine: valid by its promise (commutative,
    associative), here on an outer-loop factor of a ragged split."""
    mx = te.comm_reducer(lambda x, y: te.maximum(x, y), lambda dt: -1e30, name="mymax")
    A, C = row_reduce(mx)
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=6)
    s.rfactor(C, ko)
    check(s, [A], [C], lambda a: [a.max(1)])


def test_integer_sum_is_exact():
    A, C = row_reduce(te.sum, N=41, dtype="int32")
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], nparts=3)
    s.rfactor(C, ki)
    check(s, [A], [C], lambda a: [a.sum(1, dtype="int32")])


def test_ragged_tail_is_guarded_and_keeps_the_identity():
    A, C = row_reduce(te.max, M=2, N=10)
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)     # 10 = 4 + 4 + 2
    s.rfactor(C, ki)
    text = str(lower(s, [A, C], expand_unroll=False))
    assert "if k.outer * 4 + k.inner < 10:" in text             # the tail reads nothing ...
    assert "C.rf[k.inner * 2 + i] = -inff" in text               # ... and keeps the identity
    check(s, [A], [C], lambda a: [a.max(1)])


def test_rfactor_of_a_root_reduce_axis_makes_an_elementwise_stage():
    A, C = row_reduce(te.sum, M=3, N=9)
    s = create_schedule(C)
    CF = s.rfactor(C, s[C].op.reduce_axis[0], factor_axis=1)
    assert CF.shape == (3, 9) and s[CF].op.reduce_axis == ()
    check(s, [A], [C], lambda a: [a.sum(1)])


def test_a_where_condition_moves_into_the_partial_stage():
    A = te.placeholder((6, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=k <= i), name="C")
    s = create_schedule(C)
    ko, ki = s[C].split(k, factor=4)
    s.rfactor(C, ki)
    check(s, [A], [C], lambda a: [np.tril(a).sum(1)])
    s2 = create_schedule(C)
    s2.rfactor(C, k)                                          # no reduction left: a select
    check(s2, [A], [C], lambda a: [np.tril(a).sum(1)])


def test_a_reduce_axis_not_starting_at_zero():
    A = te.placeholder((4, 20), name="A")
    k = te.reduce_axis((3, 17), name="k")
    C = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = create_schedule(C)
    ko, ki = s[C].split(k, factor=5)
    s.rfactor(C, ki)
    check(s, [A], [C], lambda a: [a[:, 3:17].sum(1)])


@pytest.mark.parametrize("factor_axis", [0, 1, 2])
def test_factor_axis_places_the_new_axis_of_a_2d_output(factor_axis):
    (A, B), (C,), ref = ops.gemm(7, 9, 23)
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=8)
    CF = s.rfactor(C, ki, factor_axis=factor_axis)
    shape = [7, 9]
    shape.insert(factor_axis, 8)
    assert CF.shape == tuple(shape)
    assert s[CF].op.axis[factor_axis].name == "k.inner"
    check(s, [A, B], [C], ref)


def test_several_reduce_axes():
    inputs, (Sm, Mx), ref = ops.multi_axis_reduce(4, 5, 7, 3)
    s = create_schedule([Sm, Mx])
    r1, r2 = s[Sm].op.reduce_axis
    r2o, r2i = s[Sm].split(r2, factor=3)
    s[Sm].reorder(r2o, r1, r2i)                      # the reduction order carries over to S.rf
    SF = s.rfactor(Sm, r2i, factor_axis=2)
    assert [iv.name for iv in s[SF].op.reduce_axis] == ["r2.outer", "r1"]
    q1, q2 = s[Mx].op.reduce_axis
    qf = s[Mx].fuse(q1, q2)
    qo, qi = s[Mx].split(qf, nparts=4)               # 35 = 4 * 9 - 1: ragged
    MF = s.rfactor(Mx, qo)
    assert MF.shape == (4, 4, 3)
    check(s, inputs, [Sm, Mx], ref)


def test_rfactor_twice():
    A, C = row_reduce(te.sum, M=3, N=100)
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=16)
    s.rfactor(C, ki)
    ko2, ki2 = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s.rfactor(C, ki2, factor_axis=1)
    assert [st.name for st in s.stages] == ["A", "C.rf", "C.rf_1", "C"]
    check(s, [A], [C], lambda a: [a.sum(1)])


def test_vectorized_rfactor_axis_becomes_lanes():
    A, C = row_reduce(te.sum, M=6, N=1000)
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=16)
    CF = s.rfactor(C, ki, factor_axis=1)
    i, kin = s[CF].op.axis
    s[CF].reorder(i, s[CF].op.reduce_axis[0], kin)
    s[CF].vectorize(kin)
    s[CF].compute_at(s[C], s[C].op.axis[0])
    s[C].parallel(s[C].op.axis[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", VectorizeWarning)
        text = str(lower(s, [A, C]))
        check(s, [A], [C], lambda a: [a.sum(1)])
    assert "vectorized for k.inner in range(16)" in text
    assert "allocate C.rf: float32[1 * 16]" in text          # one row of partials per i


def test_parallel_rfactor_axis_for_a_full_sum():
    A = te.placeholder((4000,), name="A")
    k = te.reduce_axis((0, 4000), name="k")
    C = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="C")
    s = create_schedule(C)
    ko, ki = s[C].split(k, nparts=2)
    CF = s.rfactor(C, ko)
    s[CF].parallel(s[CF].op.axis[0])
    kio, kii = s[CF].split(s[CF].op.reduce_axis[0], factor=8)
    text = str(lower(s, [A, C]))
    assert "parallel for k.outer in range(2)" in text
    check(s, [A], [C], lambda a: [[a.astype("float64").sum()]])


def one_pass_softmax(M, N, vec=8):
    """Row max and row sum each factored by *vec* lanes; both and their partials computed at
    the output's row loop (compute_at does not nest: a stage at S.i whose S is at Out.i is
    refused by verify, so the partials go to Out.i too)."""
    inputs, (Out,), ref = ops.softmax(M, N)
    E = Out.op.input_tensors[0]
    Sm = Out.op.input_tensors[1]
    Mx = E.op.input_tensors[1]
    s = create_schedule(Out)
    s[E].compute_inline()
    i, j = s[Out].op.axis
    for T in (Mx, Sm):
        ko, ki = s[T].split(s[T].op.reduce_axis[0], factor=vec)
        TF = s.rfactor(T, ki, factor_axis=1)
        r, lane = s[TF].op.axis
        s[TF].reorder(r, s[TF].op.reduce_axis[0], lane)
        s[TF].vectorize(lane)
        s[TF].compute_at(s[Out], i)
        s[T].compute_at(s[Out], i)
    jo, ji = s[Out].split(j, factor=vec)
    s[Out].vectorize(ji)
    s[Out].parallel(i)
    return s, inputs, [Out], ref


@pytest.mark.parametrize("N", [64, 35])
def test_softmax_row_reductions_in_one_pass(N):
    s, inputs, outputs, ref = one_pass_softmax(6, N)
    stmt = lower(s, inputs + outputs).body
    assert str(stmt).startswith("parallel for i in range(6)")    # one loop nest over rows
    assert str(stmt).count("\nparallel for") == 0
    check(s, inputs, outputs, ref)


def test_replay_from_json_gives_the_same_schedule():
    s, inputs, outputs, ref = one_pass_softmax(4, 35)
    payload = json.loads(json.dumps(S.steps_to_json(s.steps)))
    assert {"kind": "rfactor", "stage": "Mx", "args": {"axis": "k1.inner", "factor_axis": 1}} \
        in payload
    fresh_inputs, fresh_outputs, _ = ops.softmax(4, 35)
    replayed = R.replay(payload, fresh_outputs)
    assert replayed.steps == s.steps
    assert str(lower(replayed, fresh_inputs + fresh_outputs)) == str(lower(s, inputs + outputs))
    arrays = random_inputs(inputs)
    np.testing.assert_array_equal(run(replayed, fresh_inputs, fresh_outputs, arrays)[0],
                                  run(s, inputs, outputs, arrays)[0])


def test_printed_code_rebuilds_the_schedule():
    A, C = row_reduce(te.sum)
    s = create_schedule(C)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=8)
    CF = s.rfactor(C, ki, factor_axis=1)
    s[CF].reorder(s[CF].op.reduce_axis[0], s[CF].op.axis[1])
    s[CF].vectorize(s[CF].op.axis[1])
    code = R.steps_to_code(s)
    assert "C_rf = s.rfactor(C, k_inner, factor_axis=1)" in code.splitlines()
    A2, C2 = row_reduce(te.sum)
    namespace = {"C": C2, "create_schedule": create_schedule}
    exec(code, namespace)
    assert str(lower(namespace["s"], [A2, C2])) == str(lower(s, [A, C]))


def test_default_factor_axis_of_a_step_is_zero():
    st = S.Step.from_json({"kind": "rfactor", "stage": "C", "args": {"axis": "k.inner"}})
    assert st.args["factor_axis"] == 0


def test_stages_after_rfactor_accept_the_usual_primitives():
    """cache_write of the final stage, compute_at of a producer at the partial stage."""
    X = te.placeholder((5, 30), name="X")
    Y = te.compute((5, 30), lambda i, j: X[i, j] * 2.0, name="Y")
    k = te.reduce_axis((0, 30), name="k")
    C = te.compute((5,), lambda i: te.sum(Y[i, k], axis=k), name="C")
    s = create_schedule(C)
    ko, ki = s[C].split(k, factor=4)
    CF = s.rfactor(C, ki)
    s[Y].compute_at(s[CF], s[CF].op.axis[1])
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], s[C].op.axis[0])
    check(s, [X], [C], lambda x: [(2 * x).sum(1)])


class _ReusedIds:
    """``id`` as CPython may give it: an object's number is a dead object's where one is free
    (CPython does so by chance, this every time)."""

    def __init__(self):
        self.refs = []

    def __call__(self, obj):
        for n, ref in enumerate(self.refs):
            if ref() is obj:
                return n
        for n, ref in enumerate(self.refs):
            if ref() is None:
                self.refs[n] = weakref.ref(obj)
                return n
        self.refs.append(weakref.ref(obj))
        return len(self.refs) - 1


def test_printed_code_rebuilds_a_schedule_whose_steps_free_loops(monkeypatch):
    """rfactor and cache_write replace stages, freeing their loops, and a new loop may get the
    id of a freed one: the printer must not name the new loop after the freed one (it printed
    ``split(softmax_sum_r3_inner, ...)`` for a loop of ``matmul.local``, and the code failed)."""
    monkeypatch.setattr(R, "id", _ReusedIds(), raising=False)

    def attention():
        q, k, v = (te.placeholder((2, 16, 8), name=n) for n in "qkv")
        return [q, k, v], ops.causal_multihead_attention(q, k, v)
    inputs, out = attention()
    s = create_schedule(out)
    for name in ("mx", "den"):
        red = s.stage_named(name)
        outer, inner = red.split(red.op.reduce_axis[0], factor=4)
        s.rfactor(red.op.output(0), inner, factor_axis=2)
    for name in ("mx.rf", "den.rf", "sc", "att"):
        stage = s.stage_named(name)
        io, ii = stage.split(stage.op.axis[1], factor=4)
        stage.reorder(io, stage.op.axis[0], ii)
    code = R.steps_to_code(s)
    fresh_inputs, fresh_out = attention()
    namespace = {"att": fresh_out, "create_schedule": create_schedule}
    exec(code, namespace)
    assert str(lower(namespace["s"], fresh_inputs + [fresh_out])) == str(lower(s, inputs + [out]))
