"""Multi-output computes: ``te.compute(shape, lambda i, j: (e0, e1))`` returns one tensor per
part, all computed in one loop nest (one stage); every schedule primitive applies to that stage
through any of its tensors.  Checked against NumPy under the default schedule and hand
schedules; the primitives that cannot take a multi-output stage refuse it.
"""
import pickle
import warnings

import numpy as np
import pytest

import einloop
from einloop import te
from einloop.errors import BuildError, ScheduleError, TEError, VectorizeWarning
from einloop.te.dag import ComputeDAG

M, N = 37, 29


def declare():
    A = te.placeholder((M, N), name="A")
    B = te.placeholder((M, N), name="B")
    S, P = te.compute((M, N), lambda i, j: (A[i, j] + B[i, j], A[i, j] * B[i, j]), name="SP")
    return A, B, S, P


def data(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (M, N)).astype("float32") for _ in range(2)]


def run(s, inputs, outputs, arrays):
    f = einloop.build(s, list(inputs) + list(outputs))
    results = [np.full(t.shape, np.nan, t.dtype) if t.dtype.startswith("float")
               else np.zeros(t.shape, t.dtype) for t in outputs]
    f(*arrays, *results)
    return results


def test_the_tensors_of_one_operation():
    A, B, S, P = declare()
    assert S.op is P.op and (S.value_index, P.value_index) == (0, 1)
    assert S.op.output(1) is P and S.op.num_outputs == 2
    assert (S.name, P.name) == ("SP.v0", "SP.v1")
    assert isinstance(S.op.body, tuple) and S.op.bodies == S.op.body
    assert A.op.num_outputs == 1 and A.op.output(0) is A
    single = te.compute((M,), lambda i: A[i, 0], name="one")
    assert single.op.bodies == (single.op.body,) and single.value_index == 0
    assert single.name == "one"
    with pytest.raises(TEError, match=r"SP has 2 output\(s\); output\(2\) does not exist"):
        S.op.output(2)
    with pytest.raises(TEError, match=r"one has 1 output\(s\); output\(1\) does not exist"):
        single.op.output(1)


def _split_reorder(s, st):
    i, j = st.op.axis
    io, ii = st.split(i, 8)
    jo, ji = st.split(j, 4)
    st.reorder(io, jo, ii, ji)


def _vectorize_parallel(s, st):
    i, j = st.op.axis
    jo, ji = st.split(j, 8)
    st.vectorize(ji)
    st.parallel(i)


def _fused(s, st):
    fused = st.fuse(*st.op.axis)
    fo, fi = st.split(fused, 16)
    st.parallel(fo)
    st.vectorize(fi)


SCHEDULES = {"default": lambda s, st: None, "split_reorder": _split_reorder,
             "vectorize_parallel": _vectorize_parallel, "fused": _fused}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("through", [0, 1])
def test_both_outputs_under_a_schedule_of_either_tensor(schedule, through):
    A, B, S, P = declare()
    s = einloop.create_schedule([S, P])
    assert s[S] is s[P]
    SCHEDULES[schedule](s, s[(S, P)[through]])
    a, b = data()
    got_s, got_p = run(s, [A, B], [S, P], [a, b])
    np.testing.assert_allclose(got_s, a + b, rtol=1e-6)
    np.testing.assert_allclose(got_p, a * b, rtol=1e-6)


def test_a_schedule_of_the_operation_has_every_output():
    A, B, S, P = declare()
    s = einloop.create_schedule(S.op)
    assert s.outputs == (S, P)
    with pytest.raises(BuildError, match=r"the output SP.v1 is not in args"):
        einloop.build(s, [A, B, S])


def test_outputs_of_different_dtypes_and_the_lowered_stores():
    A = te.placeholder((M, N), name="A")
    F, I = te.compute((M, N), lambda i, j: (A[i, j] * 2.0, (A[i, j] > 0).astype("int32")),
                      name="FI")
    assert (F.dtype, I.dtype) == ("float32", "int32")
    s = einloop.create_schedule([F, I])
    text = str(einloop.lower(s, [A, F, I]))
    assert "FI.v0[" in text and "FI.v1[" in text and text.count("for ") == 2
    (a, _) = data()
    got_f, got_i = run(s, [A], [F, I], [a])
    np.testing.assert_allclose(got_f, a * 2)
    np.testing.assert_array_equal(got_i, (a > 0).astype("int32"))


@pytest.mark.parametrize("placement", ["root", "compute_at", "inline"])
def test_outputs_feeding_a_later_stage(placement):
    A, B, S, P = declare()
    D = te.compute((M, N), lambda i, j: S[i, j] - P[i, j] * 3.0, name="D")
    s = einloop.create_schedule(D)
    if placement == "compute_at":
        io, ii = s[D].split(D.op.axis[0], 4)
        s[S].compute_at(s[D], io)
        s[P].split(P.op.axis[1], 8)                    # the stage's own loops still split
    elif placement == "inline":
        s[P].compute_inline()
    a, b = data(1)
    (got,) = run(s, [A, B], [D], [a, b])
    np.testing.assert_allclose(got, (a + b) - (a * b) * 3.0, rtol=1e-5, atol=1e-6)


