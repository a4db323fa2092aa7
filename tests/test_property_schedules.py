"""Property: any legal sequence of schedule steps computes what the default schedule computes."""
import numpy as np
from hypothesis import given, settings, HealthCheck, strategies as st

from einloop import create_schedule, ScheduleError
from einloop.te.tensor import ComputeOp

import ops
from oracle import random_inputs, run

OPERATORS = {
    "gemm": lambda d: ops.gemm(d.draw(st.integers(1, 20)), d.draw(st.integers(1, 20)),
                               d.draw(st.integers(1, 12))),
    "conv2d": lambda d: ops.conv2d(1, d.draw(st.integers(1, 3)), d.draw(st.integers(3, 8)),
                                   d.draw(st.integers(3, 8)), d.draw(st.integers(1, 4)),
                                   stride=d.draw(st.integers(1, 2))),
    "softmax": lambda d: ops.softmax(d.draw(st.integers(1, 6)), d.draw(st.integers(1, 20))),
    "layer_norm": lambda d: ops.layer_norm(d.draw(st.integers(1, 5)), d.draw(st.integers(2, 20))),
    "chain": lambda d: ops.elementwise_chain(d.draw(st.integers(1, 9)), d.draw(st.integers(1, 9))),
    "reduce": lambda d: ops.multi_axis_reduce(*(d.draw(st.integers(1, 4)) for _ in range(4))),
}

PRIMITIVES = ["split", "split_nparts", "reorder", "fuse", "unroll", "parallel", "compute_at",
              "compute_inline", "cache_write", "rfactor", "pack"]

# a stage (and its other readers) at a loop of a reader, then that reader likewise: nested chains
PRIMITIVES.append("compute_at_chain")


def _random_step(d, s, outputs):
    stages = [x for x in s.stages if isinstance(x.op, ComputeOp) and x.attach != "inline"]
    stage = d.draw(st.sampled_from(stages))
    leaves = stage.leaf_iter_vars
    kind = d.draw(st.sampled_from(PRIMITIVES))
    if kind == "split":
        stage.split(d.draw(st.sampled_from(leaves)), factor=d.draw(st.integers(1, 6)))
    elif kind == "split_nparts":
        stage.split(d.draw(st.sampled_from(leaves)), nparts=d.draw(st.integers(1, 4)))
    elif kind == "reorder":
        stage.reorder(*d.draw(st.permutations(leaves)))
    elif kind == "fuse" and len(leaves) > 1:
        n = d.draw(st.integers(0, len(leaves) - 2))
        stage.fuse(leaves[n], leaves[n + 1])
    elif kind == "unroll":
        stage.unroll(d.draw(st.sampled_from(leaves)))
    elif kind == "parallel":
        stage.parallel(d.draw(st.sampled_from(leaves)))
    elif kind == "compute_at":
        target = d.draw(st.sampled_from(stages))
        stage.compute_at(target, d.draw(st.sampled_from(target.leaf_iter_vars)))
    elif kind == "compute_at_chain":    # with its other readers, at a reader's loop; twice
        for _ in range(2):
            readers = [x for x in s._consumers(stage) if x.attach != "inline"]
            if not readers:
                break
            target = d.draw(st.sampled_from(readers))
            loop = d.draw(st.sampled_from(target.leaf_iter_vars))
            for x in [stage] + [x for x in readers if x is not target]:
                x.compute_at(target, loop)
            stage = target
    elif kind == "compute_inline":
        stage.compute_inline()
    elif kind == "cache_write":
        s.cache_write(stage.origin_op.output())
    elif kind == "rfactor":
        reduce_leaves = [iv for iv in leaves if iv.kind.value == "reduce"]
        if reduce_leaves:
            s.rfactor(stage.origin_op.output(), d.draw(st.sampled_from(reduce_leaves)),
                      d.draw(st.integers(0, len(stage.op.axis))))
    elif kind == "pack":                # any non-output tensor, inputs included
        packable = [x for x in s.stages if not x.is_output]
        if packable:
            src = d.draw(st.sampled_from(packable)).origin_op.output()
            s.pack(src, d.draw(st.integers(0, src.ndim - 1)), d.draw(st.integers(1, 6)))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_random_schedules_match_default(data):
    name = data.draw(st.sampled_from(sorted(OPERATORS)))
    inputs, outputs, _ = OPERATORS[name](data)
    s = create_schedule(outputs)
    for _ in range(data.draw(st.integers(1, 8))):
        try:
            _random_step(data, s, outputs)
        except ScheduleError:
            pass                        # an illegal request is refused; the schedule is unchanged
    if data.draw(st.booleans()):        # vectorize some stage's data loop, innermost or not
        stage = data.draw(st.sampled_from([x for x in s.stages if isinstance(x.op, ComputeOp)
                                           and x.attach != "inline"]))
        data_leaves = [iv for iv in stage.leaf_iter_vars
                       if iv.kind.value == "data" and iv not in stage.annotations]
        if data_leaves:                 # an outer one runs its inner loops on all lanes at once
            try:
                stage.vectorize(data.draw(st.sampled_from(data_leaves)))
            except ScheduleError:
                pass
    arrays = random_inputs(inputs, positive=True)
    try:
        got = run(s, inputs, outputs, arrays)
    except ScheduleError:
        return                          # refused at lowering (e.g. a stage at a vector loop)
    want = run(create_schedule(outputs), inputs, outputs, arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"steps: {s.steps}")


