"""A vectorized loop of up to 64 lanes whose extent is no power of two is emitted as one vector
per power of two (56 = 32 + 16 + 8): LLVM splits a power-of-two vector into whole registers but
a <56 x float> lane by lane.  Results against NumPy at every extent up to 64, the assembly of an
explicit AVX-512 target (no lane-by-lane inserts), and periodic indices (``x // 3``, ``x % 3``)
that stay window loads in the parts that start at a constant other than 0."""
import re

import numpy as np
import pytest

from einloop import build, create_schedule, te

#: explicit targets: the code checked is the same on any host; kernels built for AVX2 run on
#: every machine the suite runs on, the AVX-512 one is only compiled
AVX2 = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell"
AVX512 = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
RNG = np.random.default_rng(9)


def row_op(rows, width):
    """``Y[r, x] = exp(X[r, x]) * A[x] + X[r, x // 3] - X[r, x % 3]``, x vectorized whole."""
    X = te.placeholder((rows, width), name="X")
    A = te.placeholder((width,), name="A")
    Y = te.compute((rows, width), lambda r, x: te.exp(X[r, x]) * A[x] + X[r, x // 3]
                   - X[r, x % 3], name="Y")
    s = create_schedule(Y)
    s[Y].vectorize(Y.op.axis[1])
    return s, [X, A, Y]


@pytest.mark.parametrize("width", [3, 7, 24, 40, 56, 63, 64])
def test_every_extent_computes_the_same(width):
    s, args = row_op(5, width)
    f = build(s, args, target=AVX2)
    x, a = RNG.standard_normal((5, width)).astype("float32"), RNG.random(width, "float32")
    y = np.full((5, width), np.nan, "float32")
    f(x, a, y)
    idx = np.arange(width)
    np.testing.assert_allclose(y, np.exp(x) * a + x[:, idx // 3] - x[:, idx % 3], rtol=1e-5,
                               atol=1e-6)


def test_56_lanes_are_whole_registers_and_periodic_reads_are_windows():
    s, args = row_op(4, 56)
    f = build(s, args, target=AVX512)
    asm = f.get_source("asm")
    assert len(re.findall(r"\bvinsertps\b", asm)) == 0      # no lane-by-lane vector
    assert re.search(r"\bvmovups\s+%zmm", asm) and re.search(r"\bvmovups\s+%ymm", asm)
    assert "@llvm.masked.gather" not in f.get_source("llvm")
