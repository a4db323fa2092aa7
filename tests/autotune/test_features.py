"""Feature extraction: fixed length whatever the nest, finite, informative, never raising."""
import os
import sys

import numpy as np
import pytest

import einloop
from einloop import te
from einloop.autotune.model.feature import extract as F
from einloop.ir.stmt import (Buffer, For, ForKind, LoweredFunc, Load, Scope, Seq,
                                      Store)
from einloop.ir.expr import Var, const

import ops
import strategies

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import gemm      # noqa: E402
import conv2d    # noqa: E402
import softmax   # noqa: E402

L = F.FEATURE_LENGTH


def _lower(s, args):
    return einloop.lower(s, args)


def _check_row(row, allow_failed=False):
    assert isinstance(row, np.ndarray)
    assert row.shape == (L,) and row.dtype == np.float32
    assert np.all(np.isfinite(row))
    if not allow_failed:
        assert row[F.feature_names().index("g_extract_failed")] == 0


def test_names_and_schema():
    names = F.feature_names()
    assert len(names) == L == len(set(names))
    assert names[0] == "g_extract_failed"
    assert F.schema() == {"length": L, "names_hash": F.SCHEMA_HASH}
    assert 100 < L < 1000


EXAMPLES = {
    "gemm_6x64_ku4": lambda: gemm.schedule(128, 128, 128, mr=6, bn=64, ku=4),
    "gemm_4x32_ku2": lambda: gemm.schedule(128, 128, 128, mr=4, bn=32, ku=2),
    "gemm_2x16_ku1": lambda: gemm.schedule(96, 80, 64, mr=2, bn=16, ku=1),
    "gemm_default": lambda: gemm.default(64, 48, 32),
    "conv2d": lambda: conv2d.schedule(1, 16, 14, 14, 32, 3, 3, kb=8, xb=8),
    "conv2d_default": lambda: conv2d.default(1, 8, 10, 10, 8, 3, 3),
    "softmax": lambda: softmax.schedule(64, 128),
    "softmax_default": lambda: softmax.default(16, 40),
}


@pytest.fixture(scope="module")
def example_rows():
    return {name: F.extract(_lower(*make())) for name, make in EXAMPLES.items()}


def test_examples_fixed_length_and_finite(example_rows):
    for name, row in example_rows.items():
        _check_row(row)
        assert np.count_nonzero(row) > 50, name


def test_different_schedules_give_different_rows(example_rows):
    rows = list(example_rows.values())
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            assert not np.array_equal(rows[i], rows[j])


def test_loop_order_changes_the_row():
    """Same op, same tiles, only the order of two loops differs."""
    def sched(order):
        A = te.placeholder((64, 64), name="A")
        B = te.placeholder((64, 64), name="B")
        k = te.reduce_axis((0, 64), name="k")
        C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = einloop.create_schedule(C)
        i, j = s[C].op.axis
        s[C].reorder(*(dict(i=i, j=j, k=k)[c] for c in order))
        return s, [A, B, C]
    rows = [F.extract(_lower(*sched(o))) for o in ("ijk", "ikj", "kij", "jki")]
    for r in rows:
        _check_row(r)
    assert len({r.tobytes() for r in rows}) == 4


@pytest.mark.parametrize("op", sorted(ops.ZOO))
def test_zoo_under_all_strategies(op):
    rows = []
    for strat in strategies.ALL:
        ins, outs, _ = ops.ZOO[op]()
        row = F.extract(_lower(strat(outs), ins + outs))
        _check_row(row)
        rows.append(row)
    assert len({r.tobytes() for r in rows}) >= 3


def test_einsums_extract():
    for subscripts, shapes in ops.EINSUMS:
        ins, outs, _ = ops.einsum(subscripts, shapes)
        _check_row(F.extract(_lower(einloop.create_schedule(outs), ins + outs)))


def test_gemm_micro_kernel_is_recognised():
    """The unrolled mr x bn register tile is seen through the expanded unroll."""
    raw = F.raw_features(_lower(*gemm.schedule(128, 128, 128, mr=6, bn=64, ku=4)))
    assert raw["m_replicas"] == 24                  # ku * mr replicas of the update
    assert raw["m_n_accumulators"] == 6             # one vector accumulator row per mr
    assert raw["m_vector_lanes"] == 64
    assert raw["m_is_update"] == 1 and raw["m_store_is_local"] == 1
    assert raw["m_loop0_vectorized"] == 1 and raw["m_loop1_unrolled"] == 1
    assert raw["m_loop1_extent"] == 24
    assert raw["g_has_parallel"] == 1
    assert raw["g_flops"] == 2 * 132 * 128 * 128     # M padded up to 22 tiles of 6 rows
    assert raw["m_acc0_vec_contig"] == 1            # the accumulator
    loads = [raw.get(f"m_acc{i}_vec_broadcast", 0) for i in (1, 2)]
    assert sorted(loads) == [0, 1]                  # A broadcast, packed B contiguous


