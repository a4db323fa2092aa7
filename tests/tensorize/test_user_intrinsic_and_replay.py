"""A user-declared intrinsic (a float32 8-lane broadcast FMA) tensorizes a float32 matmul, and a
tensorized schedule replays from its log form (JSON steps) and from its printed code."""
import json

import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.codegen.intrinsics import AVX2_U8S8
from einloop.errors import BuildError, ScheduleError, TEError
from einloop.schedule import replay as R, steps as S

from tzutil import default_tensorized, fma8, host_has, random_int8, reference

FMA8 = fma8()


def _matmul_f32(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _fma_schedule(A, B, C, parallel=False):
    s = create_schedule(C)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, s[C].op.reduce_axis[0], ji)
    if parallel:
        s[C].parallel(i)
    s[C].tensorize(ji, FMA8)
    return s


@pytest.mark.parametrize("M, N, K, parallel", [(37, 40, 19, False), (101, 16, 7, True)])
def test_a_user_fma_intrinsic_computes_a_float_matmul(M, N, K, parallel):
    A, B, C = _matmul_f32(M, N, K)
    s = _fma_schedule(A, B, C, parallel)
    target = "llvm" if host_has("avx2", "fma") else "llvm -mcpu=haswell"
    f = build(s, [A, B, C], target=target)
    assert "vfmadd" in f.get_source("asm")
    if target != "llvm":
        return
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_the_user_intrinsic_reads_the_scalar_operand_as_a_broadcast():
    A, B, C = _matmul_f32(3, 16, 5)
    s = _fma_schedule(A, B, C)
    text = str(lower(s, [A, B, C]))
    # A's tile is one element (stride 0 along the lanes), B's and C's 8 contiguous ones
    assert "tensorized einloop.tensorize.test.fma_f32x8(&C[i * 16 + j.outer * 8], " \
           "&A[i * 5 + k], &B[k * 16 + j.outer * 8])" in text


def test_an_int8_schedule_replays_from_its_json_steps():
    M, N, K = 11, 16, 6
    s, args = default_tensorized(AVX2_U8S8, M, N, K)
    payload = json.loads(json.dumps(S.steps_to_json(s.steps)))
    assert {"kind": "tensorize", "stage": "C",
            "args": {"axis": "j.inner", "intrin": AVX2_U8S8.name}} in payload
    A2 = te.placeholder((M, K), "uint8", name="A")
    B2 = te.placeholder((K, N), "int8", name="B")
    k = te.reduce_axis((0, K), name="k")
    C2 = te.compute((M, N), lambda i, j: te.sum(A2[i, k].astype("int32") * B2[k, j].astype(
        "int32"), axis=k), name="C")
    s2 = R.replay(S.steps_from_json(payload), [C2])
    assert str(lower(s2, [A2, B2, C2])) == str(lower(s, args))
    if host_has("avx2"):
        f = build(s2, [A2, B2, C2])
        a, b = random_int8(M, N, K)
        c = np.zeros((M, N), np.int32)
        f(a, b, c)
        np.testing.assert_array_equal(c, reference(a, b))


def test_a_tensorized_schedule_prints_code_that_rebuilds_it():
    A, B, C = _matmul_f32(4, 16, 3)
    s = _fma_schedule(A, B, C)
    code = R.steps_to_code(s)
    assert "from einloop.te.tensor_intrin import lookup as lookup_intrin" in code
    assert "s[C].tensorize(j_inner, lookup_intrin('test.fma_f32x8'))" in code
    A2, B2, C2 = _matmul_f32(4, 16, 3)
    namespace = {"C": C2, "create_schedule": create_schedule}
    exec(compile(code, "<tensorize code>", "exec"), namespace)
    assert str(lower(namespace["s"], [A2, B2, C2])) == str(lower(s, [A, B, C]))


