"""Dynamic shapes end to end: operators declared with symbolic extents (te.var / te.size_var),
scheduled, built once and called at many sizes, against NumPy; and their errors."""
import inspect
import warnings

import numpy as np
import pytest

from einloop import (ArgumentError, ScheduleError, TEError, build, create_schedule, lower, te)
from einloop.errors import ToolchainError, VectorizeWarning
from einloop.te.dag import ComputeDAG

import ops

#: (zoo operator, the parameters made symbolic)
SYMBOLIC = [("gemm", ("M",)), ("gemm", ("K",)), ("gemm", ("M", "N")),
            ("batch_matmul", ("Bt",)), ("matmul_transposed", ("M", "K")), ("conv2d", ("N",)),
            ("depthwise_conv", ("C",)), ("max_pool", ("C",)), ("softmax", ("M",)),
            ("softmax", ("N",)), ("layer_norm", ("M",)), ("layer_norm", ("N",)),
            ("multi_axis_reduce", ("A0",)), ("multi_axis_reduce", ("A2",)),
            ("elementwise_chain", ("N", "M"))]
SIZES = (1, 7, 16, 61)          # one, a prime, a multiple of the vector width, a larger one


def _tiled(s, outs):
    """Each output: outer axis split by 4 (parallel), last axis split by 8 (vectorized)."""
    for t in outs:
        st = s[t]
        axes = t.op.axis
        if len(axes) == 1:
            o, vi = st.split(axes[0], factor=8)
        else:
            o, _ = st.split(axes[0], factor=4)
            _, vi = st.split(axes[-1], factor=8)
        st.reorder(*[x for x in st.leaf_iter_vars if x is not vi], vi)   # reductions outside
        st.parallel(o)
        st.vectorize(vi)
    return s


@pytest.mark.parametrize("schedule", ["default", "tiled"])
@pytest.mark.parametrize("name, symbolic", SYMBOLIC, ids=lambda x: "-".join(x) if isinstance(
    x, tuple) else x)
def test_zoo_with_symbolic_extents_matches_numpy_at_every_size(name, symbolic, schedule):
    fn = getattr(ops, name)
    defaults = {k: p.default for k, p in inspect.signature(fn).parameters.items()}
    ins, outs, _ = fn(**{**defaults, **{k: te.size_var(k.lower()) for k in symbolic}})
    s = create_schedule(outs)
    if schedule == "tiled":
        _tiled(s, outs)
    f = build(s, ins + outs)                    # one kernel for every size
    rng = np.random.default_rng(0)
    for size in SIZES:
        cins, couts, ref = fn(**{**defaults, **{k: size for k in symbolic}})
        arrays = [rng.uniform(0.1, 1.0, size=t.shape).astype(t.dtype) for t in cins]
        got = [np.full(t.shape, np.nan, t.dtype) for t in couts]
        f(*arrays, *got)
        for g, w in zip(got, ref(*arrays)):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4,
                                       err_msg=f"{name} {symbolic}={size} ({schedule})")


def _dense(n, k=64, m=48):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


@pytest.mark.parametrize("make_var", [te.size_var, te.var])
def test_dense_with_an_accumulator_tile_at_a_symbolic_tail(make_var):
    """cache_write + tile: the 4-row accumulator of the last tile runs past n unless n % 4 == 0.
    Its rows there are computed from the last row's inputs (the read of A clamped) and never
    stored to C, so the reduction loop of the tail tile has no guard (its accumulators stay in
    registers); only the store to C is guarded.  Right at every n, 0 included for te.var."""
    A, B, C = _dense(make_var("n"))
    s = create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[CL].compute_at(s[C], jo)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, s[CL].op.axis[0], ki, s[CL].op.axis[1])
    s[CL].vectorize(s[CL].op.axis[1])
    s[C].vectorize(ji)
    s[C].parallel(io)
    text = str(lower(s, [A, B, C]))
    tail = text[text.index("else:"):]
    assert "A[max(min(i.outer * 4 + i, n - 1), 0) * 64 + r.outer * 4 + r.inner]" in tail, text
    assert tail.count("< n") == 1 and "if i.outer * 4 + (i.inner_1 + i.inner.steady) < n:" in tail
    _dense_matches_numpy(build(s, [A, B, C]), 64, 48, (0, 1, 3, 4, 5, 17, 1000)
                         if make_var is te.var else (1, 3, 4, 5, 17, 1000))


