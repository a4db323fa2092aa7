"""te.compute with reductions nested in elementwise arithmetic: each one is lifted into its own
stage over the data axes it uses, the declared stage reads it; what stays invalid says so."""
import numpy as np
import pytest

from einloop import te, create_schedule
from einloop.errors import TEError
from einloop.te.dag import ComputeDAG
from einloop.autotune.space.sketch import RuleKind, generate_space
from oracle import random_inputs, run

S, D = 24, 16


def scaled_scores():
    """Issue 8's snippet: the attention scores, a GEMM times 1/sqrt(D), in one compute."""
    Q = te.placeholder((S, D), name="Q")
    K = te.placeholder((S, D), name="K")
    d = te.reduce_axis((0, D), name="d")
    L = te.compute((S, S), lambda i, j: te.sum(Q[i, d] * K[j, d], axis=d) * (1.0 / D ** 0.5),
                   name="L")
    return [Q, K], [L], lambda q, k: [(q @ k.T) * np.float32(1.0 / D ** 0.5)]


def one_line_softmax():
    """Row softmax in one compute: exp(x - row max) over a row sum of the same."""
    X = te.placeholder((S, D), name="X")
    k = te.reduce_axis((0, D), name="k")
    m = te.reduce_axis((0, D), name="m")
    Ex = te.compute((S, D), lambda i, j: te.exp(X[i, j] - te.max(X[i, m], axis=m)), name="Ex")
    Y = te.compute((S, D), lambda i, j: Ex[i, j] / te.sum(Ex[i, k], axis=k), name="Y")

    def ref(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return [e / e.sum(axis=1, keepdims=True)]
    return [X], [Y], ref


def check(outs, ins, ref, steps=None, rtol=1e-5):
    s = create_schedule(outs)
    if steps is not None:
        s = s.apply_steps(steps)
    arrays = random_inputs(ins, positive=True)
    for got, want in zip(run(s, ins, outs, arrays), ref(*arrays)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def stages(out):
    return {op.name: op for op in ComputeDAG([out]).ops}


# what the lifting produces ------------------------------------------------------------------------

def test_issue_snippet_lifts_the_gemm_and_scales_it():
    ins, (L,), ref = scaled_scores()
    dag = ComputeDAG([L])
    assert [op.name for op in dag.ops] == ["Q", "K", "L.sum0", "L"]
    gemm = dag.ops[2]
    assert gemm.shape == (S, S) and [iv.name for iv in gemm.axis] == ["i", "j"]
    assert [iv.name for iv in gemm.reduce_axis] == ["d"]
    assert dag.is_reduction(gemm) and dag.has_data_reuse(gemm)
    assert dag.is_injective(L.op) and L.op.reduce_axis == ()
    assert str(L.op.body).startswith("L.sum0[i, j] *")
    check([L], ins, ref)


def test_lifted_stage_runs_over_the_axes_its_reduction_uses():
    """A row reduction in an (i, j) compute is computed once per row, not per element."""
    X = te.placeholder((S, D), name="X")
    k = te.reduce_axis((0, D), name="k")
    Y = te.compute((S, D), lambda i, j: te.exp(X[i, j] - te.max(X[i, k], axis=k)), name="Y")
    row = stages(Y)["Y.max0"]
    assert row.shape == (S,) and [iv.name for iv in row.axis] == ["i"]
    check([Y], [X], lambda x: [np.exp(x - x.max(axis=1, keepdims=True))])


def test_two_reductions_combined_and_a_bias():
    X = te.placeholder((S, D), name="X")
    b = te.placeholder((D,), name="b")
    k = te.reduce_axis((0, D), name="k")
    Y = te.compute((S, D), lambda i, j: te.sum(X[i, k], axis=k) - te.max(X[i, k], axis=k)
                   + b[j], name="Y")
    st = stages(Y)
    assert {"Y.sum0", "Y.max1"} <= set(st) and st["Y.sum0"].shape == st["Y.max1"].shape == (S,)
    check([Y], [X, b], lambda x, bb: [x.sum(1, keepdims=True) - x.max(1, keepdims=True) + bb])


def test_equal_reductions_share_one_stage():
    X = te.placeholder((S, D), name="X")
    k = te.reduce_axis((0, D), name="k")
    Y = te.compute((S, D), lambda i, j: X[i, j] / te.sum(X[i, k], axis=k)
                   + te.sum(X[i, k], axis=k), name="Y")
    assert [n for n in stages(Y) if n.startswith("Y.")] == ["Y.sum0"]
    check([Y], [X], lambda x: [x / x.sum(1, keepdims=True) + x.sum(1, keepdims=True)])


def test_reduction_using_no_data_axis_and_a_where_on_one():
    X = te.placeholder((S, D), name="X")
    k = te.reduce_axis((0, D), name="k")
    r = te.reduce_axis((0, S), name="r")
    Y = te.compute((S,), lambda i: te.sum(X[0, k], axis=k) * 2.0
                   + te.sum(X[r, 0], axis=r, where=r <= i), name="Y")
    st = stages(Y)
    assert st["Y.sum0"].shape == (1,) and st["Y.sum1"].shape == (S,)
    check([Y], [X], lambda x: [x[0].sum() * 2 + np.cumsum(x[:, 0])], rtol=1e-4)


def test_whole_body_reduction_adds_no_stage():
    X = te.placeholder((S, D), name="X")
    k = te.reduce_axis((0, D), name="k")
    Y = te.compute((S,), lambda i: te.sum(X[i, k], axis=k), name="Y")
    assert list(stages(Y)) == ["X", "Y"] and Y.op.reduce_axis[0].name == "k"


def test_default_schedule_equals_unscheduled():
    ins, outs, ref = one_line_softmax()
    sp = generate_space(outs)
    arrays = random_inputs(ins, positive=True)
    got = run(create_schedule(outs).apply_steps(sp.default_steps()), ins, outs, arrays)
    want = run(create_schedule(outs), ins, outs, arrays)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[0], ref(*arrays)[0], rtol=1e-5)


# what stays invalid -------------------------------------------------------------------------------

def test_reduction_inside_a_reduction_body():
    X = te.placeholder((S, D), name="X")
    k, r = te.reduce_axis((0, S), name="k"), te.reduce_axis((0, D), name="r")
    with pytest.raises(TEError, match=r"compute 'Out': the reduction max over r is inside the "
                                      r"body of the reduction sum over k.*its own compute"):
        te.compute((1,), lambda i: te.sum(te.max(X[k, r], axis=r), axis=k) + 1.0, name="Out")
    with pytest.raises(TEError, match=r"compute 'Out': the reduction max over r is inside"):
        te.compute((1,), lambda i: te.sum(te.max(X[k, r], axis=r), axis=k), name="Out")


def test_reduction_inside_a_reduction_condition():
    X = te.placeholder((S, D), name="X")
    k, r = te.reduce_axis((0, S), name="k"), te.reduce_axis((0, D), name="r")
    with pytest.raises(TEError, match=r"the reduction sum over r is inside the body of the "
                                      r"reduction sum over k"):
        te.compute((S,), lambda i: 1.0 + te.sum(X[k, 0], axis=k,
                                                where=te.sum(X[k, r], axis=r) > 0.0), name="Out")


def test_reduce_axis_used_outside_its_nested_reduction():
    X = te.placeholder((S, D), name="X")
    b = te.placeholder((D,), name="b")
    k = te.reduce_axis((0, D), name="k")
    with pytest.raises(TEError, match=r"compute 'Out': the reduce axis k is used outside a "
                                      r"reduction over it"):
        te.compute((S,), lambda i: te.sum(X[i, k], axis=k) * b[k], name="Out")


def test_foreign_variable_in_a_nested_reduction_names_the_declared_compute():
    X = te.placeholder((S, D), name="X")
    k = te.reduce_axis((0, D), name="k")
    leaked = []
    te.compute((S,), lambda i: leaked.append(i) or X[i, 0], name="First")
    with pytest.raises(TEError, match=r"compute 'Out': the variable i is not an index of this "
                                      r"compute \(its indices are j\)"):
        te.compute((S,), lambda j: te.sum(X[leaked[0], k], axis=k) + 1.0, name="Out")


# the auto-scheduler on a lifted operator ----------------------------------------------------------

def test_auto_space_tiles_the_lifted_gemm_and_fuses_the_scale():
    ins, outs, ref = scaled_scores()
    sp = generate_space(outs)
    assert RuleKind.MULTI_LEVEL_TILING in sp.fired["L.sum0"]
    assert RuleKind.FUSE_CONSUMER in sp.fired["L.sum0"] and RuleKind.FUSE_CONSUMER in sp.fired["L"]
    assert "L.sum0" in sp.describe()
    rng = np.random.default_rng(8)
    indices = [sp.config_space.default_index()] + \
        [int(x) for x in rng.integers(0, len(sp.config_space), 4)]
    fused = 0
    for index in indices:
        steps = sp.steps(index)
        fused += any(st.kind.value == "compute_at" and st.stage == "L.sum0"
                     and st.args["parent"] == "L" for st in steps)
        check(outs, ins, ref, steps, rtol=1e-4)
    assert fused >= 1


def test_auto_space_of_a_one_line_softmax_is_correct():
    ins, outs, ref = one_line_softmax()
    sp = generate_space(outs)
    assert {"Ex.max0", "Y.sum0"} <= set(sp.fired)
    rng = np.random.default_rng(9)
    for index in [int(x) for x in rng.integers(0, len(sp.config_space), 4)]:
        check(outs, ins, ref, sp.steps(index), rtol=1e-4)
