"""Scalar data types: names, classes and the promotion rule for Python literals.

einloop never promotes silently between two typed operands (float32 + float64 is an error that
asks for an explicit ``astype``); only Python literals adopt the dtype of the other side.

``bfloat16`` (arrays of ``ml_dtypes.bfloat16``) is a storage type: kernels compute with it in
float32 and round each bfloat16 result to nearest even, so ``a + b`` of two bfloat16 values is a
bfloat16 (ml_dtypes' per-operation semantics, as float16 rounds each float16 result), and
bfloat16 with float32 is an error that asks for ``.astype("float32")``, as float16 with float32 is.
"""
import numpy as np

from ..errors import TEError

BFLOAT16 = "bfloat16"
FLOAT_TYPES = ("float16", BFLOAT16, "float32", "float64")
INT_TYPES = ("int8", "int16", "int32", "int64", "uint8")
BOOL = "bool"
SUPPORTED = FLOAT_TYPES + INT_TYPES + (BOOL,)

#: dtype of loop and index variables.
INDEX = "int64"


def canonical(dtype, where="dtype"):
    """Return the canonical dtype name of *dtype* (a string or NumPy dtype), or raise TEError."""
    name = getattr(dtype, "name", None) or (dtype.__name__ if isinstance(dtype, type) else str(dtype))
    aliases = {"float": "float64", "int": "int64", "bool_": BOOL, "double": "float64",
               "half": "float16", "bf16": BFLOAT16}
    name = aliases.get(name, name)
    if name not in SUPPORTED:
        raise TEError(f"{where}: unsupported dtype {dtype!r}; use one of {', '.join(SUPPORTED)}")
    return name


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype of einloop dtype *dtype* (``bfloat16``: ml_dtypes', imported on first
    use, since NumPy has none)."""
    if dtype == BFLOAT16:
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def is_float(dtype):
    return dtype in FLOAT_TYPES


def is_int(dtype):
    return dtype in INT_TYPES


def _bits(dtype):
    return 1 if dtype == BOOL else int("".join(c for c in dtype if c.isdigit()))


def _int_range(dtype):
    if dtype == BOOL:
        return (0, 1)
    b = _bits(dtype)
    return (0, 2 ** b - 1) if dtype.startswith("u") else (-2 ** (b - 1), 2 ** (b - 1) - 1)


# looked up, not recomputed: the simplifier asks for these tens of thousands of times per kernel
_BITS = {d: _bits(d) for d in SUPPORTED}
_RANGES = {d: _int_range(d) for d in INT_TYPES + (BOOL,)}


def bits(dtype):
    b = _BITS.get(dtype)
    return _bits(dtype) if b is None else b


def int_range(dtype):
    """Inclusive ``(lo, hi)`` of the values of an integer or bool *dtype*."""
    r = _RANGES.get(dtype)
    return _int_range(dtype) if r is None else r


def wrap(value, dtype):
    """The Python int *value* wrapped into integer *dtype* as the machine does it (two's
    complement, modulo 2**bits for unsigned types)."""
    lo, hi = int_range(dtype)
    if type(value) is int and lo <= value <= hi:
        return value
    return (value - lo) % (hi - lo + 1) + lo


def normalise(value, dtype):
    """*value* (a Python or NumPy number) as the value a *dtype* variable holds: integers wrap,
    floats round to the dtype's precision (float32 0.1 is 0.10000000149011612), bools are bools.
    Constant folding uses it so that a folded result equals what the kernel computes."""
    if dtype == BOOL:
        return bool(value)
    if is_float(dtype):
        with np.errstate(over="ignore"):
            return float(numpy_dtype(dtype).type(value))
    return wrap(int(value), dtype)