def _dense_matches_numpy(f, k, m, sizes):
    """The dense kernel *f* (A[n, k] @ B[k, m]) against NumPy at each n of *sizes*."""
    rng = np.random.default_rng(1)
    b = rng.random((k, m), dtype=np.float32)
    for n in sizes:
        a = rng.random((n, k), dtype=np.float32)
        c = np.full((n, m), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=f"n={n}")


def test_lowered_text_and_signature_show_the_symbols():
    A, B, C = _dense(te.size_var("n"))
    s = create_schedule(C)
    s[C].split(C.op.axis[0], factor=8)
    text = str(lower(s, [A, B, C]))
    assert "A: float32[n, 64]" in text
    # a guard-free main part of n // 8 tiles, then the tail with its guard
    assert "i.outer.steady = max(0, min((n + 7) // 8, n // 8))" in text
    assert "range(i.outer.steady)" in text
    # the tail: the blocks that can still hold rows, their whole rows first, then the guard
    assert "range(max(0, min((n + 7) // 8 - i.outer.steady, (n - 1) // 8 - i.outer.steady " \
           "+ 1)))" in text
    assert "i.inner.steady = max(0, min(8, " in text
    assert text.count("< n") == 1
    f = build(s, [A, B, C])
    assert repr(f) == "<einloop.Kernel C(A: float32[n, 64], B: float32[64, 48], " \
                      "C: float32[n, 48])>"
    assert [v.name for v in f.signature.vars] == ["n"]



def test_a_parallel_loop_over_row_blocks_keeps_its_tail_block_in_the_same_team():
    """parallel over blocks of 4 rows: one loop whose iterations branch to the guard-free body or
    the tail's, so that at n = 7 both blocks run at once (as two loops they ran one after the
    other, each alone)."""
    A, B, C = _dense(te.size_var("n"))
    s = create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(io)
    text = str(lower(s, [A, B, C]))
    assert [line.strip() for line in text.splitlines() if "parallel for" in line] == [
        "parallel for i.outer in range(max(0, min((n + 3) // 4, (n - 1) // 4 + 1))):"]
    assert "if i.outer < i.outer.steady:" in text
    f = build(s, [A, B, C])
    rng = np.random.default_rng(3)
    b = rng.random((64, 48), dtype=np.float32)
    for n in (1, 3, 4, 5, 7, 8, 9, 61):
        a = rng.random((n, 64), dtype=np.float32)
        c = np.full((n, 48), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=f"n={n}")


def test_a_parallel_loop_fused_over_row_blocks_runs_its_whole_blocks_first():
    """parallel (row block, column block): the iterations of whole row blocks come first, as a
    guard-free parallel loop, then the last block's, so that the threads share each evenly (with
    one loop, the thread given the last block's columns gets the short rows only)."""
    A, B, C = _dense(te.size_var("n"), m=64)
    s = create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[C].reorder(io, jo, ii, C.op.reduce_axis[0], ji)
    fused = s[C].fuse(io, jo)
    s[C].parallel(fused)
    s[C].vectorize(ji)
    text = str(lower(s, [A, B, C]))
    main, tail = [line.strip() for line in text.splitlines() if "parallel for" in line]
    # the whole blocks: n // 8 of them, 4 column blocks each, no guard inside
    assert main == "parallel for i.outer.j.outer.fused in range(i.outer.j.outer.fused.steady):"
    assert "i.outer.j.outer.fused.steady = max(0, min((n + 7) // 8 * 4, n // 8 * 4))" in text
    assert tail.startswith("parallel for i.outer.j.outer.fused_1 in range(")
    body = text[text.index(main):text.index(tail)]
    assert "< n" not in body and "if " not in body
    f = build(s, [A, B, C])
    rng = np.random.default_rng(2)
    b = rng.random((64, 64), dtype=np.float32)
    for n in (1, 7, 8, 9, 16, 61):
        a = rng.random((n, 64), dtype=np.float32)
        c = np.full((n, 64), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=f"n={n}")

