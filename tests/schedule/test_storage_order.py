"""``s[T].storage_order(...)``: the dimension order of a stage's own buffer.  Results unchanged
(a root temp, a tile computed at a consumer's loop, a symbolic extent), the flat indices in the
printed loop nest, a channel-vectorized convolution tile with contiguous vector accesses in the
code LLVM emits for an explicit AVX-512 target, and every misuse a ScheduleError."""
import re

import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.errors import ScheduleError

SKYLAKE = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
RNG = np.random.default_rng(11)


def transposed_temp(M, N):
    """``T = 2 X`` (a temp), ``Y[i, j] = T[i, j] + T[i, N - 1 - j]``."""
    X = te.placeholder((M, N), name="X")
    T = te.compute((M, N), lambda i, j: X[i, j] * 2.0, name="T")
    Y = te.compute((M, N), lambda i, j: T[i, j] + T[i, N - 1 - j], name="Y")
    return X, T, Y


def reference_transposed_temp(x):
    return x * 2 + (x * 2)[:, ::-1]


def test_a_root_temp_stored_column_by_column_computes_the_same():
    X, T, Y = transposed_temp(6, 10)
    s = create_schedule(Y)
    i, j = s[T].op.axis
    s[T].storage_order(j, i)
    text = str(lower(s, [X, Y]))
    assert re.search(r"T\[j \* 6 \+ i\] =", text), text    # column-major: i contiguous
    f = build(s, [X, Y])
    x = RNG.standard_normal((6, 10)).astype("float32")
    y = np.full_like(x, np.nan)
    f(x, y)
    np.testing.assert_allclose(y, reference_transposed_temp(x), rtol=1e-6)


def test_the_natural_order_changes_nothing():
    X, T, Y = transposed_temp(4, 8)
    plain = create_schedule(Y)
    s = create_schedule(Y)
    i, j = s[T].op.axis
    s[T].storage_order(i, j)
    assert str(lower(s, [X, Y])) == str(lower(plain, [X, Y]))


def test_a_tile_computed_at_a_loop_and_a_symbolic_extent():
    n = te.size_var("n")
    X = te.placeholder((n, 12), name="X")
    T = te.compute((n, 12), lambda i, j: X[i, j] + 1.0, name="T")
    Y = te.compute((n, 12), lambda i, j: T[i, j] * T[i, 11 - j], name="Y")
    s = create_schedule(Y)
    yo, yi = s[Y].split(s[Y].op.axis[0], factor=4)
    s[T].compute_at(s[Y], yo)
    i, j = s[T].op.axis
    s[T].storage_order(j, i)
    f = build(s, [X, Y])
    for rows in (1, 4, 7):
        x = RNG.standard_normal((rows, 12)).astype("float32")
        y = np.full_like(x, np.nan)
        f(x, y)
        np.testing.assert_allclose(y, (x + 1) * (x + 1)[:, ::-1], rtol=1e-6)


def channel_vectorized_conv(ordered):
    """A 3x3 convolution of 16 channels over rows 14 wide (no multiple of 16 lanes): each
    tile of 16 output channels x 7 columns is computed at the output's column loop with the
    channels vectorized; *ordered*: its buffer stored channels innermost."""
    x = te.placeholder((16, 16, 16), name="x")
    w = te.placeholder((16, 16, 3, 3), name="w")
    c = te.reduce_axis((0, 16), name="c")
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    conv = te.compute((16, 14, 14), lambda f, y, xx: te.sum(
        x[c, y + ry, xx + rx] * w[f, c, ry, rx], axis=[c, ry, rx]), name="conv")
    out = te.compute((16, 14, 14), lambda f, y, xx: te.max(conv[f, y, xx], 0.0), name="out")
    s = create_schedule(out)
    s.pack(w, 0, 16, readers=[conv])
    f, y, xx = s[out].op.axis
    xo, xi = s[out].split(xx, factor=7)
    s[out].reorder(y, xo, f, xi)
    s[out].parallel(y)
    cf, cy, cx = s[conv].op.axis
    s[conv].reorder(cy, cx, *s[conv].op.reduce_axis, cf)
    s[conv].vectorize(cf)
    s[conv].unroll(cx)
    if ordered:
        s[conv].storage_order(cy, cx, cf)
    s[conv].compute_at(s[out], xo)
    return s, [x, w, out]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_channel_vectorized_conv_tile_computes_the_same(ordered):
    s, args = channel_vectorized_conv(ordered)
    f = build(s, args)
    xv = RNG.standard_normal((16, 16, 16)).astype("float32")
    wv = RNG.standard_normal((16, 16, 3, 3)).astype("float32")
    o = np.full((16, 14, 14), np.nan, "float32")
    f(xv, wv, o)
    ref = np.zeros((16, 14, 14), np.float64)
    for ry in range(3):
        for rx in range(3):
            ref += np.einsum("fc,cyx->fyx", wv[:, :, ry, rx], xv[:, ry:ry + 14, rx:rx + 14])
    np.testing.assert_allclose(o, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


def test_channels_stored_innermost_make_the_tiles_vector_accesses_contiguous():
    """Channels vectorized in a tile stored channel-major index it with a stride of a whole
    plane per lane (gathers and scatters); stored channels innermost, every access of the
    accumulators moves by one element per lane, and only the transposing copy-out into the
    output's channel-major layout is left strided."""
    accesses, strided = {}, {}
    for ordered in (False, True):
        s, args = channel_vectorized_conv(ordered)
        text = str(lower(s, args))
        accesses[ordered] = re.findall(r"conv\[([^\]]*)\] = conv\[", text)
        asm = build(s, args, target=SKYLAKE).get_source("asm")
        strided[ordered] = len(re.findall(r"\bv(?:gather|scatter)\w*", asm))
    unit = re.compile(r"f( \+ \d+)?")                # the lane's channel, plus a constant
    assert accesses[True] and all(unit.fullmatch(ix) for ix in accesses[True]), accesses
    assert accesses[False] and not any(unit.fullmatch(ix) for ix in accesses[False]), accesses
    assert strided[True] * 4 < strided[False], strided


def test_misuse_is_a_schedule_error():
    X, T, Y = transposed_temp(4, 8)
    s = create_schedule(Y)
    i, j = s[T].op.axis
    with pytest.raises(ScheduleError, match="output of the schedule"):
        s[Y].storage_order(*reversed(s[Y].op.axis))
    with pytest.raises(ScheduleError, match="placeholder"):
        s[X].storage_order(j, i)
    with pytest.raises(ScheduleError, match="every data axis once"):
        s[T].storage_order(j)
    with pytest.raises(ScheduleError, match="given twice"):
        s[T].storage_order(j, j)
    with pytest.raises(ScheduleError, match="not a data axis of T"):
        s[T].storage_order(j, s[Y].op.axis[0])
    jo, ji = s[T].split(j, factor=4)
    with pytest.raises(ScheduleError, match="split or fuse"):
        s[T].storage_order(jo, i)
    with pytest.raises(ScheduleError, match="IterVars"):
        s[T].storage_order("j", "i")
    s2 = create_schedule(Y)
    s2[T].storage_order(*reversed(s2[T].op.axis))
    with pytest.raises(ScheduleError, match="kernel argument"):
        lower(s2, [X, T, Y])                     # T passed in: its layout is the caller's