def test_one_output_as_an_argument_the_other_a_temporary():
    A, B, S, P = declare()
    D = te.compute((M, N), lambda i, j: P[i, j] + 1.0, name="D")
    s = einloop.create_schedule([S, D])
    func = einloop.lower(s, [A, B, S, D])
    assert [b.name for b in func.args] == ["A", "B", "SP.v0", "D"]
    assert [b.name for b in func.temps] == ["SP.v1"]
    a, b = data(2)
    got_s, got_d = run(s, [A, B], [S, D], [a, b])
    np.testing.assert_allclose(got_s, a + b, rtol=1e-6)
    np.testing.assert_allclose(got_d, a * b + 1.0, rtol=1e-6)


def test_nested_reductions_in_the_parts_are_lifted():
    A = te.placeholder((M, N), name="A")
    k = te.reduce_axis((0, N), name="k")
    T, U = te.compute((M,), lambda i: (te.sum(A[i, k], axis=k) * 2.0, A[i, 0] + 1.0), name="TU")
    assert T.op.num_outputs == 2 and not T.op.reduce_axis
    (a, _) = data(3)
    got_t, got_u = run(einloop.create_schedule([T, U]), [A], [T, U], [a])
    np.testing.assert_allclose(got_t, a.sum(1) * 2.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_u, a[:, 0] + 1.0)


def test_the_dag_of_a_multi_output_operation():
    A, B, S, P = declare()
    D = te.compute((M, N), lambda i, j: S[i, j] + P[i, j], name="D")
    dag = ComputeDAG(D)
    assert [op.name for op in dag.ops] == ["A", "B", "SP", "D"]
    assert dag.consumers(S) == (D.op,) and dag.is_injective(P)
    assert dag.flop_count(S.op) == 2 * M * N
    assert [r.tensor for r in dag.reads(D)] == [S, P]
    A2 = te.placeholder((M, N), name="A2")
    B2 = te.placeholder((M, N), name="B2")
    S2, P2 = te.compute((M, N), lambda i, j: (A2[i, j] + B2[i, j], A2[i, j] * B2[i, j]))
    swapped = te.compute((M, N), lambda i, j: P2[i, j] + S2[i, j], name="D")
    same = te.compute((M, N), lambda i, j: S2[i, j] + P2[i, j], name="D")
    assert ComputeDAG(same).structural_hash() == dag.structural_hash()
    assert ComputeDAG(swapped).structural_hash() != dag.structural_hash()
    back = pickle.loads(pickle.dumps(D))
    assert back.op.input_tensors[1].value_index == 1


@pytest.mark.parametrize("primitive", ["cache_read", "pack", "split_residues", "deinterleave"])
def test_primitives_that_copy_one_output_refuse_a_multi_output_stage(primitive):
    A, B, S, P = declare()
    D = te.compute((M, N), lambda i, j: S[i, j] + P[i, j], name="D")
    s = einloop.create_schedule(D)
    calls = {"cache_read": lambda: s.cache_read(S, "local", [D]),
             "pack": lambda: s.pack(S, 1, 8),
             "split_residues": lambda: s.split_residues(S, S.op.axis[1], 2),
             "deinterleave": lambda: s.deinterleave(S, 2, [D])}
    with pytest.raises(ScheduleError, match=rf"{primitive} of SP: it is a multi-output stage "
                                            r"\(2 outputs"):
        calls[primitive]()


def test_steps_of_a_multi_output_stage_replay():
    A, B, S, P = declare()
    s = einloop.create_schedule([S, P])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VectorizeWarning)
        _vectorize_parallel(s, s[P])
    again = einloop.create_schedule([S, P]).apply_steps(s.steps)
    assert str(again) == str(s)
    a, b = data(4)
    got_s, got_p = run(again, [A, B], [S, P], [a, b])
    np.testing.assert_allclose(got_s, a + b, rtol=1e-6)
    np.testing.assert_allclose(got_p, a * b, rtol=1e-6)


def test_a_multi_output_stage_reads_through_cache_read_and_pack():
    A, B, S, P = declare()
    s = einloop.create_schedule([S, P])
    AL = s.cache_read(A, "local", [S])
    BP = s.pack(B, 1, 8)
    io, ii = s[S].split(S.op.axis[0], 4)
    s[AL].compute_at(s[S], io)
    assert s[BP].op.input_tensors == (B,)
    a, b = data(5)
    got_s, got_p = run(s, [A, B], [S, P], [a, b])
    np.testing.assert_allclose(got_s, a + b, rtol=1e-6)
    np.testing.assert_allclose(got_p, a * b, rtol=1e-6)


def test_an_attached_stage_with_one_output_in_args():
    """S is a kernel argument (written whole) though its stage is computed at D's loop: its
    sibling P is then a whole temporary too, both indexed absolutely."""
    A, B, S, P = declare()
    D = te.compute((M, N), lambda i, j: S[i, j] - P[i, j], name="D")
    s = einloop.create_schedule(D)
    io, ii = s[D].split(D.op.axis[0], 8)
    s[S].compute_at(s[D], io)
    func = einloop.lower(s, [A, B, S, D])
    assert [b.name for b in func.temps] == ["SP.v1"]
    a, b = data(6)
    got_s, got_d = run(s, [A, B], [S, D], [a, b])
    np.testing.assert_allclose(got_s, a + b, rtol=1e-6)
    np.testing.assert_allclose(got_d, (a + b) - a * b, rtol=1e-5, atol=1e-6)