def test_inconsistent_shapes_at_call_time_name_the_dimension_and_the_value():
    A, B, C = _dense(te.size_var("n"))
    f = build(create_schedule(C), [A, B, C])
    b = np.zeros((64, 48), np.float32)
    with pytest.raises(ArgumentError, match=r"argument 2 \(C\): dimension 0 is 6, but n = 5 "
                                            r"\(from argument 0 \(A\), dimension 0\)"):
        f(np.zeros((5, 64), np.float32), b, np.zeros((6, 48), np.float32))
    with pytest.raises(ArgumentError, match=r"size variable|at least 1"):
        f(np.zeros((0, 64), np.float32), b, np.zeros((0, 48), np.float32))
    with pytest.raises(ArgumentError, match="64"):          # a static dimension still checked
        f(np.zeros((5, 63), np.float32), b, np.zeros((5, 48), np.float32))


def test_a_plain_var_may_be_zero():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    r = te.reduce_axis((0, n), name="r")
    S = te.compute((1,), lambda i: te.sum(A[r], axis=r), name="S")
    f = build(create_schedule(S), [A, S])
    out = np.full(1, 7.0, np.float32)
    f(np.zeros(0, np.float32), out)
    assert out[0] == 0.0
    f(np.arange(5, dtype=np.float32), out)
    assert out[0] == 10.0


def test_declaration_errors():
    n = te.size_var("n")
    with pytest.raises(TEError, match=r"the extent n \+ 2 is an expression"):
        te.placeholder((n + 2,), name="X")
    with pytest.raises(TEError, match="symbolic extents are int64"):
        te.var("n", "float32")
    with pytest.raises(TEError, match="must be an identifier"):
        te.size_var("2n")
    with pytest.raises(TEError, match="a symbolic domain starts at 0"):
        te.reduce_axis((1, n))
    with pytest.raises(TEError, match="every dimension must be a positive integer"):
        te.placeholder((n, -3), name="X")
    X = te.placeholder((n,), name="X")
    with pytest.raises(TEError, match=r"float32 / int64.*astype"):
        te.compute((n,), lambda i: X[i] / n, name="Y")


def test_symbolic_loops_cannot_be_unrolled_and_vectorize_falls_back():
    n = te.size_var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] * 2.0, name="Y")
    s = create_schedule(Y)
    s[Y].unroll(Y.op.axis[0])
    with pytest.raises(ScheduleError, match="symbolic extent n, which cannot be unrolled"):
        build(s, [X, Y])
    s = create_schedule(Y)
    s[Y].vectorize(Y.op.axis[0])
    with pytest.warns(VectorizeWarning, match="its extent n is symbolic"):
        f = build(s, [X, Y])
    x = np.arange(11, dtype=np.float32)
    y = np.zeros_like(x)
    f(x, y)
    np.testing.assert_array_equal(y, 2 * x)


def test_an_extent_no_argument_carries_is_refused():
    n, m = te.size_var("n"), te.size_var("m")
    X = te.placeholder((n,), name="X")
    T = te.compute((m,), lambda i: X[0] * 1.0, name="T")
    Y = te.compute((n,), lambda i: X[i] + T[0], name="Y")
    with pytest.raises(ScheduleError, match="the symbolic extent.*m, which no argument"):
        build(create_schedule(Y), [X, Y])


def test_reads_are_clamped_unless_proven_inside():
    m = te.var("m")
    P = te.placeholder((m,), name="P")
    assert "max" not in str(te.compute((m,), lambda i: P[m - 1 - i], name="R").op.body)
    assert "min(i + 1, m - 1)" in str(te.compute((m,), lambda i: P[i] + P[i + 1],
                                                 name="S").op.body)


