"""``s.cache_read(T, scope, readers, dtype=...)``: a copy of T widened to dtype, read by readers
that cast it; results equal to the default schedule's (integers exactly), the step replayed from
JSON and printed as code, and the widenings or reads that would change a value refused."""
import json

import ml_dtypes
import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.errors import ScheduleError
from einloop.schedule.replay import replay, steps_to_code
from einloop.schedule.steps import steps_from_json, steps_to_json
from einloop.schedule.widen import holds_exactly


def int8_gemm(M=7, N=12, K=9):
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"),
                                               axis=k), name="C")
    return A, B, C


def operands(A, B, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, A.shape, dtype=np.uint8)
    b = rng.integers(-128, 128, B.shape, dtype=np.int8)
    a[0, :], b[:, 0] = 255, -128
    return a, b


def run(s, A, B, C):
    a, b = operands(A, B)
    c = np.zeros(C.shape, np.int32)
    build(s, [A, B, C])(a, b, c)
    return c


def test_a_widened_copy_keeps_the_result_exact_and_is_read_cast():
    A, B, C = int8_gemm()
    s = create_schedule(C)
    AW = s.cache_read(A, "wide", [C], dtype="int16")
    BW = s.cache_read(B, "wide", [C], dtype="int32")       # a cast to its own dtype: dropped
    assert (AW.dtype, BW.dtype, AW.name) == ("int16", "int32", "A.wide")
    s[AW].vectorize(s[AW].op.axis[1])
    text = str(lower(s, [A, B, C]))
    assert "A.wide[ax0 * 9 + ax1] = int16(A[" in text
    assert "int32(A.wide[" in text and "* B.wide[" in text
    a, b = operands(A, B)
    np.testing.assert_array_equal(run(s, A, B, C), a.astype(np.int32) @ b.astype(np.int32))


def test_the_step_replays_from_json_and_prints_as_code():
    A, B, C = int8_gemm()
    s = create_schedule(C)
    AW = s.cache_read(A, "wide", [C], dtype="int16")
    s[AW].compute_at(s[C], s[C].op.axis[0])
    (step, _) = steps_to_json(s.steps)
    assert step["args"] == {"scope": "wide", "readers": ["C"], "dtype": "int16"}
    again = replay(steps_from_json(json.loads(json.dumps(steps_to_json(s.steps)))), [C])
    assert str(lower(again, [A, B, C])) == str(lower(s, [A, B, C]))
    code = steps_to_code(s)
    assert "s.cache_read(A, 'wide', [C], dtype='int16')" in code.replace(
        "C.op.input_tensors[0]", "A"), code
    np.testing.assert_array_equal(run(again, A, B, C), run(create_schedule(C), A, B, C))


def test_a_bf16_copy_widened_to_float32_keeps_the_values():
    A = te.placeholder((5, 6), "bfloat16", name="A")
    C = te.compute((5, 6), lambda i, j: A[i, j].astype("float32") * 3.0, name="C")
    s = create_schedule(C)
    s.cache_read(A, "f32", [C], dtype="float32")
    a = np.random.default_rng(0).standard_normal((5, 6)).astype(ml_dtypes.bfloat16)
    c = np.zeros((5, 6), np.float32)
    build(s, [A, C])(a, c)
    np.testing.assert_array_equal(c, a.astype(np.float32) * np.float32(3))


@pytest.mark.parametrize("wide, narrow, ok", [
    ("int16", "uint8", True), ("int16", "int8", True), ("int8", "uint8", False),
    ("uint8", "int8", False), ("float32", "int16", True), ("float32", "int32", False),
    ("bfloat16", "uint8", True), ("float16", "int16", False), ("float32", "bfloat16", True),
    ("float16", "bfloat16", False), ("bfloat16", "float16", False), ("float64", "float32", True),
    ("int64", "int32", True), ("int32", "float32", False), ("int8", "bool", True)])
def test_holds_exactly(wide, narrow, ok):
    assert holds_exactly(wide, narrow) is ok


def test_a_narrowing_or_inexact_copy_is_refused():
    A, B, C = int8_gemm()
    s = create_schedule(C)
    with pytest.raises(ScheduleError, match=r"cache_read of A as int8: int8 does not hold every "
                                            r"uint8 value exactly"):
        s.cache_read(A, "wide", [C], dtype="int8")
    with pytest.raises(ScheduleError, match=r"cache_read of A: dtype: unsupported dtype 'int12'"):
        s.cache_read(A, "wide", [C], dtype="int12")
    assert s.steps == []


def test_a_read_that_is_not_cast_is_refused():
    A = te.placeholder((4, 8), "uint8", name="A")
    C = te.compute((4, 8), lambda i, j: (A[i, j] + A[i, j]).astype("int32"), name="C")
    s = create_schedule(C)
    with pytest.raises(ScheduleError, match=r"stage C reads A\[i, j\] as uint8, not through a "
                                            r"cast; it would compute in int16 instead"):
        s.cache_read(A, "wide", [C], dtype="int16")