def test_replaying_an_undeclared_intrinsic():
    A, B, C = _matmul_f32(4, 16, 3)
    steps = [{"kind": "split", "stage": "C", "args": {"axis": "j", "factor": 8}},
             {"kind": "tensorize", "stage": "C",
              "args": {"axis": "j.inner", "intrin": "nobody.declared_this"}}]
    with pytest.raises(ScheduleError, match=r"schedule step tensorize: no tensor intrinsic is "
                                            r"declared as 'nobody\.declared_this'; declare it"):
        R.replay(steps, [C])


def _matmul_u8s8(M=2, N=16, K=8):
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype(
        "int32"), axis=k), name="C")
    return A, B, C


def _user_u8s8(name, body, declarations, features):
    A = te.placeholder((4,), "uint8", name="A")
    B = te.placeholder((16, 4), "int8", name="B")
    r = te.reduce_axis((0, 4), name="r")
    T = te.compute((16,), lambda j: te.sum(A[r].astype("int32") * B[j, r].astype("int32"),
                                           axis=r), name="T")
    return te.TensorIntrin(name, T, body, declarations, features)


def _tensorized_with(intrin):
    A, B, C = _matmul_u8s8()
    s = create_schedule(C)
    s.pack(s.pack(B, 1, 16), 1, 4)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=16)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[C].reorder(i, jo, ko, ji, ki)
    s[C].tensorize(ji, intrin)
    return s, [A, B, C]


def test_a_user_intrinsic_whose_declared_features_are_wrong_is_refused_not_a_crash():
    """vpdpbusd under features=("avx2",): LLVM would abort selecting it on an AVX2 target."""
    from einloop.codegen.intrinsics import AVX512VNNI_U8S8
    wrong = _user_u8s8("test.vnni_claims_avx2", AVX512VNNI_U8S8.body,
                       "\n".join(AVX512VNNI_U8S8.declarations), ("avx2",))
    s, args = _tensorized_with(wrong)
    with pytest.raises(BuildError, match=r"tensor intrinsic test\.vnni_claims_avx2 cannot be "
                                         r"compiled for target .*-mcpu=haswell.*LLVM fails on it "
                                         r"\(LLVM ERROR: "):
        build(s, args, target="llvm -mcpu=haswell")


def test_a_user_intrinsic_with_invalid_llvm_is_refused():
    bad = _user_u8s8("test.invalid_llvm", "  %x = add i32 %nowhere, 1\n  ret void", "",
                     ("avx2",))
    s, args = _tensorized_with(bad)
    with pytest.raises(BuildError, match=r"tensor intrinsic test\.invalid_llvm cannot be compiled "
                                         r"for target .*its LLVM IR is invalid"):
        build(s, args, target="llvm -mcpu=haswell")


def test_inputs_order_the_pointers_the_body_gets():
    """inputs=[Y, X]: %in0 is Y's tile, %in1 X's."""
    from tzutil import FMA8_BODY, FMA8_DECL
    X = te.placeholder((1,), "float32", name="X")
    Y = te.placeholder((1, 8), "float32", name="Y")
    r = te.reduce_axis((0, 1), name="r")
    T = te.compute((8,), lambda j: te.sum(X[r] * Y[r, j], axis=r), name="T")
    body = FMA8_BODY.replace("%in0", "%tmp").replace("%in1", "%in0").replace("%tmp", "%in1")
    swapped = te.TensorIntrin("test.fma_f32x8_swapped", T, body, FMA8_DECL, ("avx2", "fma"),
                              inputs=[Y, X])
    assert [t.name for t in swapped.inputs] == ["Y", "X"]
    A, B, C = _matmul_f32(5, 16, 3)
    s = create_schedule(C)
    jo, ji = s[C].split(s[C].op.axis[1], factor=8)
    s[C].reorder(s[C].op.axis[0], jo, s[C].op.reduce_axis[0], ji)
    s[C].tensorize(ji, swapped)
    assert "(&C[i * 16 + j.outer * 8], &B[k * 16 + j.outer * 8], &A[i * 3 + k])" in str(
        lower(s, [A, B, C]))
    if host_has("avx2", "fma"):
        f = build(s, [A, B, C])
        a = np.arange(15, dtype=np.float32).reshape(5, 3)
        b = np.arange(48, dtype=np.float32).reshape(3, 16)
        c = np.zeros((5, 16), np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b)