def _scatter_zoo(N, V, C):
    """A scatter_add of N updates (ids wrapped into 0..V-1 by a producer) into a (V, C) output."""
    from einloop import te
    ids = te.placeholder((N,), "int32", name="ids")
    src = te.placeholder((N, C), name="src")
    wrapped = te.compute((N,), lambda j: ids[j] % V, name="wrapped")
    upd = te.compute((N, C), lambda j, c: src[j, c] * 2.0, name="upd")
    return [ids, src], [te.scatter_add((V, C), wrapped, upd, name="H")], None


# the same with one extent symbolic: (zoo function, the symbolic parameter, drawn parameters)
SYMBOLIC = {
    "scatter": (_scatter_zoo, "N", lambda d: {"V": d.draw(st.integers(1, 9)),
                                              "C": d.draw(st.integers(1, 9))}),
    "gemm": (ops.gemm, "M", lambda d: {"N": d.draw(st.integers(1, 20)),
                                       "K": d.draw(st.integers(1, 12))}),
    "gemm_k": (ops.gemm, "K", lambda d: {"M": d.draw(st.integers(1, 12)),
                                         "N": d.draw(st.integers(1, 20))}),
    "conv2d": (ops.conv2d, "N", lambda d: {"C": d.draw(st.integers(1, 3)),
                                           "H": d.draw(st.integers(3, 8)),
                                           "W": d.draw(st.integers(3, 8)),
                                           "K": d.draw(st.integers(1, 4))}),
    "softmax": (ops.softmax, "M", lambda d: {"N": d.draw(st.integers(1, 20))}),
    "layer_norm": (ops.layer_norm, "M", lambda d: {"N": d.draw(st.integers(2, 20))}),
    "chain": (ops.elementwise_chain, "M", lambda d: {"N": d.draw(st.integers(1, 9))}),
    "reduce": (ops.multi_axis_reduce, "A2", lambda d: {"A0": d.draw(st.integers(1, 4)),
                                                       "A1": d.draw(st.integers(1, 4)),
                                                       "A3": d.draw(st.integers(1, 4))}),
}


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_random_schedules_with_a_symbolic_extent_match_default(data):
    """One kernel built from random steps on a declaration with a symbolic extent computes, at
    several values of it, what the default schedule of the concrete declaration computes (or the
    schedule is refused with an einloop error: unrolling a symbolic loop, a local buffer of
    symbolic size)."""
    from einloop import BuildError, build, te
    name = data.draw(st.sampled_from(sorted(SYMBOLIC)))
    fn, param, draw = SYMBOLIC[name]
    fixed = draw(data)
    inputs, outputs, _ = fn(**fixed, **{param: te.size_var("n")})
    s = create_schedule(outputs)
    for _ in range(data.draw(st.integers(1, 8))):
        try:
            _random_step(data, s, outputs)
        except ScheduleError:
            pass
    if data.draw(st.booleans()):
        stage = data.draw(st.sampled_from([x for x in s.stages if isinstance(x.op, ComputeOp)
                                           and x.attach != "inline"]))
        last = stage.leaf_iter_vars[-1]
        if last.kind.value == "data" and last not in stage.annotations:
            stage.vectorize(last)
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = build(s, list(inputs) + list(outputs))
    except (ScheduleError, BuildError):
        return
    for value in sorted({1, data.draw(st.integers(2, 13)), data.draw(st.integers(14, 40))}):
        c_in, c_out, _ = fn(**fixed, **{param: value})
        arrays = random_inputs(c_in, seed=value, positive=True)
        got = [np.full(t.shape, np.nan, t.dtype) for t in c_out]
        f(*arrays, *got)
        want = run(create_schedule(c_out), c_in, c_out, arrays)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} n={value} steps: {s.steps}")


