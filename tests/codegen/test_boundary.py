"""Hostile calls at the kernel boundary: each is an ArgumentError that says which argument, what
was expected and what was given, and never a crash; NaN and inf inputs simply compute."""
import ctypes
import mmap

import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.errors import ArgumentError


@pytest.fixture(scope="module")
def axpy():
    """Y[i, j] = 2 * X[i, j] + B[i, j] on float32[8, 16]."""
    X = te.placeholder((8, 16), name="X")
    B = te.placeholder((8, 16), name="B")
    Y = te.compute((8, 16), lambda i, j: X[i, j] * 2.0 + B[i, j], name="Y")
    return build(create_schedule(Y), [X, B, Y])


def ones():
    return np.ones((8, 16), np.float32)


def raises(kernel, *arrays, match):
    with pytest.raises(ArgumentError, match=match):
        kernel(*arrays)


def test_wrong_dtype(axpy):
    raises(axpy, ones().astype(np.float64), ones(), ones(),
           match=r"kernel Y: argument 0 \(X\): expected dtype float32, got float64 \(convert "
                 r"with \.astype\(np\.float32\)\)")


def test_object_dtype(axpy):
    raises(axpy, ones(), ones().astype(object), ones(),
           match=r"argument 1 \(B\): expected dtype float32, got object")


def test_byte_swapped_dtype(axpy):
    swapped = ones().astype(np.dtype(np.float32).newbyteorder("S"))
    raises(axpy, swapped, ones(), ones(),
           match=r"argument 0 \(X\): expected dtype float32, got float32 in non-native byte "
                 r"order \('[<>]f4'\)")


def test_strided_view(axpy):
    raises(axpy, ones(), np.ones((8, 32), np.float32)[:, ::2], ones(),
           match=r"argument 1 \(B\): the array is not C-contiguous .*np\.ascontiguousarray")


def test_fortran_order(axpy):
    raises(axpy, np.asfortranarray(ones()), ones(), ones(),
           match=r"argument 0 \(X\): the array is not C-contiguous .*Fortran order")


def test_misaligned_data(axpy):
    raw = np.zeros(8 * 16 * 4 + 1, np.uint8)[1:]
    misaligned = raw.view(np.float32).reshape(8, 16)
    raises(axpy, misaligned, ones(), ones(),
           match=r"argument 0 \(X\): the array's data is not aligned to its 4-byte elements")


def test_output_is_an_input(axpy):
    x = ones()
    raises(axpy, x, ones(), x,
           match=r"argument 2 \(Y\): the kernel writes this array but it shares memory with "
                 r"argument 0 \(X\); pass a separate output array")


def test_output_overlaps_an_input_partly(axpy):
    base = np.ones(8 * 16 + 16, np.float32)
    raises(axpy, ones(), base[:128].reshape(8, 16), base[16:].reshape(8, 16),
           match=r"argument 2 \(Y\): .*shares memory with argument 1 \(B\)")


def test_output_overlaps_another_output():
    X = te.placeholder((16,), name="X")
    P = te.compute((16,), lambda i: X[i] + 1.0, name="P")
    Q = te.compute((16,), lambda i: X[i] * 2.0, name="Q")
    f = build(create_schedule([P, Q]), [X, P, Q])
    out = np.empty(16, np.float32)
    with pytest.raises(ArgumentError, match=r"argument [12] \([PQ]\): the kernel writes this "
                                            r"array but it shares memory with argument [12]"):
        f(np.ones(16, np.float32), out, out)


def test_inputs_may_share_memory(axpy):
    x, y = np.arange(128, dtype=np.float32).reshape(8, 16), np.empty((8, 16), np.float32)
    axpy(x, x, y)
    np.testing.assert_array_equal(y, 3 * x)


def test_read_only_output(axpy):
    y = ones()
    y.flags.writeable = False
    raises(axpy, ones(), ones(), y,
           match=r"argument 2 \(Y\): the kernel writes this array but it is read-only")


def test_read_only_inputs_are_fine(axpy):
    x = ones()
    x.flags.writeable = False
    y = np.empty((8, 16), np.float32)
    axpy(x, x, y)
    assert (y == 3).all()


def test_zero_size_array(axpy):
    raises(axpy, np.ones((0, 16), np.float32), ones(), ones(),
           match=r"argument 0 \(X\): expected shape \(8, 16\), got \(0, 16\)")


def test_zero_dimensional_array(axpy):
    raises(axpy, ones(), np.array(1.0, np.float32), ones(),
           match=r"argument 1 \(B\): expected shape \(8, 16\), got \(\)")


