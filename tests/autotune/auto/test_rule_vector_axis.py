"""Rules 2-3's other vector axis: a tiled stage whose last data axis is no multiple of the lanes
(a convolution's rows of 7, 14 or 56 pixels) may vectorize a data axis that is (its output
channels), every read along it contiguous or packed, with the accumulator stored that axis
innermost (``storage_order``).  On the AVX2 model of rule_ops (8 lanes, 16 registers, 2
cores); every config tried computes what NumPy computes."""
import random

import ops
from rule_ops import AVX2, check_steps, gemm_relu, kinds, steps_of
from einloop import te
from einloop.autotune.space.sketch import generate_space
from einloop.autotune.space.sketch.rules import KnobKind, knob_name

SEED_COUNT = 8


def vector_knob(sp, f):
    return sp.config_space.knobs.get(knob_name(KnobKind.VECTOR_AXIS, f))


def tiled(sp, name):
    return next(f for f in sp.analysis.stages() if f.name == name)


def test_a_convolution_with_short_rows_may_vectorize_its_channels():
    ins, outs, ref = ops.conv2d(N=1, C=6, H=14, W=14, K=16, pad=1, stride=1)   # rows of 14
    sp = generate_space(outs, AVX2)
    f = tiled(sp, "Out")
    assert f.vector_alt == 1                                   # Out[n, k, y, x]: k
    assert [e.val for e in vector_knob(sp, f).entities] == ["last", "alt"]
    steps = steps_of(sp, Out__vaxis="alt", Out__tile__k=(-1, 1, 1, 16),
                     Out__tile__x=(-1, 1, 1, 7), Out__pack__W=1)
    order = [st for st in steps if st.kind.value == "storage_order"]
    assert len(order) == 1 and order[0].args["axes"][-1] == "k", order
    vectorized = [st.args["axis"] for st in steps if st.kind.value == "vectorize"
                  and st.stage == order[0].stage]
    assert vectorized and vectorized[0].startswith("k"), vectorized
    check_steps(steps, ins, outs, ref)


def test_configs_along_either_axis_compute_the_same():
    ins, outs, ref = ops.conv2d(N=1, C=5, H=9, W=14, K=16, pad=1, stride=1)
    sp = generate_space(outs, AVX2)
    cs = sp.config_space
    rng = random.Random(7)
    alt = 0
    for index in rng.sample(range(len(cs)), 10):
        c = cs.get(index)
        alt += c[knob_name(KnobKind.VECTOR_AXIS, "Out")].val == "alt"
        check_steps(sp.steps(c), ins, outs, ref)
    assert alt > 0


def test_the_seeds_try_the_channels_as_vectors():
    ins, outs, ref = ops.conv2d(N=1, C=8, H=14, W=14, K=32, pad=1, stride=1)
    sp = generate_space(outs, AVX2)
    seeds = sp.seed_configs(SEED_COUNT)
    name = knob_name(KnobKind.VECTOR_AXIS, "Out")
    alts = [c for c in seeds if c[name].val == "alt"]
    assert alts and len(alts) < len(seeds)
    for c in alts:
        steps = sp.steps(c)
        assert "storage_order" in kinds(steps)
        check_steps(steps, ins, outs, ref)


def test_a_convolution_whose_rows_fill_the_lanes_may_still_vectorize_its_channels():
    """Rows of 32 pixels fill 8 lanes, but each tap of the 3 x 3 window loads them at another
    offset: the channels are offered as the vector axis too, and such a config computes what
    NumPy computes.  A GEMM, which reads no window, is not offered them (the test below)."""
    ins, outs, ref = ops.conv2d(N=1, C=4, H=6, W=32, K=16, pad=1, stride=1)
    sp = generate_space(outs, AVX2)
    f = tiled(sp, "Out")
    assert f.vector_alt == 1
    assert [e.val for e in vector_knob(sp, f).entities] == ["last", "alt"]
    steps = steps_of(sp, Out__vaxis="alt", Out__tile__k=(-1, 1, 1, 16),
                     Out__tile__x=(-1, 1, 1, 8), Out__pack__W=1)
    assert "storage_order" in kinds(steps)
    check_steps(steps, ins, outs, ref)


def test_no_other_axis_where_the_last_fills_the_lanes_or_none_is_contiguous():
    _, outs, _ = gemm_relu(16, 24, 12)                         # 24 = 3 x 8 lanes
    sp = generate_space(outs, AVX2)
    assert tiled(sp, "C").vector_alt is None and vector_knob(sp, tiled(sp, "C")) is None
    # a channel axis that is no multiple of the lanes
    _, outs, _ = ops.conv2d(N=1, C=4, H=9, W=14, K=12, pad=1, stride=1)
    sp = generate_space(outs, AVX2)
    assert tiled(sp, "Out").vector_alt is None
    # reads strided along the other axis and not packable: X[j, i] read by Y[i, j]
    X = te.placeholder((16, 16), name="X")
    W = te.placeholder((16, 13), name="W")
    k = te.reduce_axis((0, 16), name="k")
    Y = te.compute((16, 13), lambda i, j: te.sum(X[k, i] * X[i, k] * W[k, j], axis=k), name="Y")
    sp = generate_space([Y], AVX2)
    assert tiled(sp, "Y").vector_alt is None


def test_a_gemm_whose_columns_do_not_fill_the_lanes_may_vectorize_its_rows():
    ins, outs, ref = gemm_relu(32, 20, 12)                     # 20 columns, 32 rows
    sp = generate_space(outs, AVX2)
    f = tiled(sp, "C")
    assert f.vector_alt == 0                                   # rows, through A packed along i
    steps = steps_of(sp, C__vaxis="alt", C__tile__i=(-1, 1, 1, 8), C__tile__j=(-1, 1, 1, 5),
                     C__pack__A=1)
    assert "storage_order" in kinds(steps)
    check_steps(steps, ins, outs, ref)
    assert "pack" in kinds(steps)


def test_a_weight_gradient_ending_in_its_window_vectorizes_its_output_channels():
    """A convolution's weight gradient wgrad[o, c, r, s] ends in the 3 of its window: the
    vector loop may run along its 32 output channels, whose reads of the output gradient
    are packed; each config tried along them computes what NumPy computes."""
    ins, outs, ref = ops.conv2d_weight_gradient()
    sp = generate_space(outs, AVX2)
    f = tiled(sp, "wgrad")
    assert f.vector_alt == 0
    assert [e.val for e in vector_knob(sp, f).entities] == ["last", "alt"]
    cs = sp.config_space
    name = knob_name(KnobKind.VECTOR_AXIS, f)
    alts = [i for i in random.Random(3).sample(range(len(cs)), 60)
            if cs.get(i)[name].val == "alt"][:3]
    assert alts
    for i in alts:
        check_steps(sp.steps(cs.get(i)), ins, outs, ref)
