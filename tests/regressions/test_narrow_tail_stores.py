"""Vectorized tails that store a narrower type than they compute (int32 -> int16 or int8,
float32 -> bfloat16, int64 -> int32): LLVM 22 miscompiles such a masked store on AVX-512
targets when one lane is left (it stores the lane's wide element, overwriting the next
elements; einloop.codegen.memory stores those tails lane by lane).  Each kernel writes into a
view of a larger array: the elements after its end must stay untouched, on any host; and
whatever the host, the IR einloop emits for an AVX-512 target holds no masked store of a
truncated vector."""
import re

import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.ir import dtypes

ROWS, COLS = 5, 37                  # 37 = 9 vectors of 4 and one element left per row
AVX512 = "llvm -mcpu=skylake-avx512"
CASES = [("int32", "int16"), ("int32", "int8"), ("int32", "uint8"), ("int64", "int32"),
         ("float32", "bfloat16")]


def kernel(wide, narrow, target="llvm"):
    A = te.placeholder((ROWS, COLS), wide, name="A")
    B = te.compute((ROWS, COLS), lambda i, j: (A[i, j] * 3 + 1).astype(narrow), name="B")
    s = create_schedule(B)
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].vectorize(ji)
    return build(s, [A, B], target=target)


@pytest.mark.parametrize("wide,narrow", CASES, ids=lambda d: d)
def test_a_narrowing_tail_store_writes_nothing_past_its_row(wide, narrow):
    f = kernel(wide, narrow)
    rng = np.random.default_rng(0)
    a = rng.integers(-40, 40, (ROWS, COLS)).astype(dtypes.numpy_dtype(wide))
    sentinel = np.asarray(99, np.float32).astype(dtypes.numpy_dtype(narrow))
    flat = np.full(ROWS * COLS + 8, sentinel)
    out = flat[:ROWS * COLS].reshape(ROWS, COLS)
    f(a, out)
    want = (a * 3 + 1).astype(dtypes.numpy_dtype(narrow))
    np.testing.assert_array_equal(out, want)
    assert (flat[ROWS * COLS:] == sentinel).all(), flat[ROWS * COLS:]


@pytest.mark.parametrize("wide,narrow", CASES, ids=lambda d: d)
def test_no_masked_store_of_a_truncated_vector_for_avx512(wide, narrow):
    ir = kernel(wide, narrow, AVX512).get_source("llvm-unopt")
    truncated = set(re.findall(r"%(\S+) = trunc <", ir))
    stored = re.findall(r"call void @\"?llvm\.masked\.store[^(]*\(<[^>]*> %(\S+),", ir)
    assert not truncated.intersection(stored), [s for s in stored if s in truncated]