# the newer constructs: small argmax / cumsum / scatter operators under random steps, vs NumPy

def _tied(rng, shape, nan):
    """Small integers as float32 (many ties), with a NaN at a random point if *nan*."""
    x = rng.integers(-3, 4, size=shape).astype("float32")
    if nan:
        x[tuple(rng.integers(0, n) for n in shape)] = np.nan
    return x


def _argreduce_op(d, rng):
    from einloop import te
    shape = (d.draw(st.integers(1, 7)), d.draw(st.integers(1, 23)))
    axis, fn = d.draw(st.integers(0, 1)), d.draw(st.sampled_from(["argmax", "argmin"]))
    X = te.placeholder(shape, name="X")
    outs = getattr(te, fn)(X, axis=axis, dtype=d.draw(st.sampled_from(["int32", "int64"])))
    x = _tied(rng, shape, d.draw(st.booleans()))
    best = np.max if fn == "argmax" else np.min
    return [X], list(outs), [x], [getattr(np, fn)(x, axis), best(x, axis)]


def _cumulative_op(d, rng):
    from einloop import te
    shape = (d.draw(st.integers(1, 7)), d.draw(st.integers(1, 19)))
    axis, fn = d.draw(st.integers(0, 1)), d.draw(st.sampled_from(["cumsum", "cumprod"]))
    X = te.placeholder(shape, name="X")
    Y = te.compute(shape, lambda i, j: X[i, j] * 0.5 + 0.75, name="Y")    # a producer to place
    out = getattr(te, fn)(Y, axis=axis)
    x = rng.uniform(-1, 1, shape).astype("float32")
    return [X], [out], [x], [getattr(np, fn)(x * np.float32(0.5) + np.float32(0.75), axis=axis)]


def _scatter_op(d, rng):
    from einloop import te
    n, bins = d.draw(st.integers(1, 29)), d.draw(st.integers(1, 9))
    ids = te.placeholder((n,), "int32", name="ids")
    idx = rng.integers(-2, bins + 2, n).astype("int32")     # some outside: clamped into 0..bins-1
    clamped = np.clip(idx, 0, bins - 1)
    if d.draw(st.booleans()):
        H = te.histogram(ids, bins)
        return [ids], [H], [idx], [np.bincount(clamped, minlength=bins)]
    cols = d.draw(st.integers(1, 9))
    U = te.placeholder((n, cols), name="U")
    u = rng.uniform(-1, 1, (n, cols)).astype("float32")
    want = np.zeros((bins, cols), "float32")
    np.add.at(want, clamped, u)
    return [ids, U], [te.scatter_add((bins, cols), ids, U)], [idx, u], [want]


def _welford_op(d, rng):
    from einloop import te
    shape = (d.draw(st.integers(1, 7)), d.draw(st.integers(1, 23)))
    axis = d.draw(st.integers(0, 1))
    X = te.placeholder(shape, name="X")
    mean, var = te.welford(X, axis=axis)
    x = (rng.uniform(-1, 1, shape) + 2).astype("float32")    # a mean away from 0
    return [X], [mean, var], [x], [x.mean(axis), x.var(axis)]


def _recurrence_op(d, rng):
    """A user-written te.scan: the first-order IIR y[t] = a y[t-1] + x[t], or two states each
    reading the other's previous step; the reference is a plain loop."""
    from einloop import te
    T, M = d.draw(st.integers(1, 9)), d.draw(st.integers(1, 13))
    a = d.draw(st.sampled_from([0.5, -0.25, 0.75]))
    X = te.placeholder((T, M), name="X")
    x = rng.uniform(-1, 1, (T, M)).astype("float32")
    S0 = te.scan_state((T, M), name="S0")
    init0 = te.compute((1, M), lambda _, i: X[0, i], name="init0")
    if d.draw(st.booleans()):
        upd = te.compute((T, M), lambda t, i: a * S0[t - 1, i] + X[t, i], name="upd")
        y = x.copy()
        for t in range(1, T):
            y[t] = np.float32(a) * y[t - 1] + x[t]
        return [X], [te.scan(init0, upd, S0, name="Y")], [x], [y]
    S1 = te.scan_state((T, M), name="S1")
    init1 = te.compute((1, M), lambda _, i: -X[0, i], name="init1")
    u0 = te.compute((T, M), lambda t, i: a * S0[t - 1, i] - 0.25 * S1[t - 1, i] + X[t, i],
                    name="u0")
    u1 = te.compute((T, M), lambda t, i: 0.25 * S0[t - 1, i] + 0.5 * S1[t - 1, i], name="u1")
    y0, y1 = x.astype(np.float64), -x.astype(np.float64)
    for t in range(1, T):
        y0[t] = a * y0[t - 1] - 0.25 * y1[t - 1] + x[t]
        y1[t] = 0.25 * y0[t - 1] + 0.5 * y1[t - 1]
    outs = te.scan([init0, init1], [u0, u1], [S0, S1], name="Y")
    return [X], list(outs), [x], [y0, y1]


