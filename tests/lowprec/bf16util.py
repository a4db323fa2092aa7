"""Helpers of the low-precision tests: bfloat16 arrays (ml_dtypes), the float32 values whose
rounding is hard to get right, and a build-and-run that allocates the outputs."""
import ml_dtypes
import numpy as np

from einloop import build

BF16 = np.dtype(ml_dtypes.bfloat16)


def float32_from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def hard_float32():
    """float32 values where rounding to bfloat16 can go wrong: ties to even and odd (normal,
    subnormal, at the top of the range), one bit either side of a tie, the largest finite
    values (which round to inf), signed zeros and infinities, quiet and signalling NaNs with
    payloads that rounding would carry into the exponent."""
    bits = []
    for high in (0x3F80, 0x3F81, 0x0000, 0x0001, 0x007F, 0x0080, 0x7F7E, 0x7F7F, 0x4B00):
        for low in (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF):
            bits += [high << 16 | low, (high | 0x8000) << 16 | low]
    bits += [0x7F800000, 0xFF800000,                        # +-inf
             0x7F800001, 0xFF800001, 0x7F80FFFF,            # signalling NaNs, small payloads
             0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7FC08000]  # quiet NaNs
    return float32_from_bits(bits)


def random_float32(n, seed=0):
    """*n* float32 of uniformly random bits: every exponent, subnormals and NaNs included."""
    rng = np.random.default_rng(seed)
    return float32_from_bits(rng.integers(0, 2 ** 32, size=n, dtype=np.uint64))


def random_bf16(shape, seed=0, low=-2.0, high=2.0):
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=shape).astype(np.float32).astype(BF16)


def run(s, inputs, outputs, arrays, target="llvm"):
    """Build *s* for (inputs + outputs) and run it on *arrays*; return the outputs (which
    start as NaN, or 0 for integers)."""
    f = build(s, list(inputs) + list(outputs), target=target)
    results = [_unwritten(t) for t in outputs]
    f(*arrays, *results)
    return results


def numpy_dtype(dtype):
    return BF16 if dtype == "bfloat16" else np.dtype(dtype)


def _unwritten(t):
    dt = numpy_dtype(t.dtype)
    return np.full(t.shape, np.nan if dt == BF16 or dt.kind == "f" else 0, dt)


def assert_same_bits(got, want):
    """Equal bit for bit (a NaN must be the same NaN)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    u = np.uint16 if got.dtype.itemsize == 2 else np.uint32
    g, w = got.view(u), want.view(u)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{bad.size} of {g.size} differ; first at {bad[0]}: got "
                           f"{g.flat[bad[0]]:#x}, want {w.flat[bad[0]]:#x}")
