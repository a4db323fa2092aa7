"""Error suite for bfloat16 (and float16) storage types: declarations that mix them with wider
floats or use integer-only operators, dtypes einloop does not compile, arrays of the wrong dtype
at a call (a float32 or float16 array, or a uint16 array that may hold bfloat16 bits), and a
library whose metadata names a dtype this einloop does not know.  Tests named
``test_accepts_*`` check near-misses that must work."""
import shutil

import ml_dtypes
import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.errors import ArgumentError, LibraryError, TEError

BF16 = np.dtype(ml_dtypes.bfloat16)
X = te.placeholder((8,), "bfloat16", name="X")
F = te.placeholder((8,), "float32", name="F")
H = te.placeholder((8,), "float16", name="H")


def test_bfloat16_plus_float32_asks_to_widen_the_bfloat16_side():
    with pytest.raises(TEError, match=r"bfloat16 \+ float32.*cast one side explicitly, e\.g\. "
                                      r"\(X\[i\]\)\.astype\('float32'\)"):
        te.compute((8,), lambda i: X[i] + F[i], name="Y")


def test_float32_times_bfloat16_asks_to_widen_the_bfloat16_side_too():
    with pytest.raises(TEError, match=r"float32 \* bfloat16.*\(X\[i\]\)\.astype\('float32'\)"):
        te.compute((8,), lambda i: F[i] * X[i], name="Y")


def test_bfloat16_with_float16_is_a_mismatch():
    with pytest.raises(TEError, match=r"bfloat16 - float16.*\.astype\('float16'\)"):
        te.compute((8,), lambda i: X[i] - H[i], name="Y")


def test_floor_division_of_bfloat16_is_integer_only():
    with pytest.raises(TEError, match=r"'//' is only defined for integers here, got bfloat16"):
        te.compute((8,), lambda i: X[i] // X[i], name="Y")


def test_other_ml_dtypes_types_are_not_compiled():
    with pytest.raises(TEError, match=r"unsupported dtype .*float8_e4m3fn.*bfloat16"):
        te.placeholder((8,), ml_dtypes.float8_e4m3fn, name="Q")


def test_accepts_ml_dtypes_types_and_names_for_bfloat16():
    for spelling in ("bfloat16", "bf16", ml_dtypes.bfloat16, BF16):
        assert te.placeholder((8,), spelling, name="P").dtype == "bfloat16"


@pytest.fixture(scope="module")
def widen():
    Y = te.compute((8,), lambda i: X[i].astype("float32"), name="Y")
    return build(create_schedule(Y), [X, Y], name="widen")


def test_a_float32_array_for_bfloat16_says_how_to_convert(widen):
    with pytest.raises(ArgumentError, match=r"kernel widen: argument 0 \(X\): expected dtype "
                                            r"bfloat16, got float32 \(convert with "
                                            r"\.astype\(ml_dtypes\.bfloat16\)\)$"):
        widen(np.zeros(8, np.float32), np.zeros(8, np.float32))


def test_a_uint16_array_for_bfloat16_may_be_its_bits():
    Y = te.compute((8,), lambda i: X[i].astype("float32"), name="Y")
    f = build(create_schedule(Y), [X, Y], name="widen16")
    with pytest.raises(ArgumentError, match=r"got uint16 .*if it holds bfloat16 bits, "
                                            r"reinterpret it with \.view\(ml_dtypes\.bfloat16\)"):
        f(np.zeros(8, np.uint16), np.zeros(8, np.float32))


def test_a_float16_array_is_not_bfloat16(widen):
    with pytest.raises(ArgumentError, match=r"expected dtype bfloat16, got float16 \(convert "
                                            r"with \.astype\(ml_dtypes\.bfloat16\)\)$"):
        widen(np.zeros(8, np.float16), np.zeros(8, np.float32))


def test_a_bfloat16_array_for_float32_says_how_to_convert(widen):
    with pytest.raises(ArgumentError, match=r"argument 1 \(Y\): expected dtype float32, got "
                                            r"bfloat16 \(convert with \.astype\(np\.float32\)\)"):
        widen(np.zeros(8, BF16), np.zeros(8, BF16))


@pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")),
                    reason="no C compiler (cc, gcc, clang) on PATH")
def test_a_library_with_a_dtype_this_einloop_lacks_is_refused(widen, tmp_path):
    from einloop import runtime
    from einloop.codegen.export import export_library

    def edit(meta):
        meta["kernels"][0]["args"][0]["dtype"] = "float8_e4m3fn"
        return meta
    lib = export_library([widen], tmp_path / "odd.so", edit_metadata=edit)
    with pytest.raises(LibraryError, match=r"buffer 'X' has dtype 'float8_e4m3fn', which this "
                                           r"einloop .* does not know"):
        runtime.load_module(lib)
