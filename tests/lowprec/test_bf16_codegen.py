"""What the compiler makes of bfloat16: vector code for AVX2 (16-bit lanes widened and narrowed
with vector instructions, never one lane at a time), the loop IR that says bfloat16, and the
compile cache, whose entries tell a bfloat16 kernel from a float16 or int16 one."""
import re

import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.codegen import cache, jit

from bf16util import BF16, assert_same_bits, random_bf16

AVX2 = "llvm -mcpu=haswell"
#: instructions that move one 16-bit lane: what a scalarised vector of bfloat16 would need
ONE_LANE = re.compile(r"\b(v?pinsrw|v?pextrw)\b")


def _scaled_copy(n, lanes):
    A = te.placeholder((n,), "bfloat16", name="A")
    B = te.compute((n,), lambda i: (A[i].astype("float32") * 3.0).astype("bfloat16"), name="B")
    s = create_schedule(B)
    xo, xi = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(xi)
    return s, A, B


def test_vector_loads_and_stores_of_bfloat16_stay_vectors_on_avx2():
    s, A, B = _scaled_copy(1024, 16)
    f = build(s, [A, B], target=AVX2)
    asm = f.get_source("asm")
    assert "vpmovzxwd" in asm and "vpslld" in asm           # 16 -> 32 bits, to the top half
    assert re.search(r"vmulps\s+.*%ymm", asm)               # float32 arithmetic, 8 lanes
    assert not ONE_LANE.search(asm), "a bfloat16 vector was handled one lane at a time"
    assert "call" not in asm                                # no compiler-rt conversion helper
    a = random_bf16(1024, seed=1)
    b = np.zeros(1024, BF16)
    f(a, b)
    assert_same_bits(b, (a.astype(np.float32) * 3).astype(BF16))


def test_a_bfloat16_matmul_widens_whole_vectors_and_uses_fma():
    X = te.placeholder((16, 32), "bfloat16", name="X")
    W = te.placeholder((32, 64), "bfloat16", name="W")
    k = te.reduce_axis((0, 32), name="k")
    Y = te.compute((16, 64), lambda i, j: te.sum(X[i, k].astype("float32")
                                                 * W[k, j].astype("float32"), axis=k), name="Y")
    s = create_schedule(Y)
    i, j = Y.op.axis
    jo, ji = s[Y].split(j, factor=16)
    s[Y].reorder(i, jo, k, ji)
    s[Y].vectorize(ji)
    f = build(s, [X, W, Y], target=AVX2)
    asm = f.get_source("asm")
    assert "vpmovzxwd" in asm and re.search(r"vfmadd\w*ps\s+.*%ymm", asm)
    assert not ONE_LANE.search(asm)
    x, w = random_bf16((16, 32), seed=2), random_bf16((32, 64), seed=3)
    y = np.zeros((16, 64), np.float32)
    f(x, w, y)
    np.testing.assert_allclose(y, x.astype(np.float32) @ w.astype(np.float32), rtol=1e-5)


def test_the_loop_ir_names_bfloat16():
    s, A, B = _scaled_copy(37, 8)
    text = str(lower(s, [A, B]))
    assert "bfloat16" in text and "vectorized" in text




def _copy(dtype, n=37):
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: A[i] + A[i], name="B")
    return build(create_schedule(B), [A, B])


def test_the_compile_cache_keeps_bfloat16_apart_and_reloads_it(fresh, monkeypatch):
    """Kernels alike but for a 16-bit dtype are three entries (the code differs: bfloat16 widens,
    rounds and narrows); a bfloat16 kernel loaded from the cache computes the same bits."""
    for dtype in ("int16", "float16", "bfloat16"):
        _copy(dtype)
    assert (cache.stats.misses, cache.stats.stores) == (3, 3)
    monkeypatch.setattr(jit, "_cache", {})
    f = _copy("bfloat16")
    assert cache.stats.hits == 1
    a = np.arange(37, dtype=np.float32).astype(BF16) * BF16.type(1.5)
    b = np.zeros(37, BF16)
    f(a, b)
    assert_same_bits(b, a + a)