#: a strided intrinsic of SSE code (any x86-64): out[i] += dot(A[i, :], B) for two rows of A
#: %in0.s0 elements apart
ROWDOT_BODY = """
  %a0 = load <4 x float>, ptr %in0, align 4
  %off = mul i64 %in0.s0, 4
  %a1.p = getelementptr i8, ptr %in0, i64 %off
  %a1 = load <4 x float>, ptr %a1.p, align 4
  %b = load <4 x float>, ptr %in1, align 4
  %m0 = fmul <4 x float> %a0, %b
  %m1 = fmul <4 x float> %a1, %b
  %o0 = load float, ptr %out, align 4
  %r0 = call float @llvm.vector.reduce.fadd.v4f32(float %o0, <4 x float> %m0)
  store float %r0, ptr %out, align 4
  %o1.p = getelementptr float, ptr %out, i64 1
  %o1 = load float, ptr %o1.p, align 4
  %r1 = call float @llvm.vector.reduce.fadd.v4f32(float %o1, <4 x float> %m1)
  store float %r1, ptr %o1.p, align 4
  ret void
"""


def _rowdot():
    A = te.placeholder((2, 4), "float32", name="A")
    B = te.placeholder((4,), "float32", name="B")
    r = te.reduce_axis((0, 4), name="r")
    T = te.compute((2,), lambda i: te.sum(A[i, r] * B[r], axis=r), name="T")
    return te.TensorIntrin("test.rowdot_2x4_strided", T, ROWDOT_BODY,
                           "declare float @llvm.vector.reduce.fadd.v4f32(float, <4 x float>)",
                           (), strides=True)


def _matvec(transposed=False):
    M, K = 6, 8
    X = te.placeholder((K, M) if transposed else (M, K), "float32", name="X")
    w = te.placeholder((K,), "float32", name="w")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M,), lambda m: te.sum((X[k, m] if transposed else X[m, k]) * w[k], axis=k),
                   name="Y")
    s = create_schedule(Y)
    mo, mi = s[Y].split(s[Y].op.axis[0], factor=2)
    ko, ki = s[Y].split(s[Y].op.reduce_axis[0], factor=4)
    s[Y].reorder(mo, ko, mi, ki)
    return s, [X, w, Y], mi


def test_a_strided_intrinsic_reads_rows_where_they_lie():
    """A's two rows are a row of X apart (K = 8 elements): no copy, the stride passed."""
    intrin = _rowdot()
    s, args, mi = _matvec()
    s[args[2]].tensorize(mi, intrin)
    assert "(&Y[m.outer * 2] strides [], &X[m.outer * 16 + k.outer * 4] strides [8], " \
           "&w[k.outer * 4] strides [])" in str(lower(s, args))
    f = build(s, args)
    x = np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal(8).astype(np.float32)
    y = np.zeros(6, np.float32)
    f(x, w, y)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_a_strided_intrinsic_still_needs_contiguous_rows():
    s, args, mi = _matvec(transposed=True)
    with pytest.raises(ScheduleError, match=r"operand X moves by 6 elements along the last "
                                            r"dimension of the intrinsic test\.rowdot_2x4_strided"
                                            r"'s tile A\[2, 4\].*pack X"):
        s[args[2]].tensorize(mi, _rowdot())


def test_a_strided_intrinsic_indexes_each_dimension_by_its_own_axes():
    A = te.placeholder((2, 4), "float32", name="A")
    r = te.reduce_axis((0, 2), name="r")
    T = te.compute((2,), lambda i: te.sum(A[i, i + r], axis=r), name="T")
    with pytest.raises(TEError, match=r"axis i indexes dimensions \[0, 1\] of operand A .* a strided "
                             r"intrinsic indexes each dimension by axes of its own"):
        te.TensorIntrin("test.diagonal_strided", T, "  ret void", "", (), strides=True)