def test_default_gemm_flops_and_strides():
    M, N, K = 24, 20, 16
    raw = F.raw_features(_lower(*gemm.default(M, N, K)))
    assert raw["g_flops"] == 2 * M * N * K
    assert raw["m_trip"] == M * N * K
    assert "g_has_parallel" not in raw and "m_vector_lanes" in raw
    assert raw["m_loop0_extent"] == K               # the reduction loop is innermost
    assert raw.get("m_acc0_stride_inner", 0) == 0      # C[i, j] does not move with k
    assert raw["m_acc1_stride_inner"] == 1              # A[i, k]: the larger load comes first
    assert raw["m_acc2_stride_inner"] == N              # B[k, j]


def test_failed_rows_never_raise():
    flag = F.feature_names().index("g_extract_failed")
    i = Var("i")
    buf = Buffer("X", "float32", (8,), Scope.ARG)
    bad = [
        None,
        "not a function",
        LoweredFunc("f", (buf,), (), For(i, -3, ForKind.SERIAL, Store(buf, i, const(1.0)))),
        LoweredFunc("f", (buf,), (), For(i, 8, "sideways", Store(buf, i, const(1.0)))),
        LoweredFunc("f", (buf,), (), Seq(("a statement?",))),
        LoweredFunc("f", (buf,), (), For(i, 8, ForKind.SERIAL, Store(buf, i, "1.0"))),
        LoweredFunc("f", ("not a buffer",), (), Store(buf, const(0), const(1.0))),
    ]
    for b in bad:
        row = F.extract(b)
        _check_row(row, allow_failed=True)
        assert row[flag] == 1 and np.count_nonzero(row) == 1
    rows = F.extract_many([None, _lower(*gemm.default(8, 8, 8))])
    assert rows.shape == (2, L) and rows[0, flag] == 1 and rows[1, flag] == 0


def test_extract_schedule_flags_lowering_failures():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = einloop.create_schedule(B)
    assert F.extract_schedule(s, [B])[0] == 1      # A missing from args: lowering fails
    _check_row(F.extract_schedule(s, [A, B]))


def test_real_unrolled_loops():
    """IR lowered without expanding unrolls (a hand-built nest) is described as loops."""
    i, u, v = Var("i"), Var("u"), Var("v")
    acc = Buffer("acc", "float32", (4, 16), Scope.LOCAL)
    x = Buffer("x", "float32", (64, 16), Scope.ARG)
    body = For(i, 64, ForKind.SERIAL, For(u, 4, ForKind.UNROLLED, For(
        v, 16, ForKind.VECTORIZED,
        Store(acc, u * 16 + v, Load(acc, u * 16 + v, "float32") + Load(x, i * 16 + v, "float32")))))
    func = LoweredFunc("f", (x,), (), body)
    raw = F.raw_features(func)
    assert raw["m_loop1_unrolled"] == 1 and raw["m_loop1_extent"] == 4
    assert raw["m_n_accumulators"] == 4 and raw["m_is_update"] == 1
    assert raw["g_n_unrolled_groups"] == 1 and raw["m_replicas"] == 4
    _check_row(F.extract(func))


@pytest.mark.parametrize("make", [
    lambda: gemm.schedule(128, 128, 128, mr=6, bn=32, ku=4),
    lambda: conv2d.schedule(1, 16, 14, 14, 32, 3, 3, kb=8, xb=8),
    lambda: (lambda ins, outs, _: (strategies.unroll_inner(outs), ins + outs))(
        *ops.multi_axis_reduce()),
], ids=["gemm", "conv2d", "multi_axis_reduce"])
def test_unexpanded_unrolls_give_the_same_row(make, monkeypatch):
    """``lower`` expands unrolled loops; IR that keeps them as loops (what a future
    ``lower(..., expand_unroll=False)`` would give, emulated here by disabling the unroll pass)
    gets the same features when the unrolled tiles divide their loops."""
    lower_module = sys.modules["einloop.schedule.lower"]
    expanded = _lower(*make())
    monkeypatch.setattr(lower_module, "unroll_loops", lambda stmt: stmt)
    kept = _lower(*make())
    assert "unrolled for" in str(kept) and "unrolled for" not in str(expanded)
    assert np.array_equal(F.extract(expanded), F.extract(kept))


def test_as_dict_names_a_row(example_rows):
    d = F.as_dict(example_rows["softmax"])
    assert d["g_has_parallel"] == 1.0
    assert all(name in F.feature_names() for name in d)