def test_structural_hash_ignores_names_but_not_sharing():
    def dense(n, m):
        A = te.placeholder((n, 8), name="A")
        B = te.placeholder((m, 8), name="B")
        return te.compute((n, 8), lambda i, j: A[i, j] + B[i % m, j], name="C")
    a, b = te.size_var("a"), te.size_var("b")
    one = ComputeDAG(dense(a, a)).structural_hash()
    assert one == ComputeDAG(dense(b, b)).structural_hash()
    assert one != ComputeDAG(dense(a, b)).structural_hash()
    assert one != ComputeDAG(dense(te.var("a"), te.var("a"))).structural_hash()   # min value
    # static declarations keep the hash the tuning logs already use (as before symbolic
    # extents existed)
    assert ComputeDAG(ops.gemm(64, 64, 64)[1]).structural_hash() == \
        "593c269153e286aa8479612969a83a29"
    with pytest.raises(TEError, match="depends on their values"):
        ComputeDAG(dense(a, a)).flop_count()


def test_compute_at_regions_over_symbolic_extents():
    """A region is computed where its start is proven non-negative for every n (a reversal, a
    clamped read), its rows past n guarded off; the results match NumPy at every size."""
    n = te.size_var("n")
    X = te.placeholder((n,), name="X")
    T = te.compute((n,), lambda i: X[i] * 2.0, name="T")
    Y = te.compute((n,), lambda i: T[n - 1 - i] + 1.0, name="Y")
    Z = te.compute((n,), lambda i: T[i - 1] + 1.0, name="Z")      # clamped: max(min(...), 0)
    for out, ref in ((Y, lambda x: 2 * x[::-1] + 1),
                     (Z, lambda x: 2 * x[np.maximum(np.arange(len(x)) - 1, 0)] + 1)):
        s = create_schedule(out)
        s[T].compute_at(s[out], out.op.axis[0])
        f = build(s, [X, out])
        for size in (1, 2, 9):
            x = np.arange(size, dtype=np.float32)
            y = np.zeros_like(x)
            f(x, y)
            np.testing.assert_array_equal(y, ref(x))


def test_a_region_start_that_may_be_negative_is_refused():
    from einloop.schedule.bound import _symbolic_region
    n = te.size_var("n")
    X = te.placeholder((n,), name="X")
    T = te.compute((n,), lambda i: X[i] * 2.0, name="T")
    Y = te.compute((n,), lambda i: T[i] + 1.0, name="Y")
    s = create_schedule(Y)
    s[T].compute_at(s[Y], Y.op.axis[0])
    from einloop.schedule.verify import verify
    bounds = verify(s, [X, Y]).bounds           # T's own region starts at i: accepted
    i = Y.op.axis[0].var
    assert _symbolic_region(s[T], 0, i, 1, s[Y], bounds) == (i, True)
    with pytest.raises(ScheduleError, match=r"cannot be proven to start inside its symbolic "
                                            r"extent n.*compute_root"):
        _symbolic_region(s[T], 0, i - 3, 1, s[Y], bounds)


def test_a_symbolic_kernel_exports_and_loads_in_a_fresh_process(tmp_path):
    from isolated import loaded_dense_matches_numpy
    from einloop.runtime.library import SCHEMA_SYMBOLIC, read_metadata
    A, B, C = _dense(te.size_var("n"))
    s = create_schedule(C)
    io, _ = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(io)
    f = build(s, [A, B, C], name="dense")
    try:
        lib = f.export_library(tmp_path / "dense.so")
    except ToolchainError as exc:               # no C compiler here
        pytest.skip(f"export_library: {exc}")
    assert read_metadata(lib)["schema"] == SCHEMA_SYMBOLIC
    assert loaded_dense_matches_numpy(lib, 64, 48, (1, 7, 300)).strip() == "Module"


@pytest.mark.parametrize("name, symbolic", [("gemm", ("M",)), ("softmax", ("M",)),
                                            ("layer_norm", ("M",)), ("conv2d", ("N",))])
