"""Vector loads whose lanes read a few narrow windows of memory: a stride of 2 (a strided
convolution or pooling over x), ``x // 2`` (nearest-neighbour upsampling) and the residue copy of
a transposed convolution (``R[x % 2, ..., x // 2]``).  Each is served by a few vector loads and a
shuffle instead of a gather, and computes what NumPy computes, with the vectorized loop whole, in
chunks with a masked tail, and at odd sizes.  The target is explicit (AVX2), so whether a gather
is emitted does not depend on the host; the kernels run on any x86-64 host.
"""
import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.autotune.space.sketch.analysis import windowed_last

TARGET = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell"


def gathers(kernel):
    return kernel.get_source("llvm").count("@llvm.masked.gather")


def vectorized(out, split=None):
    """*out*'s last axis vectorized (split by *split* first, if given), built for TARGET."""
    s = create_schedule(out)
    x = out.op.axis[-1]
    if split:
        _, x = s[out].split(x, factor=split)
    s[out].vectorize(x)
    return s


def upsample(C, H, W):
    X = te.placeholder((C, H, W), name="X")
    U = te.compute((C, 2 * H, 2 * W), lambda c, y, x: X[c, y // 2, x // 2], name="U")
    return X, U, lambda x: x.repeat(2, 1).repeat(2, 2)


def pair_sum(C, H, W):
    X = te.placeholder((C, H, 2 * W), name="X")
    S = te.compute((C, H, W), lambda c, y, x: X[c, y, 2 * x] + X[c, y, 2 * x + 1], name="S")
    return X, S, lambda x: x[:, :, 0::2] + x[:, :, 1::2]


def residue_copy(C, H, W):
    R = te.placeholder((2, 2, C, H, W), name="R")
    Y = te.compute((C, 2 * H, 2 * W), lambda c, y, x: R[y % 2, x % 2, c, y // 2, x // 2],
                   name="Y")
    return R, Y, lambda r: r.transpose(2, 3, 0, 4, 1).reshape(C, 2 * H, 2 * W)


CASES = {"upsample": upsample, "pair_sum": pair_sum, "residue_copy": residue_copy}


@pytest.mark.parametrize("split", [None, 8, 16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_window_loads_replace_gathers_and_compute_the_same(name, split):
    X, out, ref = CASES[name](3, 4, 8)             # the last axis: 16 (8 for pair_sum)
    kernel = build(vectorized(out, split), [X, out], target=TARGET)
    assert gathers(kernel) == 0, kernel.get_source("llvm")[:4000]
    x = np.random.default_rng(0).random([int(d) for d in X.shape], np.float32)
    got = np.full([int(d) for d in out.shape], np.nan, np.float32)
    kernel(x, got)
    np.testing.assert_array_equal(got, ref(x))


@pytest.mark.parametrize("name", sorted(CASES))
def test_odd_sizes_and_long_loops_compute_the_same(name):
    """A last axis longer than one vector (chunks of 16 and a masked tail) and odd extents: the
    tail may gather; every element must still be right."""
    X, out, ref = CASES[name](2, 3, 37)
    kernel = build(vectorized(out), [X, out], target=TARGET)
    x = np.random.default_rng(1).random([int(d) for d in X.shape], np.float32)
    got = np.full([int(d) for d in out.shape], np.nan, np.float32)
    kernel(x, got)
    np.testing.assert_array_equal(got, ref(x))


def test_far_apart_lanes_still_gather():
    """A stride of 64 elements: every lane its own window, more than a few: a gather."""
    X = te.placeholder((8, 64), name="X")
    T = te.compute((64, 8), lambda i, j: X[j, i], name="T")
    kernel = build(vectorized(T), [X, T], target=TARGET)
    assert gathers(kernel) > 0
    x = np.random.default_rng(2).random((8, 64), np.float32)
    got = np.empty((64, 8), np.float32)
    kernel(x, got)
    np.testing.assert_array_equal(got, x.T)


def test_the_auto_scheduler_vectorizes_what_windows_serve():
    for name in sorted(CASES):
        _, out, _ = CASES[name](3, 4, 8)
        assert windowed_last(out.op, 8), name
    X = te.placeholder((8, 64), name="X")
    T = te.compute((64, 8), lambda i, j: X[j, i], name="T")
    assert not windowed_last(T.op, 8)
