"""The vectorize pass: which vectorized loops become SIMD lanes and which parallel loops run on
threads is decided in lower(), shown in the lowered IR, and explained by a warning when a loop
falls back to serial."""
import warnings

import numpy as np
import pytest

from einloop import (ParallelWarning, VectorizeWarning, InternalError, build, create_schedule,
                     lower, te)
from einloop.codegen import Target, compile_func, emit
from einloop.ir.expr import Var, const
from einloop.ir.stmt import Buffer, For, ForKind, Load, LoweredFunc, Scope, Store
from einloop.schedule.passes.vectorize import vectorize_loops


def transposed_fused_gemm(M=6, N=10, K=5, unroll_outer=False):
    """C = A @ B with the data axes fused as (j, i): C's index is not affine in the fused loop
    (``(f % M) * N + f // M``), and the reduction reads C, so the vector loop must stay serial."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    i, j = s[C].op.axis
    s[C].reorder(k, j, i)
    f = s[C].fuse(j, i)
    fo, fi = s[C].split(f, factor=4)
    s[C].vectorize(fi)
    if unroll_outer:
        s[C].unroll(fo)
    return s, (A, B, C)


def gemm_inputs(M=6, N=10, K=5):
    rng = np.random.default_rng(0)
    return rng.random((M, K), dtype="float32"), rng.random((K, N), dtype="float32")


def test_an_unvectorizable_loop_warns_why_and_lowers_serial():
    s, args = transposed_fused_gemm()
    with pytest.warns(VectorizeWarning) as caught:
        text = str(lower(s, args))
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert msg.startswith("stage C: the vectorized loop j.i.fused.inner runs serially")
    assert "is not affine in j.i.fused.inner" in msg and "also reads C" in msg
    assert "vectorize a loop that indexes C affinely" in msg
    assert caught[0].filename == __file__           # points at the caller, not at einloop
    # the initialisation (which does not read C) stays vectorized; the update becomes serial
    assert "\n    vectorized for j.i.fused.inner in range(4):\n" in text
    assert "\n      for j.i.fused.inner in range(4):\n" in text


def test_an_unvectorizable_loop_computes_what_numpy_does():
    s, args = transposed_fused_gemm()
    with pytest.warns(VectorizeWarning):
        f = build(s, args)
    a, b = gemm_inputs()
    c = np.empty((6, 10), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_one_warning_per_lowering_though_unrolling_copies_the_loop():
    s, args = transposed_fused_gemm(unroll_outer=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = str(lower(s, args))
    assert text.count("for j.i.fused.inner") > 1
    assert len([w for w in caught if issubclass(w.category, VectorizeWarning)]) == 1


def test_a_vectorizable_loop_prints_vectorized_and_becomes_simd():
    n = 64
    A = te.placeholder((n, n), name="A")
    C = te.compute((n, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="C")
    s = create_schedule(C)
    jo, ji = s[C].split(s[C].op.axis[1], factor=8)
    s[C].vectorize(ji)
    with warnings.catch_warnings():
        warnings.simplefilter("error", VectorizeWarning)
        text = str(lower(s, [A, C]))
        f = build(s, [A, C])
    assert "vectorized for j.inner in range(8):" in text
    assert "<8 x float>" in f.get_source("llvm")
    a = np.random.default_rng(1).random((n, n), dtype="float32")
    c = np.empty_like(a)
    f(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_a_parallel_loop_in_a_parallel_loop_warns_and_runs_serially():
    n = 32
    A = te.placeholder((n, n), name="A")
    C = te.compute((n, n), lambda i, j: A[i, j] + 1.0, name="C")
    s = create_schedule(C)
    i, j = s[C].op.axis
    s[C].parallel(i)
    s[C].parallel(j)
    with pytest.warns(ParallelWarning, match=r"stage C: the parallel loop j runs serially because "
                                             r"it is nested in the parallel loop i"):
        text = str(lower(s, [A, C]))
    assert "parallel for i in range(32):" in text and "\n    for j in range(32):" in text
    with pytest.warns(ParallelWarning):
        f = build(s, [A, C])
    a = np.random.default_rng(2).random((n, n), dtype="float32")
    c = np.empty_like(a)
    f(a, c)
    np.testing.assert_array_equal(c, a + 1)


def test_the_tuners_analysis_view_keeps_the_requested_kinds():
    s, args = transposed_fused_gemm()
    with warnings.catch_warnings():
        warnings.simplefilter("error", VectorizeWarning)
        text = str(lower(s, args, expand_unroll=False))
    assert "vectorized for j.i.fused.inner" in text


def test_debug_prints_the_decisions(monkeypatch, capsys):
    monkeypatch.setenv("EINLOOP_DEBUG", "1")
    s, args = transposed_fused_gemm()
    with pytest.warns(VectorizeWarning):
        lower(s, args)
    err = capsys.readouterr().err
    assert "--- vectorize_loops: stage C, vectorized loop j.i.fused.inner: serial: the store to C" \
        in err
    assert "--- after vectorize_loops ---" in err


def reduction_into_one_element():
    """Hand-made IR: ``C[0] = C[0] + A[k]`` marked vectorized over ``k``."""
    A = Buffer("A", "float32", (16,), Scope.ARG)
    C = Buffer("C", "float32", (1,), Scope.ARG)
    k = Var("k")
    body = For(k, 16, ForKind.VECTORIZED,
               Store(C, const(0), Load(C, const(0), "float32") + Load(A, k, "float32")))
    return LoweredFunc("red", (A, C), (), body, {"outputs": ["C"]})


def test_codegen_decides_hand_made_ir_with_the_same_rules():
    func = reduction_into_one_element()
    with pytest.warns(VectorizeWarning, match=r"stage C: .* the store to C\[0\] does not depend "
                                              r"on the lane"):
        f = compile_func(func)
    a = np.arange(16, dtype="float32")
    c = np.zeros(1, "float32")
    f(a, c)
    assert c[0] == a.sum()
    with pytest.warns(VectorizeWarning):
        once = vectorize_loops(func.body)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vectorize_loops(once) is once and once.kind is ForKind.SERIAL    # idempotent


def test_codegen_trusts_the_loop_kinds(monkeypatch):
    """A vectorized loop with another vectorized loop inside that reaches the emitter is a bug
    in the pass."""
    A = Buffer("A", "float32", (4, 4), Scope.ARG)
    i, j = Var("i"), Var("j")
    body = For(i, 4, ForKind.VECTORIZED,
               For(j, 4, ForKind.VECTORIZED, Store(A, i * 4 + j, const(1.0, "float32"))))
    func = LoweredFunc("nested", (A,), (), body, {"outputs": ["A"]})
    with pytest.warns(VectorizeWarning, match="it contains the vectorized loop j"):
        assert vectorize_loops(body).kind is ForKind.SERIAL
    monkeypatch.setattr(emit, "vectorize_loops", lambda stmt, schedule=None: stmt)
    with pytest.raises(InternalError, match="inside a vectorized loop"):
        emit.build_module(func, Target.parse("llvm"))
