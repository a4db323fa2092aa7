"""The tensorize rule on a conv2d in int8 (NHWC activations, HWIO weights: the reduction over
(ry, rx, rc) with rc innermost in groups of the intrinsic's K, the output channels its lanes)
and with a requantize epilogue (scale, zero point, clamp to int8) fused into the tile as
elementwise work: every tensorized seed exact against a NumPy reference."""
import re

import numpy as np
import pytest

from einloop import build, te
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.codegen.target import Target
from einloop.schedule.steps import StepKind

pytestmark = pytest.mark.skipif(not Target.parse("llvm").has_feature("avx2"),
                                reason="x86-64 with AVX2 only")

SCALE, ZERO_POINT = 0.0037, 3
#: AVX2 without VNNI (vpmaddwd): the sketch these tests check, on any host that runs AVX2
HASWELL = "llvm -mcpu=haswell"


def requantize(C, scale=SCALE, zero_point=ZERO_POINT):
    """int8(clamp(floor(C * scale + 0.5) + zero_point, -128, 127)), elementwise."""
    def q(*ix):
        v = te.floor(C[ix].astype("float32") * scale + 0.5) + float(zero_point)
        return te.minimum(te.maximum(v, -128.0), 127.0).astype("int8")
    return te.compute(C.shape, q, name="Q")


def requantize_ref(acc, scale=SCALE, zero_point=ZERO_POINT):
    v = np.floor(acc.astype(np.float32) * np.float32(scale) + np.float32(0.5)) + zero_point
    return np.clip(v, -128, 127).astype(np.int8)


def conv2d_nhwc(n, h, w, ci, co, r):
    D = te.placeholder((n, h, w, ci), "uint8", name="D")
    W = te.placeholder((r, r, ci, co), "int8", name="W")
    ry = te.reduce_axis((0, r), name="ry")
    rx = te.reduce_axis((0, r), name="rx")
    rc = te.reduce_axis((0, ci), name="rc")
    O = te.compute((n, h - r + 1, w - r + 1, co), lambda b, y, x, c: te.sum(
        D[b, y + ry, x + rx, rc].astype("int32") * W[ry, rx, rc, c].astype("int32"),
        axis=[ry, rx, rc]), name="O")
    return [D, W], O


def conv2d_ref(d, w):
    r = w.shape[0]
    oh, ow = d.shape[1] - r + 1, d.shape[2] - r + 1
    out = np.zeros((d.shape[0], oh, ow, w.shape[3]), np.int64)
    for a in range(r):
        for b in range(r):
            out += np.einsum("nyxc,co->nyxo", d[:, a:a + oh, b:b + ow].astype(np.int64),
                             w[a, b].astype(np.int64))
    return out.astype(np.int32)


def operands(ins, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, ins[0].shape, dtype=np.uint8)
    b = rng.integers(-128, 128, ins[1].shape, dtype=np.int8)
    a.reshape(-1)[:7] = 255
    b.reshape(-1)[:7] = -128
    return a, b


def check_seeds(out, ins, ref, n=3):
    sp = generate_space(out, HASWELL)
    seeds = [c for c in sp.seed_configs(n)
             if StepKind.TENSORIZE in [st.kind for st in sp.steps(c)]]
    assert seeds
    a, b = operands(ins)
    want = ref(a, b)
    for c in seeds:
        f = build(sp.schedule(c), ins + [out], target=HASWELL)
        got = np.full(out.shape, 5, out.dtype)
        f(a, b, got)
        np.testing.assert_array_equal(got, want)
        assert re.search(r"\bvpmaddwd\b", f.get_source("asm"))
    return sp


@pytest.mark.parametrize("shape", [(1, 7, 9, 12, 24, 3), (2, 6, 5, 6, 13, 3)])
def test_conv2d_nhwc_int8_is_tensorized_and_exact(shape):
    ins, O = conv2d_nhwc(*shape)
    sp = check_seeds(O, ins, conv2d_ref)
    assert RuleKind.TENSORIZE in sp.fired["O"]


def test_matmul_with_a_fused_requantize_epilogue_is_exact():
    M, N, K = 37, 48, 34
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype(
        "int32"), axis=k), name="C")
    Q = requantize(C)
    sp = check_seeds(Q, [A, B], lambda a, b: requantize_ref(a.astype(np.int32) @ b.astype(
        np.int32)))
    assert RuleKind.FUSE_CONSUMER in sp.fired["Q"] and RuleKind.TENSORIZE in sp.fired["C"]
    # the accumulator C is computed inside Q's tile loops: no cache_write stage of its own
    steps = sp.steps(sp.seed_configs(1)[0])
    assert [st.stage for st in steps if st.kind is StepKind.COMPUTE_AT] == ["C"]
    assert not any(st.kind is StepKind.CACHE_WRITE for st in steps)


def test_conv2d_with_a_fused_requantize_epilogue_is_exact():
    ins, O = conv2d_nhwc(1, 7, 9, 8, 16, 3)
    check_seeds(requantize(O), ins, lambda d, w: requantize_ref(conv2d_ref(d, w)))


def test_a_fused_epilogue_whose_columns_no_lanes_divide_is_skipped_not_raised():
    """The accumulator of a fused consumer spans whole intrinsic tiles of the columns: with 13
    output channels (no multiple of 8) the intrinsic is not offered, and the reason is kept."""
    ins, O = conv2d_nhwc(1, 5, 5, 4, 13, 3)
    sp = generate_space(requantize(O), HASWELL)
    assert RuleKind.TENSORIZE not in sp.fired["O"]
    ((stage, intrin, why),) = sp.tensorize_skipped
    assert stage == "O" and intrin == "x86.avx2.u8s8_i32x8" and why