def test_generated_schedules_of_a_bound_size_replay_on_the_symbolic_operator(name, symbolic):
    """What tuning a symbolic operator does: the auto-scheduler's configs for the operator bound
    at one size, replayed on the symbolic declaration, compute it at every size."""
    import random
    from einloop.autotune.task.auto import AutoTask
    from einloop.schedule.replay import replay
    from einloop.te.bind import bind_sizes
    fn = getattr(ops, name)
    defaults = {k: p.default for k, p in inspect.signature(fn).parameters.items()}
    ins, outs, _ = fn(**{**defaults, **{k: te.size_var(k.lower()) for k in symbolic}})
    bound = bind_sizes(ins + outs, {k.lower(): 24 for k in symbolic})
    task = AutoTask.of_tensors(bound)
    rng = random.Random(3)
    indices = [c.index for c in task.seed_configs(2)] + \
        [rng.randrange(len(task.config_space)) for _ in range(3)]
    checked = 0
    for index in indices:
        cfg = task.candidate(index)
        if cfg.error:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = build(replay(cfg.steps, outs), ins + outs)
        for size in (1, 7, 24, 53):
            cins, couts, ref = fn(**{**defaults, **{k: size for k in symbolic}})
            arrays = [np.random.default_rng(size).uniform(0.1, 1.0, size=t.shape).astype(t.dtype)
                      for t in cins]
            got = [np.full(t.shape, np.nan, t.dtype) for t in couts]
            f(*arrays, *got)
            for g, w in zip(got, ref(*arrays)):
                np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4,
                                           err_msg=f"{name} config {index} at {size}")
        checked += 1
    assert checked >= 3


def test_an_unbounded_read_of_a_symbolic_stage_computed_at_a_loop_is_a_schedule_error():
    """B read at (i * i) % n, computed at a loop of C: its region is all of n, which is no
    constant number of rows; a ScheduleError says so (the whole-axis check raised TEError, a
    symbolic extent compared as a bool)."""
    n = te.size_var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[(i * i) % n], name="C")
    s = create_schedule(C)
    io, _ = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    with pytest.raises(ScheduleError, match="cannot be proven to start inside its symbolic"):
        build(s, [A, C])


def test_a_panel_packed_per_column_block_outside_a_symbolic_row_loop():
    """BLAS's layout over a symbolic n: parallel over column blocks, B's panel for the block
    packed once in the block, every row tile of n inside it.  The panel does not vary with the
    row loop (of symbolic extent), so it has a constant size; a copy of A there would vary with
    it and is refused with the reason."""
    A, B, C = _dense(te.size_var("n"), k=64, m=64)
    s = create_schedule(C)
    BP = s.pack(B, 1, 16)
    CL = s.cache_write(C, "local")
    jo, ji = s[C].split(C.op.axis[1], factor=32)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jio, jii = s[C].split(ji, factor=16)
    s[C].reorder(jo, io, jio, ii, jii)
    s[C].parallel(jo)
    s[C].vectorize(jii)
    s[CL].compute_at(s[C], jio)
    s[CL].reorder(s[CL].op.reduce_axis[0], *s[CL].op.axis)
    s[CL].vectorize(s[CL].op.axis[1])
    s[BP].compute_at(s[C], jo)
    text = str(lower(s, [A, B, C]))
    assert "allocate B.pack: float32[2 * 64 * 16]" in text, text
    assert text.index("B.pack[") < text.index("for i.outer in range(i.outer.steady)"), text
    _dense_matches_numpy(build(s, [A, B, C]), 64, 64, (1, 3, 4, 9, 100))

    A, B, C = _dense(te.size_var("n"), k=64, m=64)
    s = create_schedule(C)
    AP = s.pack(A, 0, 4)
    jo, ji = s[C].split(C.op.axis[1], factor=32)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].reorder(jo, io, ii, ji)
    s[AP].compute_at(s[C], jo)
    with pytest.raises(ScheduleError, match=r"A\.pack is computed at C\.j\.outer, and the "
                                            r"region read from it varies with the loop i\.outer "
                                            r"of symbolic extent"):
        lower(s, [A, B, C])
