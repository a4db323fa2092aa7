"""Scalar data types: names, classes and the promotion rule for Python literals.

einloop never promotes silently between two typed operands (float32 + float64 is an error that
asks for an explicit ``astype``); only Python literals adopt the dtype of the other side.
"""
from ..errors import TEError

FLOAT_TYPES = ("float16", "float32", "float64")
INT_TYPES = ("int8", "int16", "int32", "int64", "uint8")
BOOL = "bool"
SUPPORTED = FLOAT_TYPES + INT_TYPES + (BOOL,)

#: dtype of loop and index variables.
INDEX = "int64"


def canonical(dtype, where="dtype"):
    """Return the canonical dtype name of *dtype* (a string or NumPy dtype), or raise TEError."""
    name = getattr(dtype, "name", None) or (dtype.__name__ if isinstance(dtype, type) else str(dtype))
    aliases = {"float": "float64", "int": "int64", "bool_": BOOL, "double": "float64", "half": "float16"}
    name = aliases.get(name, name)
    if name not in SUPPORTED:
        raise TEError(f"{where}: unsupported dtype {dtype!r}; use one of {', '.join(SUPPORTED)}")
    return name


def is_float(dtype):
    return dtype in FLOAT_TYPES


def is_int(dtype):
    return dtype in INT_TYPES


def bits(dtype):
    return 1 if dtype == BOOL else int("".join(c for c in dtype if c.isdigit()))
