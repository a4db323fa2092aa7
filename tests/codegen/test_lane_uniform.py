"""Loads whose index is the same in every vector lane, or contiguous after all, once the index's
divisions are simplified with the lanes' range (arith.simplify: terms too small to cross a
multiple of the divisor).  TVM's fused elementwise idiom (fuse every axis, split by 16, parallel
outer, vectorize inner) over ``X[n, c, h, w] * G[c]``: ``G``'s index is ``f // (H * W) % C`` of
the fused index ``f = 16 * o + lane``, the same in all 16 lanes when ``H * W`` is a multiple of
16, so ``G[c]`` is one load broadcast, not a 16-lane gather.  The target is explicit (AVX2):
whether a gather is emitted does not depend on the host.
"""
import numpy as np
import pytest

from einloop import build, create_schedule, te

TARGET = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell"


def fused_idiom(shape, per, layout):
    """``X * G`` broadcast along axis *per* of a 4-D *shape*, every axis fused, split by 16,
    the outer loop parallel and the inner one vectorized."""
    X = te.placeholder(shape, name="X")
    G = te.placeholder((shape[per],), name="G")
    Y = te.compute(shape, lambda *ix: X[ix] * G[ix[per]], name="Y")
    s = create_schedule(Y)
    outer, inner = s[Y].split(s[Y].fuse(*Y.op.axis), factor=16)
    s[Y].parallel(outer)
    s[Y].vectorize(inner)
    return build(s, [X, G, Y], target=TARGET), layout


def gathers(kernel):
    """Gathers in the kernel's optimised LLVM IR (a backend may turn them into scalar loads,
    which cost as much, so the IR is where they are counted)."""
    return kernel.get_source("llvm").count("@llvm.masked.gather")


def run(kernel, shape, per):
    rng = np.random.default_rng(0)
    x = rng.random(shape, np.float32)
    g = rng.random(shape[per], np.float32)
    y = np.full(shape, np.nan, np.float32)
    kernel(x, g, y)
    view = [1] * len(shape)
    view[per] = shape[per]
    np.testing.assert_array_equal(y, x * g.reshape(view))


@pytest.mark.parametrize("shape, per", [
    ((2, 64, 28, 28), 1),       # NCHW, per channel: H * W = 784 = 49 * 16
    ((1, 3, 16, 16), 1),        # H * W = 256
    ((2, 28, 28, 64), 3),       # NHWC, per channel: the index is f % 64, contiguous
    ((3, 5, 4, 48), 3),         # 48 channels, a multiple of 16
])
def test_a_lane_uniform_or_contiguous_operand_is_not_gathered(shape, per):
    kernel, _ = fused_idiom(shape, per, None)
    assert gathers(kernel) == 0, kernel.get_source("ir")
    run(kernel, shape, per)


@pytest.mark.parametrize("shape, per", [
    ((2, 5, 7, 9), 1),          # H * W = 63: lanes straddle channels, a gather is right
    ((3, 7, 5, 13), 3),         # 13 channels
    ((1, 17, 3, 3), 1),
])
def test_odd_sizes_still_compute_the_same(shape, per):
    kernel, _ = fused_idiom(shape, per, None)
    run(kernel, shape, per)
