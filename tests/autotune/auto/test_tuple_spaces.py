"""The auto-scheduler's space of operators with a tuple reduction (argmax, Welford) or a
multi-output stage: generated without a rule failing, with the rules of a scalar reduction
(an argmax row gets the same space as a max row), and random configs compute what NumPy
computes."""
import warnings

import numpy as np
import pytest

from einloop import te
from einloop.autotune.space.sketch import generate_space
from einloop.errors import RuleFailureWarning
from rule_ops import AVX2, check_steps


def argmax_rows(rows=37, cols=101):
    X = te.placeholder((rows, cols), name="X")
    idx, val = te.argmax(X, axis=1)
    return [X], [idx, val], lambda x: [np.argmax(x, 1), np.max(x, 1)]


def argmin_then_elementwise():
    X = te.placeholder((29, 67), name="X")
    idx, val = te.argmin(X, axis=1, dtype="int32")
    out = te.compute((29,), lambda i: val[i] * 2.0 + idx[i].astype("float32"), name="out")
    return [X], [out], lambda x: [np.min(x, 1) * 2.0 + np.argmin(x, 1)]


def welford_rows():
    def combine(a, b):
        n = a[0] + b[0]
        delta = b[1] - a[1]
        share = b[0] / te.maximum(n, 1.0)
        return n, a[1] + delta * share, a[2] + b[2] + delta * delta * a[0] * share
    welford = te.comm_reducer(combine, lambda t0, t1, t2: (0.0, 0.0, 0.0), name="welford")
    X = te.placeholder((13, 203), name="X")
    k = te.reduce_axis((0, 203), name="k")
    n, mean, m2 = te.compute((13,), lambda i: welford((te.const(1.0), X[i, k], te.const(0.0)),
                                                      axis=k), name="w")
    var = te.compute((13,), lambda i: m2[i] / n[i], name="var")
    return [X], [mean, var], lambda x: [x.mean(1), x.var(1)]


def two_outputs_into_a_product():
    A = te.placeholder((23, 19), name="A")
    B = te.placeholder((23, 19), name="B")
    S, P = te.compute((23, 19), lambda i, j: (A[i, j] + B[i, j], A[i, j] * B[i, j]), name="SP")
    k = te.reduce_axis((0, 19), name="k")
    D = te.compute((23, 23), lambda i, j: te.sum(S[i, k] * P[j, k], axis=k), name="D")
    return [A, B], [D], lambda a, b: [(a + b) @ (a * b).T]


def two_outputs():
    A = te.placeholder((31, 45), name="A")
    S, P = te.compute((31, 45), lambda i, j: (A[i, j] + 1.0, te.exp(A[i, j])), name="SP")
    return [A], [S, P], lambda a: [a + 1.0, np.exp(a)]


OPERATORS = {"argmax_rows": argmax_rows, "argmin_then_elementwise": argmin_then_elementwise,
             "welford_rows": welford_rows, "two_outputs_into_a_product": two_outputs_into_a_product,
             "two_outputs": two_outputs}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_random_configs_match_numpy(name):
    ins, outs, ref = OPERATORS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuleFailureWarning)
        sp = generate_space(outs, AVX2)
    size = len(sp.config_space)
    picks = {0, size - 1} | set(np.random.default_rng(7).integers(0, size, 4).tolist())
    for index in sorted(picks):
        check_steps(sp.steps(index), ins, outs, ref, rtol=1e-3)


def test_an_argmax_row_gets_the_space_of_a_max_row():
    X = te.placeholder((256, 1001), name="X")
    k = te.reduce_axis((0, 1001), name="k")
    top = te.compute((256,), lambda i: te.max(X[i, k], axis=k), name="m")
    _, outs, _ = argmax_rows(256, 1001)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuleFailureWarning)
        arg_space = generate_space(outs, AVX2)
    max_space = generate_space([top], AVX2)
    assert len(arg_space.config_space) == len(max_space.config_space) > 1
    kinds = {st.kind.value for c in range(len(arg_space.config_space))
             for st in arg_space.steps(c)}
    assert {"rfactor", "vectorize", "parallel"} <= kinds


def test_an_argmax_stage_takes_the_lanes_of_its_value():
    """Vector lanes of a register of the float32 value (8 on AVX2), not of the int64 index."""
    from einloop.autotune.space.sketch.analysis import DagAnalysis
    _, outs, _ = argmax_rows()
    assert DagAnalysis(outs, AVX2).lanes(outs[0].op) == 8


def test_an_argmax_row_has_several_accumulator_chains_with_int32_indices():
    """The row sketch factors 1, 2 or 4 vectors of partial (index, value) pairs out of the
    reduction (independent accumulator chains), each vector of 8 lanes; lowered, the partials'
    indices are int32 (the lanes of the float32 value) and the result's int64."""
    from einloop import create_schedule, lower
    from einloop.ir import stmt as S
    from einloop.ir.visit import walk_stmt
    X = te.placeholder((64, 1000), name="X")
    idx, val = te.argmax(X, axis=1)
    sp = generate_space([idx, val], AVX2)
    chains = set()
    for c in range(len(sp.config_space)):
        steps = sp.steps(c)
        if "rfactor" not in [st.kind.value for st in steps]:
            continue
        split = next(st for st in steps if st.kind.value == "split")
        chains.add(split.args["factor"] // 8)
        body = lower(create_schedule([idx, val]).apply_steps(steps), [X, idx, val]).body
        kinds = {st.buffer.name: st.buffer.dtype for st in walk_stmt(body)
                 if isinstance(st, S.Store)}
        assert (kinds["X.argmax.rf.v0"], kinds["X.argmax.v0"]) == ("int32", "int64"), steps
        vector = [st.extent for st in walk_stmt(body)
                  if isinstance(st, S.For) and st.kind is S.ForKind.VECTORIZED]
        assert vector and set(vector) == {8}, steps
    assert chains == {1, 2, 4}
