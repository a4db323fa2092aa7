"""einloop.nn against PyTorch and NumPy: every public operator declared on odd sizes, built
with the default schedule and run, its result compared with the reference; and the wrong calls
(shapes that do not fit, axes out of range, ...) refused with a TEError that says why.

einloop tensors have at least one dimension, so a result PyTorch gives as a 0-d scalar (a full
reduction, a vector dot product, squeezing every dimension) is a tensor of shape (1,) here."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from einloop import build, create_schedule, nn, te
from einloop.errors import TEError

TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-10, atol=1e-12)}
#: sums over many terms (reductions, products, convolutions, normalisations) in float32
LOOSE = {"float32": dict(rtol=1e-4, atol=1e-4), "float64": dict(rtol=1e-10, atol=1e-11)}


def data(shape, dtype="float32", low=-2.0, high=2.0, seed=0):
    rng = np.random.default_rng(seed + 7 * len(shape) + int(np.prod(shape, dtype=np.int64)))
    return rng.uniform(low, high, shape).astype(dtype)


def run(out, *inputs):
    """*out* built with the default schedule over ``(placeholder, array)`` *inputs* and run."""
    f = build(create_schedule(out), [p for p, _ in inputs] + [out])
    res = np.empty(tuple(int(d) for d in out.shape), dtype=out.dtype)
    f(*[a for _, a in inputs], res)
    return res


def ph(shape, dtype="float32", name="x"):
    return te.placeholder(tuple(shape), dtype, name=name)


def tt(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(got, expect, dtype="float32", tol=TOL):
    expect = expect.numpy() if isinstance(expect, torch.Tensor) else np.asarray(expect)
    assert got.shape == expect.shape, (got.shape, expect.shape)
    np.testing.assert_allclose(got, expect, **tol[dtype])


# ---------------------------------------------------------------- elementwise and broadcasting

BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "power": np.power}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_broadcast_a_row_against_a_matrix(op):
    a, b = ph((3, 5), name="a"), ph((1, 5), name="b")
    x, y = data((3, 5), low=0.5), data((1, 5), low=0.5, seed=1)   # positive: power, divide
    close(run(getattr(nn, op)(a, b), (a, x), (b, y)), BINARY[op](x, y))


@pytest.mark.parametrize("sa, sb", [((3, 5), (5,)), ((5,), (3, 5)), ((2, 1, 5), (3, 1)),
                                    ((1,), (3, 4)), ((4, 1, 3, 1), (1, 5, 1, 7)),
                                    ((7,), (7,))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_add_broadcasts_different_ranks_as_numpy_does(sa, sb, dtype):
    a, b = ph(sa, dtype, "a"), ph(sb, dtype, "b")
    x, y = data(sa, dtype), data(sb, dtype, seed=1)
    out = nn.add(a, b)
    assert out.dtype == dtype
    close(run(out, (a, x), (b, y)), x + y, dtype)


@pytest.mark.parametrize("fn, expect", [
    (lambda t: nn.add(t, 2.5), lambda x: x + 2.5),
    (lambda t: nn.subtract(3.0, t), lambda x: 3.0 - x),
    (lambda t: nn.multiply(t, 2), lambda x: x * 2),
    (lambda t: nn.divide(1.0, t), lambda x: 1.0 / x),
    (lambda t: nn.power(t, 3), lambda x: x ** 3),
    (lambda t: nn.maximum(0.75, t), lambda x: np.maximum(0.75, x)),
], ids=["add", "rsub", "mul", "rdiv", "pow", "rmax"])
def test_binary_ops_take_a_python_number_on_either_side(fn, expect):
    a = ph((3, 7), name="a")
    x = data((3, 7), low=0.5)
    close(run(fn(a), (a, x)), expect(x).astype(np.float32))


def test_binary_of_two_dtypes_computes_in_the_first_tensors():
    a, b = ph((3, 5), "float64", "a"), ph((5,), "float32", "b")
    x, y = data((3, 5), "float64"), data((5,), "float32", seed=1)
    out = nn.multiply(a, b)
    assert out.dtype == "float64"
    close(run(out, (a, x), (b, y)), x * y.astype(np.float64), "float64")


def test_binary_and_unary_take_any_function():
    a, b = ph((3, 5), name="a"), ph((3, 1), name="b")
    x, y = data((3, 5)), data((3, 1), seed=1)
    close(run(nn.binary(a, b, lambda u, v: u * v + u, "fma"), (a, x), (b, y)), x * y + x)
    close(run(nn.unary(a, lambda u: u * u - 1.0, "sq"), (a, x)), x * x - 1)


def test_broadcast_shape_and_broadcast_to():
    assert nn.broadcast_shape((3, 1, 5), (4, 1), ()) == (3, 4, 5)
    assert nn.broadcast_shape((1,), (1, 1)) == (1, 1)
    a = ph((3, 1), name="a")
    x = data((3, 1))
    close(run(nn.broadcast_to(a, (2, 3, 5)), (a, x)), np.broadcast_to(x, (2, 3, 5)))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_full(dtype):
    out = nn.full((3, 5), 7, dtype)
    assert out.dtype == dtype
    f = build(create_schedule(out), [out])
    res = np.empty((3, 5), dtype)
    f(res)
    np.testing.assert_array_equal(res, np.full((3, 5), 7, dtype))


def test_where_with_a_bool_condition_broadcasts_all_three_operands():
    c, a, b = ph((3, 1), "bool", "c"), ph((1, 5), name="a"), ph((5,), name="b")
    cv = np.array([[True], [False], [True]])
    x, y = data((1, 5)), data((5,), seed=1)
    close(run(nn.where(c, a, b), (c, cv), (a, x), (b, y)), np.where(cv, x, y))


def test_where_with_a_numeric_condition_and_numbers():
    c, a = ph((3, 5), name="c"), ph((3, 5), "float64", "a")
    cv = np.round(data((3, 5)))                      # some exact zeros
    assert (cv == 0).any() and (cv != 0).any()
    x = data((3, 5), "float64", seed=1)
    close(run(nn.where(c, a, -1.0), (c, cv), (a, x)), np.where(cv != 0, x, -1.0), "float64")
    close(run(nn.where(c, 1.0, 0.0), (c, cv)), (cv != 0).astype(np.float32))


@pytest.mark.parametrize("src, dst", [("float32", "int32"), ("float32", "float64"),
                                      ("int32", "float32"), ("float64", "int64")])
def test_cast_truncates_toward_zero_as_numpy(src, dst):
    a = ph((4, 5), src, "a")
    x = (data((4, 5), "float64") * 10).astype(src)
    out = nn.cast(a, dst)
    assert out.dtype == dst
    got = run(out, (a, x))
    np.testing.assert_array_equal(got, x.astype(dst))


# ----------------------------------------------------------------------------- activations

ACTIVATIONS = {
    "relu": (nn.relu, F.relu, None),
    "gelu": (nn.gelu, F.gelu, None),
    "gelu_tanh": (lambda t: nn.gelu(t, approximate="tanh"),
                  lambda t: F.gelu(t, approximate="tanh"), None),
    "silu": (nn.silu, F.silu, None),
    "sigmoid": (nn.sigmoid, torch.sigmoid, None),
    "tanh": (nn.tanh, torch.tanh, None),
    "exp": (nn.exp, torch.exp, None),
    "log": (nn.log, torch.log, (0.05, 4.0)),
    "sqrt": (nn.sqrt, torch.sqrt, (0.05, 4.0)),
    "rsqrt": (nn.rsqrt, torch.rsqrt, (0.05, 4.0)),
    "erf": (nn.erf, torch.erf, None),
    "neg": (nn.neg, torch.neg, None),
    "abs": (nn.abs, torch.abs, None),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_torch(name, dtype):
    ours, ref, span = ACTIVATIONS[name]
    low, high = span or (-4.0, 4.0)
    a = ph((5, 7), dtype, "a")
    x = data((5, 7), dtype, low, high)
    out = ours(a)
    assert out.dtype == dtype
    close(run(out, (a, x)), ref(tt(x)), dtype)


# ---------------------------------------------------------------------------------- layout

@pytest.mark.parametrize("src, dst", [
    ((3, 10), (30,)),                   # merge
    ((30,), (2, 5, 3)),                 # split
    ((2, 3, 5), (6, 5)),                # merge a leading run, keep the last
    ((2, 3, 5), (2, 15)),
    ((6, 5), (3, 2, 5)),
    ((2, 15), (6, 5)),                  # runs that cross: 2*15 = 6*5
    ((4, 6), (3, 8)),
    ((3, 1, 5), (15, 1)),               # size-1 dimensions
    ((1, 7, 1), (7,)),
    ((7,), (1, 7, 1, 1)),
    ((3, 10), (-1, 6)),                 # -1 inferred
    ((2, 3, 5), (5, -1, 1)),
])
def test_reshape_matches_numpy(src, dst):
    a = ph(src, name="a")
    x = data(src)
    close(run(nn.reshape(a, dst), (a, x)), x.reshape(dst))


@pytest.mark.parametrize("start, end", [(0, -1), (1, 2), (-2, -1), (2, 2)])
def test_flatten_matches_torch(start, end):
    a = ph((2, 3, 5, 3), name="a")
    x = data((2, 3, 5, 3))
    close(run(nn.flatten(a, start, end), (a, x)), torch.flatten(tt(x), start, end))


@pytest.mark.parametrize("axes", [(2, 0, 1), (1, 2, 0), (-1, -3, -2), (0, 1, 2)])
def test_permute_matches_torch(axes):
    a = ph((2, 3, 5), name="a")
    x = data((2, 3, 5))
    close(run(nn.permute(a, axes), (a, x)), tt(x).permute(*axes))


@pytest.mark.parametrize("dims", [(), (0, 2), (-1, 1), (0, -4)])
def test_transpose_matches_torch(dims):
    a = ph((2, 3, 5, 7), name="a")
    x = data((2, 3, 5, 7))
    expect = tt(x).transpose(-2, -1) if not dims else tt(x).transpose(*dims)
    close(run(nn.transpose(a, *dims), (a, x)), expect)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_unsqueeze_matches_torch(axis):
    a = ph((3, 5), name="a")
    x = data((3, 5))
    close(run(nn.unsqueeze(a, axis), (a, x)), tt(x).unsqueeze(axis))


@pytest.mark.parametrize("axes, expect", [
    (None, (3, 5)), (0, (3, 1, 5, 1)), (-1, (1, 3, 1, 5)), ([0, 2], (3, 5, 1)),
    (1, (1, 3, 1, 5, 1)),               # a dimension that is not 1 stays, as in PyTorch
])
def test_squeeze_matches_torch(axes, expect):
    a = ph((1, 3, 1, 5, 1), name="a")
    x = data((1, 3, 1, 5, 1))
    ref = tt(x).squeeze() if axes is None else tt(x).squeeze(axes if isinstance(axes, int)
                                                            else tuple(axes))
    assert tuple(ref.shape) == expect
    close(run(nn.squeeze(a, axes), (a, x)), ref)


def test_squeezing_every_dimension_leaves_one_element_of_shape_1():
    a = ph((1, 1, 1), name="a")
    x = data((1, 1, 1))
    close(run(nn.squeeze(a), (a, x)), x.reshape(1))


@pytest.mark.parametrize("axis, start, end, step", [
    (1, 1, 6, 1), (1, 0, None, 2), (1, 1, None, 2), (-1, -4, -1, 1), (0, -2, None, 1),
    (1, -6, 100, 3), (2, 0, 1, 1), (-2, 2, -1, 2),
])
def test_slice_axis_matches_python_slicing(axis, start, end, step):
    a = ph((3, 7, 5), name="a")
    x = data((3, 7, 5))
    index = [slice(None)] * 3
    index[axis] = slice(start, end, step)
    close(run(nn.slice_axis(a, axis, start, end, step), (a, x)), x[tuple(index)])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate_three_tensors(axis):
    base = [3, 4, 5]
    shapes = []
    for k, n in enumerate((2, 1, 3)):
        s = list(base)
        s[axis] = n
        shapes.append(tuple(s))
    ps = [ph(s, name=f"t{k}") for k, s in enumerate(shapes)]
    xs = [data(s, seed=k) for k, s in enumerate(shapes)]
    close(run(nn.concatenate(ps, axis), *zip(ps, xs)), np.concatenate(xs, axis))


# ------------------------------------------------------------------------------ reductions

REDUCTIONS = {"sum": (nn.sum, lambda t, d, k: torch.sum(t, d, keepdim=k)),
              "mean": (nn.mean, lambda t, d, k: torch.mean(t, d, keepdim=k)),
              "amax": (nn.amax, lambda t, d, k: torch.amax(t, d, keepdim=k)),
              "amin": (nn.amin, lambda t, d, k: torch.amin(t, d, keepdim=k)),
              "var": (nn.var, lambda t, d, k: torch.var(t, d, keepdim=k))}


@pytest.mark.parametrize("axes, keepdims", [(1, False), (-1, True), ((0, 2), False),
                                            ((-3, -1), True), ((1, 2), False)])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_matches_torch(name, axes, keepdims):
    ours, ref = REDUCTIONS[name]
    a = ph((3, 5, 7), name="a")
    x = data((3, 5, 7))
    dims = list(axes) if isinstance(axes, tuple) else axes
    close(run(ours(a, axes, keepdims=keepdims), (a, x)), ref(tt(x), dims, keepdims), tol=LOOSE)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_over_every_axis(name):
    ours, ref = REDUCTIONS[name]
    a = ph((3, 5, 7), "float64", "a")
    x = data((3, 5, 7), "float64")
    dims = [0, 1, 2]
    close(run(ours(a, keepdims=True), (a, x)), ref(tt(x), dims, True), "float64", LOOSE)
    close(run(ours(a), (a, x)), ref(tt(x), dims, False).reshape(1), "float64", LOOSE)


@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_correction(correction):
    a = ph((4, 9), name="a")
    x = data((4, 9))
    close(run(nn.var(a, 1, correction=correction), (a, x)),
          torch.var(tt(x), 1, correction=correction), tol=LOOSE)


# ---------------------------------------------------------------------------- linear algebra

@pytest.mark.parametrize("sa, sb", [
    ((3, 5), (5, 7)),
    ((2, 3, 5), (5, 7)),                # batch against a matrix
    ((3, 5), (2, 5, 7)),
    ((2, 1, 3, 5), (3, 5, 7)),          # batches broadcast
    ((5,), (5, 7)),                     # 1-D operands become a row, a column
    ((3, 5), (5,)),
    ((5,), (2, 5, 3)),
    ((2, 3, 5), (5,)),
    ((5,), (5,)),                       # a dot product: (1,) here, 0-d in PyTorch
])
def test_matmul_matches_torch(sa, sb):
    a, b = ph(sa, name="a"), ph(sb, name="b")
    x, y = data(sa), data(sb, seed=1)
    expect = torch.matmul(tt(x), tt(y))
    if expect.dim() == 0:
        expect = expect.reshape(1)
    close(run(nn.matmul(a, b), (a, x), (b, y)), expect, tol=LOOSE)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_matmul(dtype):
    a, b = ph((3, 5, 7), dtype, "a"), ph((3, 7, 4), dtype, "b")
    x, y = data((3, 5, 7), dtype), data((3, 7, 4), dtype, seed=1)
    close(run(nn.batch_matmul(a, b), (a, x), (b, y)), torch.bmm(tt(x), tt(y)), dtype, LOOSE)


@pytest.mark.parametrize("sx, bias", [((3, 7), None), ((3, 7), (5,)), ((2, 3, 7), (5,)),
                                      ((7,), (5,)), ((3, 7), (1,))])
def test_dense_matches_linear(sx, bias):
    a, w = ph(sx, name="a"), ph((5, 7), name="w")
    x, wv = data(sx), data((5, 7), seed=1)
    inputs = [(a, x), (w, wv)]
    b = bv = None
    if bias is not None:
        b, bv = ph(bias, name="b"), data(bias, seed=2)
        inputs.append((b, bv))
    expect = F.linear(tt(x), tt(wv), None if bias is None else tt(bv))
    close(run(nn.dense(a, w, b), *inputs), expect, tol=LOOSE)


# ---------------------------------------------------------------------------- convolutions

@pytest.mark.parametrize("cin, cout, k, stride, padding, dilation, groups, bias", [
    (3, 4, 3, 1, 0, 1, 1, False),
    (3, 4, 3, 2, 1, 1, 1, True),
    (4, 6, 3, 1, 2, 2, 2, True),
    (3, 6, 5, 3, 2, 1, 3, False),       # depthwise, two filters per channel
])
def test_conv1d_matches_torch(cin, cout, k, stride, padding, dilation, groups, bias):
    a, w = ph((2, cin, 11), name="a"), ph((cout, cin // groups, k), name="w")
    x, wv = data((2, cin, 11)), data((cout, cin // groups, k), seed=1)
    inputs = [(a, x), (w, wv)]
    b = bv = None
    if bias:
        b, bv = ph((cout,), name="b"), data((cout,), seed=2)
        inputs.append((b, bv))
    out = nn.conv1d(a, w, stride, padding, dilation, groups, b)
    expect = F.conv1d(tt(x), tt(wv), None if bv is None else tt(bv), stride, padding, dilation,
                      groups)
    close(run(out, *inputs), expect, tol=LOOSE)


@pytest.mark.parametrize("cin, cout, k, stride, padding, dilation, groups, bias, dtype", [
    (3, 5, (3, 3), 1, 0, 1, 1, False, "float32"),
    (3, 5, (3, 2), (2, 1), (1, 0), 1, 1, True, "float32"),
    (4, 6, (3, 3), 2, 2, (2, 1), 2, True, "float32"),
    (3, 3, (3, 3), 1, 1, 1, 3, True, "float32"),       # depthwise
    (2, 4, (1, 1), 1, 0, 1, 1, False, "float32"),      # pointwise
    (3, 4, (3, 3), 2, 1, 2, 1, True, "float64"),
])
def test_conv2d_matches_torch(cin, cout, k, stride, padding, dilation, groups, bias, dtype):
    sx, sw = (2, cin, 9, 7), (cout, cin // groups) + k
    a, w = ph(sx, dtype, "a"), ph(sw, dtype, "w")
    x, wv = data(sx, dtype), data(sw, dtype, seed=1)
    inputs = [(a, x), (w, wv)]
    b = bv = None
    if bias:
        b, bv = ph((cout,), dtype, "b"), data((cout,), dtype, seed=2)
        inputs.append((b, bv))
    out = nn.conv2d(a, w, stride, padding, dilation, groups, b)
    expect = F.conv2d(tt(x), tt(wv), None if bv is None else tt(bv), stride, padding, dilation,
                      groups)
    close(run(out, *inputs), expect, dtype, LOOSE)


def test_conv_of_three_spatial_dimensions():
    a, w = ph((1, 2, 5, 4, 6), name="a"), ph((3, 2, 3, 2, 3), name="w")
    x, wv = data((1, 2, 5, 4, 6)), data((3, 2, 3, 2, 3), seed=1)
    out = nn.conv(a, w, stride=(1, 2, 2), padding=1)
    close(run(out, (a, x), (w, wv)), F.conv3d(tt(x), tt(wv), None, (1, 2, 2), 1), tol=LOOSE)


# --------------------------------------------------------------------------------- pooling

@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode", [
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((3, 2), (2, 1), (1, 1), (2, 1), False),
    (2, 2, 0, 1, True),                 # a last window that hangs over the edge
    (3, 3, 1, 2, True),
])
def test_max_pool2d_matches_torch(kernel, stride, padding, dilation, ceil_mode):
    a = ph((2, 3, 9, 8), name="a")
    x = data((2, 3, 9, 8))
    out = nn.max_pool2d(a, kernel, stride, padding, dilation, ceil_mode)
    expect = F.max_pool2d(tt(x), kernel, stride, padding, dilation, ceil_mode)
    close(run(out, (a, x)), expect)


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode, include_pad, divisor", [
    (2, None, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, False, False, None),
    (3, 2, 1, True, True, None),
    (3, 2, 1, True, False, None),
    ((3, 2), (2, 3), (1, 1), True, True, None),
    (2, 2, 0, True, False, None),
    (3, 2, 1, False, True, 4),
    (3, 2, 1, True, False, 5),
])
def test_avg_pool2d_matches_torch(kernel, stride, padding, ceil_mode, include_pad, divisor):
    a = ph((2, 3, 9, 8), name="a")
    x = data((2, 3, 9, 8))
    out = nn.avg_pool2d(a, kernel, stride, padding, ceil_mode, include_pad, divisor)
    expect = F.avg_pool2d(tt(x), kernel, stride, padding, ceil_mode, include_pad, divisor)
    close(run(out, (a, x)), expect)


def test_pooling_in_float64():
    a = ph((1, 2, 7, 6), "float64", "a")
    x = data((1, 2, 7, 6), "float64")
    close(run(nn.max_pool2d(a, 3, 2, 1, ceil_mode=True), (a, x)),
          F.max_pool2d(tt(x), 3, 2, 1, ceil_mode=True), "float64")
    close(run(nn.avg_pool2d(a, 3, 2, 1, count_include_pad=False), (a, x)),
          F.avg_pool2d(tt(x), 3, 2, 1, count_include_pad=False), "float64")
    close(run(nn.adaptive_avg_pool2d(a, (3, 4)), (a, x)), F.adaptive_avg_pool2d(tt(x), (3, 4)),
          "float64")


@pytest.mark.parametrize("size", [(3, 4), (4, 3), 5, (1, 1), (9, 7), (2, 5)])
def test_adaptive_avg_pool2d_matches_torch(size):
    a = ph((2, 3, 9, 7), name="a")
    x = data((2, 3, 9, 7))
    close(run(nn.adaptive_avg_pool2d(a, size), (a, x)), F.adaptive_avg_pool2d(tt(x), size))


# --------------------------------------------------------------------------- normalisation

@pytest.mark.parametrize("axis", [1, -2, 0, -1])
@pytest.mark.parametrize("fn, ref", [(nn.softmax, F.softmax), (nn.log_softmax, F.log_softmax)],
                         ids=["softmax", "log_softmax"])
def test_softmax_over_any_axis(fn, ref, axis):
    a = ph((3, 7, 5), name="a")
    x = data((3, 7, 5), low=-6, high=6)
    close(run(fn(a, axis), (a, x)), ref(tt(x), axis), tol=LOOSE)


@pytest.mark.parametrize("n_axes, affine, dtype", [(1, False, "float32"), (1, True, "float32"),
                                                   (2, True, "float32"), (2, False, "float64"),
                                                   (3, True, "float64")])
def test_layer_norm_matches_torch(n_axes, affine, dtype):
    shape = (3, 4, 7)
    trail = shape[-n_axes:]
    a = ph(shape, dtype, "a")
    x = data(shape, dtype, -3, 5)
    inputs = [(a, x)]
    w = b = wv = bv = None
    if affine:
        w, b = ph(trail, dtype, "w"), ph(trail, dtype, "b")
        wv, bv = data(trail, dtype, seed=1), data(trail, dtype, seed=2)
        inputs += [(w, wv), (b, bv)]
    out = nn.layer_norm(a, n_axes, w, b, eps=1e-5)
    expect = F.layer_norm(tt(x), trail, None if wv is None else tt(wv),
                          None if bv is None else tt(bv), 1e-5)
    close(run(out, *inputs), expect, dtype, LOOSE)


@pytest.mark.parametrize("affine, dtype", [(False, "float32"), (True, "float32"),
                                           (True, "float64")])
def test_batch_norm_matches_torch_in_inference(affine, dtype):
    shape = (2, 3, 4, 5)
    a, m, v = ph(shape, dtype, "a"), ph((3,), dtype, "m"), ph((3,), dtype, "v")
    x, mv, vv = data(shape, dtype, -3, 5), data((3,), dtype, seed=1), data((3,), dtype, 0.1, 2)
    inputs = [(a, x), (m, mv), (v, vv)]
    w = b = wv = bv = None
    if affine:
        w, b = ph((3,), dtype, "w"), ph((3,), dtype, "b")
        wv, bv = data((3,), dtype, seed=2), data((3,), dtype, seed=3)
        inputs += [(w, wv), (b, bv)]
    out = nn.batch_norm(a, m, v, w, b, eps=1e-3)
    expect = F.batch_norm(tt(x), tt(mv), tt(vv), None if wv is None else tt(wv),
                          None if bv is None else tt(bv), training=False, eps=1e-3)
    close(run(out, *inputs), expect, dtype)


@pytest.mark.parametrize("n_axes, weight", [(1, False), (1, True), (2, True)])
def test_rms_norm_matches_torch(n_axes, weight):
    shape = (3, 4, 7)
    trail = shape[-n_axes:]
    a = ph(shape, name="a")
    x = data(shape)
    inputs = [(a, x)]
    w = wv = None
    if weight:
        w, wv = ph(trail, name="w"), data(trail, seed=1)
        inputs.append((w, wv))
    expect = F.rms_norm(tt(x), trail, None if wv is None else tt(wv), 1e-6)
    close(run(nn.rms_norm(a, n_axes, w, 1e-6), *inputs), expect, tol=LOOSE)


# ------------------------------------------------------------------------------- embedding

@pytest.mark.parametrize("index_dtype, shape", [("int64", (3, 5)), ("int32", (7,)),
                                                ("int32", (2, 3, 2))])
def test_embedding_gathers_rows(index_dtype, shape):
    t, i = ph((11, 6), name="table"), ph(shape, index_dtype, "idx")
    tv = data((11, 6))
    iv = np.random.default_rng(3).integers(0, 11, shape).astype(index_dtype)
    expect = F.embedding(tt(iv).long(), tt(tv))
    close(run(nn.embedding(t, i), (t, tv), (i, iv)), expect)


def test_embedding_clamps_an_index_outside_the_table():
    t, i = ph((5, 3), name="table"), ph((4,), "int64", "idx")
    tv = data((5, 3))
    iv = np.array([-3, 0, 4, 9], np.int64)
    close(run(nn.embedding(t, i), (t, tv), (i, iv)), tv[np.clip(iv, 0, 4)])


# --------------------------------------------------------------------- operators composed

def test_a_small_block_composed_of_operators():
    """dense -> gelu -> layer norm -> residual add: stages that read through one another."""
    a, w = ph((3, 8), name="a"), ph((8, 8), name="w")
    g, b = ph((8,), name="g"), ph((8,), name="b")
    x, wv, gv, bv = data((3, 8)), data((8, 8), seed=1), data((8,), seed=2), data((8,), seed=3)
    out = nn.add(nn.layer_norm(nn.gelu(nn.dense(a, w)), 1, g, b), a)
    t = F.gelu(F.linear(tt(x), tt(wv)))
    expect = F.layer_norm(t, (8,), tt(gv), tt(bv)) + tt(x)
    close(run(out, (a, x), (w, wv), (g, gv), (b, bv)), expect, tol=LOOSE)


# ------------------------------------------------------------------------------ bad input

def _p(shape, dtype="float32", name="x"):
    return ph(shape, dtype, name)


BAD = [
    ("add", lambda: nn.add(_p((3, 5)), _p((4,), name="y")), r"do not broadcast"),
    ("multiply", lambda: nn.multiply(_p((2, 3, 5)), _p((3, 4, 5), name="y")),
     r"do not broadcast"),
    ("where", lambda: nn.where(_p((3,), "bool", "c"), _p((4,)), 0.0), r"do not broadcast"),
    ("binary of numbers", lambda: nn.add(1.0, 2.0), r"at least one te tensor"),
    ("broadcast_to", lambda: nn.broadcast_to(_p((3, 2)), (3, 4)), r"do not broadcast"),
    ("reshape size", lambda: nn.reshape(_p((3, 5)), (4, 4)), r"cannot be viewed as"),
    ("reshape -1", lambda: nn.reshape(_p((3, 5)), (-1, 4)), r"cannot infer the -1"),
    ("reshape two -1", lambda: nn.reshape(_p((3, 5)), (-1, -1)), r"at most one"),
    ("reshape negative", lambda: nn.reshape(_p((2, 3)), (-2, -3)), r"reshape: .* entry -2"),
    ("reshape zero", lambda: nn.reshape(_p((2, 3)), (0, -1)), r"reshape: .* entry 0"),
    ("flatten axis", lambda: nn.flatten(_p((3, 5)), 0, 2), r"axis 2 is out of range"),
    ("flatten order", lambda: nn.flatten(_p((3, 5, 2)), 2, 1), r"start 2 comes after end 1"),
    ("permute axis", lambda: nn.permute(_p((2, 3, 5)), (0, 1, 3)), r"out of range"),
    ("permute repeat", lambda: nn.permute(_p((2, 3, 5)), (0, 1, 1)), r"not a permutation"),
    ("permute short", lambda: nn.permute(_p((2, 3, 5)), (1, 0)), r"not a permutation"),
    ("transpose axis", lambda: nn.transpose(_p((3, 5)), 0, -3), r"out of range"),
    ("unsqueeze axis", lambda: nn.unsqueeze(_p((3, 5)), 4), r"out of range"),
    ("squeeze axis", lambda: nn.squeeze(_p((1, 5)), 2), r"out of range"),
    ("slice axis", lambda: nn.slice_axis(_p((3, 5)), 2, 0, 1), r"out of range"),
    ("slice step", lambda: nn.slice_axis(_p((3, 5)), 1, 0, 4, 0), r"step must be positive"),
    ("slice empty", lambda: nn.slice_axis(_p((3, 5)), 1, 4, 2), r"is empty"),
    ("concatenate shapes", lambda: nn.concatenate([_p((3, 5)), _p((4, 4), name="y")], 0),
     r"differ outside axis 0"),
    ("concatenate ranks", lambda: nn.concatenate([_p((3, 5)), _p((3, 5, 1), name="y")], 1),
     r"differ outside axis 1"),
    ("concatenate nothing", lambda: nn.concatenate([], 0), r"nothing to concatenate"),
    ("sum axis", lambda: nn.sum(_p((3, 5)), 2), r"axis 2 is out of range"),
    ("mean axis", lambda: nn.mean(_p((3, 5)), (0, -3)), r"out of range"),
    ("amax repeat", lambda: nn.amax(_p((3, 5)), (1, -1)), r"listed twice"),
    ("var axis", lambda: nn.var(_p((3, 5)), 5), r"out of range"),
    ("matmul inner", lambda: nn.matmul(_p((3, 5)), _p((4, 7), name="y")),
     r"inner dimensions differ"),
    ("matmul vectors", lambda: nn.matmul(_p((5,)), _p((4,), name="y")),
     r"inner dimensions differ"),
    ("matmul batch", lambda: nn.matmul(_p((2, 3, 5)), _p((3, 5, 7), name="y")),
     r"do not broadcast"),
    ("batch_matmul rank", lambda: nn.batch_matmul(_p((3, 5)), _p((5, 7), name="y")),
     r"3-D operands"),
    ("dense inner", lambda: nn.dense(_p((3, 5)), _p((4, 6), name="w")), r"does not fit"),
    ("dense bias", lambda: nn.dense(_p((3, 5)), _p((4, 5), name="w"), _p((3,), name="b")),
     r"bias \(3,\) does not fit 4"),
    ("conv groups", lambda: nn.conv2d(_p((1, 6, 5, 5)), _p((4, 3, 3, 3), name="w"), groups=4),
     r"4 groups do not fit"),
    ("conv group channels", lambda: nn.conv2d(_p((1, 6, 5, 5)), _p((4, 2, 3, 3), name="w"),
                                              groups=2), r"2 groups do not fit"),
    ("conv rank", lambda: nn.conv2d(_p((1, 3, 5, 5)), _p((4, 3, 3), name="w")),
     r"same rank"),
    ("conv kernel", lambda: nn.conv2d(_p((1, 3, 4, 4)), _p((4, 3, 5, 5), name="w")),
     r"larger than the padded input"),
    ("conv stride", lambda: nn.conv2d(_p((1, 3, 5, 5)), _p((4, 3, 3, 3), name="w"),
                                      stride=(1, 1, 1)), r"stride .* does not fit"),
    ("conv bias", lambda: nn.conv1d(_p((1, 3, 5)), _p((4, 3, 3), name="w"),
                                    bias=_p((3,), name="b")), r"bias \(3,\) does not fit"),
    ("pool rank", lambda: nn.max_pool2d(_p((3, 5, 5)), 2), r"NCHW"),
    ("pool padding", lambda: nn.avg_pool2d(_p((1, 1, 5, 5)), 2, padding=2), r"at most half"),
    ("pool window", lambda: nn.max_pool2d(_p((1, 1, 2, 2)), 3), r"does not fit"),
    ("adaptive rank", lambda: nn.adaptive_avg_pool2d(_p((5, 5)), 2), r"NCHW"),
    ("softmax axis", lambda: nn.softmax(_p((3, 5)), 2), r"out of range"),
    ("log_softmax axis", lambda: nn.log_softmax(_p((3, 5)), -3), r"out of range"),
    ("layer_norm axes", lambda: nn.layer_norm(_p((3, 5)), 3), r"n_axes"),
    ("layer_norm no axes", lambda: nn.layer_norm(_p((3, 5)), 0), r"n_axes"),
    ("layer_norm weight", lambda: nn.layer_norm(_p((3, 5)), 1, _p((7,), name="w")),
     r"weight \(7,\) does not fit"),
    ("layer_norm bias", lambda: nn.layer_norm(_p((3, 5)), 1, None, _p((3,), name="b")),
     r"bias \(3,\) does not fit"),
    ("batch_norm mean", lambda: nn.batch_norm(_p((2, 3, 4)), _p((4,), name="m"),
                                              _p((3,), name="v")),
     r"mean \(4,\) does not fit.*axis 1, shape \(3,\)"),
    ("batch_norm axis", lambda: nn.batch_norm(_p((2, 3)), _p((3,)), _p((3,)), axis=2),
     r"out of range"),
    ("rms_norm weight", lambda: nn.rms_norm(_p((3, 5)), 2, _p((5,), name="w")),
     r"weight \(5,\) does not fit"),
    ("gelu approximate", lambda: nn.gelu(_p((3,)), approximate="fast"), r"approximate"),
    ("embedding table", lambda: nn.embedding(_p((3, 4, 5)), _p((2,), "int64", "i")), r"2-D"),
    ("embedding indices", lambda: nn.embedding(_p((3, 4)), _p((2,), name="i")),
     r"indices must be integers"),
]


@pytest.mark.parametrize("call, match", [(c, m) for _, c, m in BAD], ids=[n for n, _, _ in BAD])
def test_a_wrong_call_raises_a_te_error_that_says_why(call, match):
    with pytest.raises(TEError, match=match):
        call()
