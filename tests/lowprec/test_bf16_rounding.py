"""bfloat16 conversions bit for bit against ml_dtypes: float32 rounded to nearest even on the way
to memory (ties, subnormals, inf, NaN, the largest values), widened exactly on the way back,
and every other dtype converted to and from bfloat16, scalar and vectorized, in kernels and in
constant folding."""
import ml_dtypes
import numpy as np
import pytest

from einloop import create_schedule, lower, te

from bf16util import BF16, assert_same_bits, hard_float32, numpy_dtype, random_float32, run

N = 1031            # odd: vector tails and non-dividing splits


def _scalar(s, t):
    pass


def _vector8(s, t):
    xo, xi = s[t].split(t.op.axis[0], factor=8)       # 1031 = 128 * 8 + 7: a masked tail
    s[t].vectorize(xi)


def _vector16_parallel(s, t):
    xo, xi = s[t].split(t.op.axis[0], factor=16)
    s[t].parallel(xo)
    s[t].vectorize(xi)


def _unrolled(s, t):
    xo, xi = s[t].split(t.op.axis[0], factor=4)
    s[t].unroll(xi)


SCHEDULES = [_scalar, _vector8, _vector16_parallel, _unrolled]


def _map(src, fn, arrays, schedule):
    """``B[i] = fn(A[i])`` for an input A of dtype *src*, scheduled by *schedule*, run."""
    n = len(arrays[0])
    A = te.placeholder((n,), src, name="A")
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    s = create_schedule(B)
    schedule(s, B)
    return run(s, [A], [B], arrays)[0]


def _float32_cases():
    return np.concatenate([hard_float32(), random_float32(N - len(hard_float32()), seed=1)])


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda f: f.__name__[1:])
def test_float32_rounds_to_nearest_even_on_store(schedule):
    x = _float32_cases()
    got = _map("float32", lambda v: v.astype("bfloat16"), [x], schedule)
    assert_same_bits(got, x.astype(BF16))


def test_the_rounding_cases_are_there():
    """The data really has what the test claims: ties both ways, NaNs that plain rounding would
    turn into inf, subnormals, values that overflow to inf."""
    x = _float32_cases()
    bits = x.view(np.uint32)
    assert ((bits & 0xFFFF) == 0x8000).sum() >= 18
    assert np.isnan(x).sum() >= 8
    assert np.isinf(x.astype(BF16).astype(np.float32)[np.isfinite(x)]).any()
    assert ((bits & 0x7F800000) == 0).sum() >= 20            # zeros and subnormals
    nan_small_payload = np.isnan(x) & ((bits & 0x007F0000) == 0)
    assert nan_small_payload.any()                            # plain bit rounding -> inf


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda f: f.__name__[1:])
def test_widening_is_exact_and_keeps_every_bit(schedule):
    """bfloat16 -> float32 puts the 16 bits on top: NaN payloads and subnormals survive."""
    b = np.arange(2 ** 16, dtype=np.uint16).view(BF16)      # every bfloat16
    got = _map("bfloat16", lambda v: v.astype("float32"), [b], schedule)
    assert_same_bits(got, b.astype(np.float32))


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda f: f.__name__[1:])
def test_a_bfloat16_copy_changes_no_bit(schedule):
    b = np.arange(2 ** 16, dtype=np.uint16).view(BF16)
    got = _map("bfloat16", lambda v: v, [b], schedule)
    assert_same_bits(got, b)


def _double_rounding_float64():
    """float64 values where rounding to float32 first lands on a bfloat16 tie."""
    return np.array([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30),
                     3 * 2.0 ** -130 + 2.0 ** -160, 1e39, -1e39, 2.0 ** -140, np.nan, np.inf,
                     65504.0, 0.1, 1 / 3, -0.0])


def _sources():
    rng = np.random.default_rng(7)
    wide = rng.standard_normal(N) * 10.0 ** rng.integers(-40, 40, N)
    ints = {"int8": (-128, 128), "uint8": (0, 256), "int16": (-2 ** 15, 2 ** 15),
            "int32": (-2 ** 31, 2 ** 31), "int64": (-2 ** 63, 2 ** 63 - 1)}
    out = {"float64": np.concatenate([_double_rounding_float64(), wide]),
           "float16": np.arange(2 ** 16, dtype=np.uint16).view(np.float16),   # every float16
           "bool": rng.random(N) < 0.5}
    for name, (lo, hi) in ints.items():
        a = rng.integers(lo, hi, N, dtype=name)
        if name in ("int32", "int64"):   # float32 rounding lands on a bfloat16 tie
            a[:2] = [2 ** 30 + 2 ** 22 + 2 ** 6, -(2 ** 30 + 2 ** 22 + 2 ** 6)]
        out[name] = a
    return out


SOURCES = _sources()


