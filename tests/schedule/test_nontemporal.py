"""``s[T].nontemporal()``: streaming stores.  Results unchanged (vector, tail and scalar stores,
a cache_write copy-out, a parallel loop), the code LLVM emits for explicit x86-64 and AArch64
targets, the printed loop nest, replay, and every misuse a ScheduleError.  The auto-scheduler's
use of it is tested in ``tests/autotune/auto/test_rule_nontemporal.py``."""
import re

import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.errors import ScheduleError

#: explicit targets, so the code checked is the same on any host (haswell runs on every AVX2
#: machine; znver4 has SSE4A's scalar streaming stores; the AArch64 one is only compiled)
HASWELL = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell"
ZNVER4 = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4"
AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
RNG = np.random.default_rng(5)


def scaled(M, N, lanes=8, parallel=True):
    """``Y = exp(X) * 2 + 1``, vectorized by *lanes* (a tail where N is no multiple of it)."""
    X = te.placeholder((M, N), name="X")
    Y = te.compute((M, N), lambda i, j: te.exp(X[i, j]) * 2.0 + 1.0, name="Y")
    s = create_schedule(Y)
    i, j = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=lanes)
    s[Y].vectorize(ji)
    if parallel:
        s[Y].parallel(i)
    s[Y].nontemporal()
    return s, X, Y


@pytest.mark.parametrize("M, N, lanes, parallel", [(9, 64, 8, True), (5, 37, 8, True),
                                                    (3, 19, 1, False), (4, 16, 16, False)])
def test_streamed_results_are_the_same(M, N, lanes, parallel):
    s, X, Y = scaled(M, N, lanes, parallel)
    f = build(s, [X, Y], target=HASWELL)
    x, y = RNG.standard_normal((M, N)).astype("float32"), np.full((M, N), np.nan, "float32")
    f(x, y)
    np.testing.assert_allclose(y, np.exp(x) * 2 + 1, rtol=1e-5)


def test_the_stores_stream_and_are_fenced():
    """Every store of Y carries the nontemporal hint; each function that streams (the parallel
    loop's worker) ends with a fence, so another thread reads what it wrote."""
    s, X, Y = scaled(8, 64)
    f = build(s, [X, Y], target=HASWELL)
    ir_text = f.get_source("llvm")
    assert re.search(r"store <8 x float> .*!nontemporal", ir_text)
    assert "call void @llvm.x86.sse.sfence()" in ir_text
    asm = f.get_source("asm")
    # haswell has no unaligned vector streaming store: LLVM writes the lanes with movnti
    assert "movnti" in asm and "sfence" in asm
    assert "movntsd" in build(s, [X, Y], target=ZNVER4).get_source("asm")   # SSE4A


def test_aarch64_streams_with_store_pair_non_temporal():
    """AArch64's streaming store writes a pair of registers: 8 lanes of float32."""
    s, X, Y = scaled(8, 64, lanes=8)
    asm = build(s, [X, Y], target=AARCH64).get_source("asm")
    assert "stnp" in asm and "dmb" in asm


def test_a_plain_stage_has_no_streaming_store():
    X = te.placeholder((8, 64), name="X")
    Y = te.compute((8, 64), lambda i, j: X[i, j] + 1.0, name="Y")
    s = create_schedule(Y)
    f = build(s, [X, Y], target=HASWELL)
    assert "nontemporal" not in f.get_source("llvm") and "movnt" not in f.get_source("asm")


def test_a_cache_write_copy_out_streams():
    """A matmul's accumulator in registers, the copy to C streamed."""
    n = 48
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[CL].compute_at(s[C], jo)
    s[C].vectorize(ji)
    s[C].nontemporal()
    text = str(lower(s, [A, B, C]))
    streamed = [line for line in text.splitlines() if "# nontemporal" in line]
    assert len(streamed) == 1 and streamed[0].strip().startswith("C[")
    f = build(s, [A, B, C], target=HASWELL)
    a, b = RNG.random((n, n), "float32"), RNG.random((n, n), "float32")
    c = np.zeros((n, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


def test_nontemporal_replays_and_prints():
    s, X, Y = scaled(4, 32)
    assert "s[Y].nontemporal()" in str(s)
    from einloop.schedule import replay as R
    X2 = te.placeholder((4, 32), name="X")
    Y2 = te.compute((4, 32), lambda i, j: te.exp(X2[i, j]) * 2.0 + 1.0, name="Y")
    replayed = R.replay(s.steps, [Y2])
    assert replayed[Y2].streaming
    assert "# nontemporal" in str(lower(replayed, [X2, Y2]))


def _reduction():
    A = te.placeholder((16, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    R = te.compute((16,), lambda i: te.sum(A[i, k], axis=k), name="R")
    return A, R


def _misuse(case):
    if case == "a reduction":
        A, R = _reduction()
        create_schedule(R)[R].nontemporal()
    elif case == "a placeholder":
        A, R = _reduction()
        create_schedule(R)[A].nontemporal()
    elif case == "an inlined stage":
        X = te.placeholder((16,), name="X")
        T = te.compute((16,), lambda i: X[i] * 2.0, name="T")
        Y = te.compute((16,), lambda i: T[i] + 1.0, name="Y")
        s = create_schedule(Y)
        s[T].compute_inline()
        s[T].nontemporal()
    elif case == "computed at a loop":
        X = te.placeholder((16, 8), name="X")
        T = te.compute((16, 8), lambda i, j: X[i, j] * 2.0, name="T")
        Y = te.compute((16, 8), lambda i, j: T[i, j] + 1.0, name="Y")
        s = create_schedule(Y)
        s[T].compute_at(s[Y], s[Y].op.axis[0])
        s[T].nontemporal()
        lower(s, [X, Y])


@pytest.mark.parametrize("case, message", [
    ("a reduction", r"nontemporal on stage R: it is a reduction, .*s\.cache_write\(R\) first"),
    ("a placeholder", r"nontemporal: stage A is a placeholder"),
    ("an inlined stage", r"nontemporal: stage T is inlined"),
    ("computed at a loop", r"nontemporal on stage T: the stage is computed at a loop of another "
                           r"stage, so its buffer lives in cache"),
])
def test_misuse_is_a_schedule_error(case, message):
    with pytest.raises(ScheduleError, match=message):
        _misuse(case)
