"""The scan rule: a scan's spatial axes in wide parallel blocks, its scan loop serial inside,
the contiguous axis vectorized; every config of the generated space computes what NumPy does."""
import warnings

import numpy as np
import pytest

from rule_ops import AVX2, check_steps, kinds
from einloop import create_schedule, lower, te
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.autotune.space.sketch.scan_loops import annotate_scan
from einloop.errors import RuleFailureWarning
from einloop.ir.stmt import ForKind


def rows_op(T=37, M=101):
    """cumsum(3 * X, axis=0) + 1: a cheap producer, the scan, an elementwise consumer."""
    X = te.placeholder((T, M), name="X")
    X2 = te.compute((T, M), lambda t, i: X[t, i] * 3.0, name="X2")
    C = te.cumsum(X2, axis=0, name="C")
    out = te.compute((T, M), lambda t, i: C[t, i] + 1.0, name="out")
    return [X], [out], lambda x: [np.cumsum(3 * x, 0) + 1]


def columns_op(T=23, M=41):
    """exp(X) (a dear producer) scanned along its last axis by a cumulative product."""
    X = te.placeholder((T, M), name="X")
    E = te.compute((T, M), lambda i, j: te.exp(X[i, j] * 0.01), name="E")
    C = te.cumprod(E, axis=1, name="C")
    return [X], [C], lambda x: [np.cumprod(np.exp(x * 0.01), 1)]


def coupled_op(T=19, M=45):
    """Two coupled states, both outputs."""
    X = te.placeholder((T, M), name="X")
    s0, s1 = te.scan_state((T, M), name="s0"), te.scan_state((T, M), name="s1")
    i0 = te.compute((1, M), lambda _, i: X[0, i], name="i0")
    i1 = te.compute((1, M), lambda _, i: X[0, i] * 2.0, name="i1")
    u0 = te.compute((T, M), lambda t, i: s1[t - 1, i] * 0.5 + X[t, i], name="u0")
    u1 = te.compute((T, M), lambda t, i: s0[t - 1, i] - s1[t - 1, i] * 0.25, name="u1")
    a, b = te.scan([i0, i1], [u0, u1], [s0, s1], name="sc")

    def ref(x):
        ra, rb = np.empty_like(x), np.empty_like(x)
        ra[0], rb[0] = x[0], 2 * x[0]
        for t in range(1, T):
            ra[t] = 0.5 * rb[t - 1] + x[t]
            rb[t] = ra[t - 1] - 0.25 * rb[t - 1]
        return [ra, rb]
    return [X], [a, b], ref


def stencil_op(T=13, M=50):
    """A step reads the neighbours of the step before: the scan loop stays outermost."""
    X = te.placeholder((T, M), name="X")
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: te.if_then_else(
        te.all(i > 0, i < M - 1), (S[t - 1, i - 1] + S[t - 1, i + 1]) * 0.5, X[t, i]),
        name="upd")
    Y = te.scan(init, upd, S, name="Y")

    def ref(x):
        y = x.copy()
        for k in range(1, T):
            y[k, 1:-1] = (y[k - 1, :-2] + y[k - 1, 2:]) * 0.5
        return [y]
    return [X], [Y], ref


def batched_op():
    """A 3-d cumulative sum along the middle axis."""
    X = te.placeholder((3, 11, 37), name="X")
    C = te.cumsum(X, axis=1, name="C")
    return [X], [C], lambda x: [np.cumsum(x, 1)]


OPS = {"rows": rows_op, "columns": columns_op, "coupled": coupled_op, "stencil": stencil_op,
       "batched": batched_op}


def space_of(outs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuleFailureWarning)     # no rule may fail on a scan
        return generate_space(outs, AVX2)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_config_of_the_space_matches_numpy(name):
    ins, outs, ref = OPS[name]()
    sp = space_of(outs)
    assert sp.relax.name == "ALL"
    n = len(sp.config_space)
    rng = np.random.default_rng(7)
    picks = range(n) if n <= 8 else sorted(rng.choice(n, 8, replace=False))
    for k in picks:
        check_steps(sp.steps(int(k)), ins, outs, ref, rtol=1e-3)
    check_steps(sp.default_steps(), ins, outs, ref, rtol=1e-3)


def test_the_rule_fires_on_every_state_and_nothing_else_does():
    ins, outs, _ = coupled_op()
    sp = space_of(outs)
    assert sp.fired["sc.v0"] == (RuleKind.SCAN,) and sp.fired["sc.v1"] == (RuleKind.SCAN,)
    ins, outs, _ = rows_op()
    sp = space_of(outs)
    assert sp.fired["C"] == (RuleKind.SCAN,) and sp.fired["X2"] == (RuleKind.INLINE,)
    assert {"C.vec", "C.blocks"} <= set(sp.config_space.knobs)


def test_rows_scan_gets_wide_parallel_blocks_around_the_serial_scan_loop():
    X = te.placeholder((64, 4096), name="X")
    C = te.cumsum(X, axis=0, name="C")
    s = create_schedule(C)
    annotate_scan(s[C], lanes=8, cores=2, vec_mult=1, blocks=1, min_points=1)
    assert kinds(s.steps) == ["split", "split", "reorder", "vectorize", "parallel"]
    assert s.steps[0].args["factor"] == 2048                    # one block per core
    assert s.steps[2].args["axes"] == ("ax1.outer", "t", "ax1.inner.outer", "ax1.inner.inner")
    f = lower(s, [X, C])
    text = str(f)
    assert "parallel for ax1.outer in range(2)" in text
    assert "vectorized for ax1.inner.inner in range(8)" in text


def test_columns_scan_parallel_over_rows_serial_along_them():
    X = te.placeholder((40, 300), name="X")
    C = te.cumsum(X, axis=1, name="C")
    s = create_schedule(C)
    annotate_scan(s[C], lanes=8, cores=2, vector_ok=False, min_points=1)
    assert kinds(s.steps) == ["parallel"] and s.steps[0].args["axis"] == "ax0"


def test_stencil_scan_keeps_its_scan_loop_outermost():
    ins, (Y,), _ = stencil_op()
    s = create_schedule(Y)
    annotate_scan(s[Y], lanes=8, cores=2, min_points=1)
    assert s[Y].leaf_iter_vars[0] is s[Y].scan_axis
    kinds_of = {iv.name: k for iv, k in s[Y].annotations.items()}
    assert kinds_of == {"i.outer": ForKind.PARALLEL, "i.inner": ForKind.VECTORIZED}