@pytest.mark.parametrize("schedule", [_scalar, _vector8], ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("src", sorted(SOURCES))
def test_every_dtype_converts_to_bfloat16_as_ml_dtypes_does(src, schedule):
    a = SOURCES[src]
    got = _map(src, lambda v: v.astype("bfloat16"), [a], schedule)
    with np.errstate(all="ignore"):
        assert_same_bits(got, a.astype(BF16))


@pytest.mark.parametrize("schedule", [_scalar, _vector8], ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("dst", ["float64", "float16", "int8", "uint8", "int16", "int32", "int64",
                                 "bool"])
def test_bfloat16_converts_to_every_dtype_as_ml_dtypes_does(dst, schedule):
    """Finite values in the destination's range (outside it the conversion is the machine's, as
    for float32), and for the float types every bfloat16."""
    if dst.startswith("float"):
        b = np.arange(2 ** 16, dtype=np.uint16).view(BF16)
    else:
        info = np.iinfo(dst) if dst != "bool" else None
        # half the range: rounding to bfloat16 must not carry a value past the top
        lo, hi = ((-4.0, 4.0) if info is None
                  else (max(info.min / 2, -2.0 ** 30), min(info.max / 2, 2.0 ** 30)))
        b = np.random.default_rng(3).uniform(lo, hi, N).astype(np.float32).astype(BF16)
        b[:3] = [0.0, -0.5, 0.75]
    got = _map("bfloat16", lambda v: v.astype(dst), [b], schedule)
    with np.errstate(all="ignore"):
        want = b.astype(numpy_dtype(dst))
    if dst == "float16":
        # a NaN stays NaN (its payload is float32 -> float16's, which ml_dtypes drops)
        keep = ~np.isnan(want)
        assert_same_bits(got[keep], want[keep])
        assert np.isnan(got[~keep]).all()
    elif dst == "float64":
        assert_same_bits(got, want)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("src, value", [("float64", 1 + 2.0 ** -8 + 2.0 ** -30),
                                        ("float32", float(np.float32(1 + 2.0 ** -8))),
                                        ("int32", 2 ** 30 + 2 ** 22 + 2 ** 6),
                                        ("float64", 1e39), ("float64", 2.0 ** -140)])
def test_a_folded_cast_equals_the_kernels_cast(src, value):
    """Constant folding computes what the kernel computes (ml_dtypes' conversion): a cast of a
    constant, folded, against the same cast of an input."""
    A = te.placeholder((2,), src, name="A")
    c = te.const(value, src).astype("bfloat16")
    B = te.compute((2,), lambda i: te.if_then_else(i == 0, c, A[i].astype("bfloat16")), name="B")
    a = np.full(2, value, dtype=src)
    (got,) = run(create_schedule(B), [A], [B], [a])
    assert got.view(np.uint16)[0] == got.view(np.uint16)[1] == a.astype(BF16).view(np.uint16)[0]


def test_constants_are_rounded_when_declared_and_print_as_bfloat16():
    c = te.const(0.1, "bfloat16")
    assert c.value == float(ml_dtypes.bfloat16(0.1)) != 0.1
    assert str(c) == "bfloat16(0.100098)"              # the shortest text that reads back
    assert float(ml_dtypes.bfloat16("0.100098")) == c.value
    A = te.placeholder((4,), "bfloat16", name="A")
    assert (A[0] * 0.1).b.dtype == "bfloat16"                # the literal adopts bfloat16
    assert te.const(3.5e38, "bfloat16").value == float("inf")  # past the largest: inf


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_folded_bfloat16_arithmetic_equals_the_kernels(op):
    """Arithmetic on bfloat16 constants folds (at lowering) to what the kernel computes from
    inputs: the float32 result rounded to bfloat16, ties included."""
    fn = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
          "/": lambda x, y: x / y}[op]
    values = [(1.0, 2.0 ** -8), (1.0 + 2.0 ** -7, 1.0 + 2.0 ** -7), (3.0, 7.0), (2.0 ** 100, 0.75)]
    n = len(values)
    A = te.placeholder((n,), "bfloat16", name="A")
    B = te.placeholder((n,), "bfloat16", name="B")
    C = te.compute((n,), lambda i: fn(A[i], B[i]), name="C")
    folded = [fn(te.const(x, "bfloat16"), te.const(y, "bfloat16")) for x, y in values]

    def pick(i, k=0):
        return folded[k] if k == n - 1 else te.if_then_else(i == k, folded[k], pick(i, k + 1))
    D = te.compute((n,), lambda i: pick(i), name="D")
    s = create_schedule([C, D])
    text = str(lower(s, [A, B, C, D]))
    assert text.count(f" {op} ") == 1, text                  # C's; D's constants are folded
    a = np.array([x for x, _ in values], np.float32).astype(BF16)
    b = np.array([y for _, y in values], np.float32).astype(BF16)
    c, d = run(s, [A, B], [C, D], [a, b])
    assert_same_bits(c, fn(a, b))
    assert_same_bits(d, c)