@pytest.mark.parametrize("value,kind", [(1.0, "float"), (np.float32(1), "float32"),
                                        ([[1.0] * 16] * 8, "list"), (None, "NoneType"),
                                        (object(), "object"), ("x", "str")])
def test_not_an_array(axpy, value, kind):
    raises(axpy, ones(), value, ones(),
           match=rf"argument 1 \(B\): expected a numpy.ndarray of float32\[8, 16\], got {kind}$")


@pytest.mark.parametrize("count", [0, 2, 4])
def test_wrong_argument_count(axpy, count):
    raises(axpy, *[ones() for _ in range(count)],
           match=rf"kernel Y takes 3 arrays \(X: float32\[8, 16\], B: float32\[8, 16\], "
                 rf"Y: float32\[8, 16\]\), got {count}$")


def test_nan_and_inf_inputs_just_compute():
    X = te.placeholder((6, 5), name="X")
    k = te.reduce_axis((0, 5), name="k")
    M = te.compute((6,), lambda i: te.max(X[i, k], axis=k), name="M")
    E = te.compute((6, 5), lambda i, j: te.exp(X[i, j] - M[i]) + te.sqrt(X[i, j]), name="E")
    C = te.compute((6, 5), lambda i, j: (X[i, j] > 0.0).astype("float32"), name="C")
    f = build(create_schedule([E, C]), [X, E, C])
    nan, inf = np.nan, np.inf
    x = np.array([[1, 2, 3, 4, 5], [nan, 1, 2, 3, 4], [inf, 1, 2, 3, 4], [-inf, 1, 2, 3, 4],
                  [inf, -inf, nan, 0, -0.0], [nan] * 5], np.float32)
    e, c = np.empty((6, 5), np.float32), np.empty((6, 5), np.float32)
    with np.errstate(all="ignore"):
        f(x, e, c)
        want = np.exp(x - x.max(axis=1, keepdims=True)) + np.sqrt(x)
    np.testing.assert_allclose(e, want, rtol=1e-5, equal_nan=True)
    np.testing.assert_array_equal(c, (x > 0).astype(np.float32))


def fake_array(shape, dtype=np.float32):
    """A C-contiguous array header of *shape* over 16 real elements (never read past them)."""
    small = np.ones(16, dtype)
    ctype = np.ctypeslib.as_ctypes_type(np.dtype(dtype))
    fake = np.ctypeslib.as_array(ctypes.cast(small.ctypes.data, ctypes.POINTER(ctype)), shape)
    return fake, small


def test_a_huge_array_of_the_wrong_shape_is_refused(axpy):
    fake, _keep = fake_array((2 ** 20, 2 ** 20))              # 2**40 elements
    raises(axpy, ones(), fake, ones(),
           match=r"argument 1 \(B\): expected shape \(8, 16\), got \(1048576, 1048576\)")


def test_a_huge_output_aliasing_an_input_is_refused():
    X = te.placeholder((2 ** 17, 2 ** 15), "uint8", name="X")
    Y = te.compute((2 ** 17, 2 ** 15), lambda i, j: X[i, j] + 1, name="Y")
    f = build(create_schedule(Y), [X, Y])
    fake, _keep = fake_array((2 ** 17, 2 ** 15), np.uint8)     # 2**32 bytes, overlap by range
    with pytest.raises(ArgumentError, match=r"argument 1 \(Y\): the kernel writes this array "
                                            r"but it shares memory with argument 0 \(X\)"):
        f(fake, fake[:, :])


def test_indices_past_2_to_the_31_are_computed_in_64_bits():
    """Read the far corners of a 2**31 + 2**16 element array (a sparse mapping, a few pages)."""
    rows, cols = 2 ** 16, 2 ** 15 + 1
    try:
        buf = mmap.mmap(-1, rows * cols)
    except (OSError, OverflowError, ValueError):
        pytest.skip("cannot map 2 GiB of address space")
    a = np.frombuffer(buf, np.uint8).reshape(rows, cols)
    corners = [(0, 0), (rows - 1, cols - 1), (rows - 1, 0), (rows // 2, cols - 1)]
    for n, (r, c) in enumerate(corners):
        a[r, c] = 10 + n
    A = te.placeholder((rows, cols), "uint8", name="A")
    Rr = te.placeholder((4,), "int64", name="Rr")
    Cc = te.placeholder((4,), "int64", name="Cc")
    G = te.compute((4,), lambda i: A[Rr[i], Cc[i]], name="G")
    f = build(create_schedule(G), [A, Rr, Cc, G])
    g = np.empty(4, np.uint8)
    f(a, np.array([r for r, _ in corners]), np.array([c for _, c in corners]), g)
    np.testing.assert_array_equal(g, [10, 11, 12, 13])
    del a
    buf.close()