LANG_OPERATORS = {"argreduce": _argreduce_op, "cumulative": _cumulative_op,
                  "scatter": _scatter_op, "welford": _welford_op,
                  "recurrence": _recurrence_op}
LANG_PRIMITIVES = ["split", "reorder", "fuse", "vectorize", "parallel", "unroll", "rfactor",
                   "privatize", "compute_at", "compute_inline"]


def _lang_step(d, s):
    """One random step on a compute stage; it may be illegal (then refused)."""
    stages = [x for x in s.stages if isinstance(x.op, ComputeOp) and x.attach != "inline"]
    stage = d.draw(st.sampled_from(stages))
    leaves = stage.leaf_iter_vars
    kind = d.draw(st.sampled_from(LANG_PRIMITIVES))
    pick = lambda ivs: d.draw(st.sampled_from(ivs))      # noqa: E731
    reduce_leaves = [iv for iv in leaves if iv.kind.value == "reduce"]
    if kind == "split":
        stage.split(pick(leaves), factor=d.draw(st.integers(1, 8)))
    elif kind == "reorder":
        stage.reorder(*d.draw(st.permutations(leaves)))
    elif kind == "fuse" and len(leaves) > 1:
        n = d.draw(st.integers(0, len(leaves) - 2))
        stage.fuse(leaves[n], leaves[n + 1])
    elif kind in ("vectorize", "parallel", "unroll"):
        getattr(stage, kind)(pick(leaves))
    elif kind == "rfactor" and reduce_leaves:
        s.rfactor(stage.origin_op.output(0), pick(reduce_leaves),
                  d.draw(st.integers(0, len(stage.op.axis))))
    elif kind == "privatize" and reduce_leaves:       # a scatter's: split in parts, rfactor
        outer, _ = stage.split(pick(reduce_leaves), nparts=d.draw(st.integers(1, 4)))
        rf = s.rfactor(stage.origin_op.output(0), outer, 0)
        rf = rf[0] if isinstance(rf, tuple) else rf
        s[rf].parallel(s[rf].leaf_iter_vars[0])
    elif kind == "compute_at":
        target = d.draw(st.sampled_from(stages))
        stage.compute_at(target, pick(target.leaf_iter_vars))
    elif kind == "compute_inline":
        stage.compute_inline()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_random_schedules_of_argmax_cumsum_and_scatters_match_numpy(data):
    """Whatever steps einloop accepts on an argmax/argmin (ties, a NaN), a cumsum/cumprod, a
    histogram/scatter_add (indices outside the output, clamped), te.welford, or a user-written
    te.scan of one or two states, the kernel computes NumPy's np.argmax/np.max,
    np.cumsum/np.cumprod, np.bincount/np.add.at, np.mean/np.var, or the recurrence's plain loop;
    an illegal step (the scan axis split or parallel, a scatter's domain parallel, a primitive
    on a scan's second state) is refused with a ScheduleError."""
    import warnings
    from einloop import BuildError
    name = data.draw(st.sampled_from(sorted(LANG_OPERATORS)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    inputs, outputs, arrays, want = LANG_OPERATORS[name](data, rng)
    s = create_schedule(outputs)
    for _ in range(data.draw(st.integers(1, 6))):
        try:
            _lang_step(data, s)
        except ScheduleError:
            pass                        # an illegal request is refused; the schedule is unchanged
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = run(s, inputs, outputs, arrays)
    except (ScheduleError, BuildError):
        return                          # refused at lowering
    for g, w, t in zip(got, want, outputs):
        if t.dtype.startswith("float"):
            # atol: a privatized scatter adds up to 29 updates in another order than np.add.at
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4,
                                       err_msg=f"{name} {t.name} steps: {s.steps}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{name} {t.name} steps: {s.steps}")
