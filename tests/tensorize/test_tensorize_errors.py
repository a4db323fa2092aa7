"""Every way a loop nest can fail to match an intrinsic, and every bad declaration, says what
differs and what would fit (ScheduleError for schedules, TEError for declarations); mismatch()
answers the same questions without raising."""
import pytest

from einloop import create_schedule, lower, te
from einloop.codegen.intrinsics import AVX2_U8S8
from einloop.errors import ScheduleError, TEError
from einloop.schedule.tensorize import mismatch

from tzutil import FMA8_BODY, FMA8_DECL, int8_gemm, pack_for, tiled


def _gemm(M=4, N=16, K=8, **kw):
    A, B, C = int8_gemm(M, N, K, **kw)
    return A, B, C, create_schedule(C)


def _packed_tiled(M=4, N=16, K=8, lanes=8, group=2, **kw):
    A, B, C, s = _gemm(M, N, K, **kw)
    pack_for(s, B, 8, 2)
    loops = tiled(s, C, lanes, group)
    return A, B, C, s, loops


def _tiled_body(body):
    """A 4 x 16 x 8 reduction C[i, j] = body(A[i, k], B[k, j], k) over u8 A and s8 B, tiled
    for the intrinsic (B not packed) and its loop j.inner."""
    A = te.placeholder((4, 8), "uint8", name="A")
    B = te.placeholder((8, 16), "int8", name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((4, 16), lambda i, j: body(A[i, k], B[k, j], k), name="C")
    s = create_schedule(C)
    _, _, _, ji, _ = tiled(s, C, 8, 2)
    return C, s, ji


def test_wrong_extent():
    *_, C, s, (i, jo, ko, ji, ki) = _packed_tiled(lanes=4)
    with pytest.raises(ScheduleError, match=r"tensorize on stage C at loop j\.inner with "
                                            r"x86\.avx2\.u8s8_i32x8: loop j\.inner has extent 4, "
                                            r"the intrinsic .*data axis j has 8; split by 8"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_wrong_operand_dtype():
    *_, C, s, (i, jo, ko, ji, ki) = _packed_tiled(a_dtype="int8")
    with pytest.raises(ScheduleError, match=r"operand A of stage C is int8, the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8's A is uint8"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_wrong_accumulator_dtype():
    C, s, ji = _tiled_body(lambda a, b, k: te.sum(a.astype("int64") * b.astype("int64"),
                                                   axis=k))
    with pytest.raises(ScheduleError, match=r"stage C accumulates int64, the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8 int32"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_unpacked_layout_says_to_pack():
    A, B, C, s = _gemm()
    _, _, _, ji, _ = tiled(s, C, 8, 2)
    with pytest.raises(ScheduleError, match=r"operand B moves by 1 element\(s\) per step of loop "
                                            r"j\.inner, the intrinsic x86\.avx2\.u8s8_i32x8's "
                                            r"tile B\[8, 2\] by 2 .*pack it \(s\.pack"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_not_a_reduction():
    A = te.placeholder((16,), "uint8", name="A")
    C = te.compute((16,), lambda j: A[j].astype("int32") * 2, name="C")
    s = create_schedule(C)
    jo, ji = s[C].split(C.op.axis[0], factor=8)
    with pytest.raises(ScheduleError, match=r"stage C is not a reduction; the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8 accumulates a te\.sum"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_max_reduction_is_not_a_sum():
    C, s, ji = _tiled_body(lambda a, b, k: te.max(a.astype("int32") * b.astype("int32"),
                                                   axis=k))
    with pytest.raises(ScheduleError, match=r"stage C is a te\.max reduction; the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8 accumulates a te\.sum"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_other_arithmetic_is_named():
    C, s, ji = _tiled_body(lambda a, b, k: te.sum(a.astype("int32") + b.astype("int32"),
                                                   axis=k))
    with pytest.raises(ScheduleError, match=r"stage C computes .*\+.* where the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8 computes .*\*"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_nested_under_a_vectorized_loop():
    *_, C, s, (i, jo, ko, ji, ki) = _packed_tiled()
    s[C].reorder(i, ko, jo, ji, ki)
    s[C].vectorize(jo)
    with pytest.raises(ScheduleError, match=r"loop j\.inner is nested in the vectorized loop "
                                            r"j\.outer; the intrinsic works on whole tiles"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_an_annotated_loop_inside_the_tile():
    *_, C, s, (i, jo, ko, ji, ki) = _packed_tiled()
    s[C].unroll(ki)
    with pytest.raises(ScheduleError, match=r"loop k\.inner is unrolled, but the intrinsic "
                                            r"replaces it"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_extra_loops_inside_the_tile():
    *_, C, s, (i, jo, ko, ji, ki) = _packed_tiled()
    with pytest.raises(ScheduleError, match=r"the loops from k\.outer inwards have 2 reduction "
                                            r"loop\(s\) \(k\.outer:4, k\.inner:2\), the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8 has 1 \(k:2\)"):
        s[C].tensorize(ko, AVX2_U8S8)


def test_an_axis_shorter_than_the_tile():
    A, B, C, s = _gemm(N=5)                         # split clamps the factor 8 to the extent 5
    pack_for(s, B, 8, 2)
    _, _, _, ji, _ = tiled(s, C, 8, 2)
    with pytest.raises(ScheduleError, match=r"loop j\.inner has extent 5, the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8's data axis j has 8"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_scheduling_the_tensorized_loops_afterwards():
    *_, C, s, (i, jo, ko, ji, ki) = _packed_tiled()
    s[C].tensorize(ji, AVX2_U8S8)
    with pytest.raises(ScheduleError, match=r"split on stage C: loop j\.inner is one of the loops "
                                            r"that tensorize replaces .*schedule the loops before "
                                            r"tensorize"):
        s[C].split(ji, factor=2)
    with pytest.raises(ScheduleError, match=r"vectorize on stage C: loop k\.inner is one of the "
                                            r"loops that tensorize replaces"):
        s[C].vectorize(ki)
    with pytest.raises(ScheduleError, match=r"it is tensorized already \(at loop j\.inner"):
        s[C].tensorize(ji, AVX2_U8S8)


def test_not_an_intrinsic_and_not_a_loop():
    *_, C, s, (i, jo, ko, ji, ki) = _packed_tiled()
    with pytest.raises(ScheduleError, match=r"tensorize on stage C: expected a te\.TensorIntrin, "
                                            r"got 'vnni'"):
        s[C].tensorize(ji, "vnni")
    with pytest.raises(ScheduleError, match=r"tensorize on stage C: axis j was already split"):
        s[C].tensorize(C.op.axis[1], AVX2_U8S8)


def test_a_stage_computed_inside_the_tile_is_refused_when_lowering():
    A, B, C, s, (i, jo, ko, ji, ki) = _packed_tiled()
    AC = s.cache_read(A, "local", [C])
    s[AC].compute_at(s[C], ki)
    s[C].tensorize(ji, AVX2_U8S8)
    with pytest.raises(ScheduleError, match=r"stage A\.local is computed at loop k\.inner, inside "
                                            r"the tile; compute it outside"):
        lower(s, [A, B, C])


def test_mismatch_answers_without_raising():
    A, B, C, s = _gemm()
    i, jo, ko, ji, ki = tiled(s, C, 8, 2)
    recorded = len(s.steps)
    assert "pack it" in mismatch(s[C], ji, AVX2_U8S8)
    assert "not a current loop" in mismatch(s[C], C.op.axis[1], AVX2_U8S8)
    assert "expected a te.TensorIntrin" in mismatch(s[C], ji, object())
    assert len(s.steps) == recorded                 # asking recorded nothing
    pack_for(s, B, 8, 2)
    assert mismatch(s[C], ji, AVX2_U8S8) is None


# declarations ---------------------------------------------------------------------------------

def _fma_parts():
    X = te.placeholder((1,), "float32", name="X")
    Y = te.placeholder((1, 8), "float32", name="Y")
    r = te.reduce_axis((0, 1), name="r")
    return X, Y, r


def test_declaration_not_a_sum():
    X, Y, r = _fma_parts()
    T = te.compute((8,), lambda j: te.max(X[r] * Y[r, j], axis=r), name="T")
    with pytest.raises(TEError, match=r"TensorIntrin bad\.max: the reduction is te\.max; tensor "
                                      r"intrinsics accumulate sums"):
        te.TensorIntrin("bad.max", T, FMA8_BODY, FMA8_DECL)


def test_declaration_not_a_reduction():
    X, Y, r = _fma_parts()
    T = te.compute((8,), lambda j: Y[0, j] * 2.0, name="T")
    with pytest.raises(TEError, match=r"the semantics must be one te\.compute whose body is a "
                                      r"te\.sum"):
        te.TensorIntrin("bad.elementwise", T, FMA8_BODY, FMA8_DECL)


def test_declaration_operand_read_twice_or_computed():
    X, Y, r = _fma_parts()
    T = te.compute((8,), lambda j: te.sum(Y[r, j] * Y[r, j], axis=r), name="T")
    with pytest.raises(TEError, match=r"operand Y is read twice"):
        te.TensorIntrin("bad.twice", T, FMA8_BODY, FMA8_DECL)
    Z = te.compute((1, 8), lambda a, b: Y[a, b] + 1.0, name="Z")
    T = te.compute((8,), lambda j: te.sum(X[r] * Z[r, j], axis=r), name="T")
    with pytest.raises(TEError, match=r"it reads Z, which is not a placeholder"):
        te.TensorIntrin("bad.computed", T, FMA8_BODY, FMA8_DECL)


def test_declaration_non_affine_read():
    X = te.placeholder((4,), "float32", name="X")
    Y = te.placeholder((1, 8), "float32", name="Y")
    r = te.reduce_axis((0, 1), name="r")
    T = te.compute((8,), lambda j: te.sum(X[j // 2] * Y[r, j], axis=r), name="T")
    with pytest.raises(TEError, match=r"operand X is read at .*not affine in j"):
        te.TensorIntrin("bad.affine", T, FMA8_BODY, FMA8_DECL)


@pytest.mark.parametrize("kw, message", [
    (dict(name="has space"), r"name must be letters, digits"),
    (dict(body="  %x = add i32 1, 2"), r"body must be LLVM IR text \(str\) that ends with "
                                       r"'ret void'"),
    (dict(declarations="define void @f() {}"), r"declarations must be LLVM 'declare' lines"),
    (dict(features="avx2"), r"features must be a tuple of LLVM feature names"),
])
def test_declaration_arguments(kw, message):
    X, Y, r = _fma_parts()
    T = te.compute((8,), lambda j: te.sum(X[r] * Y[r, j], axis=r), name="T")
    args = dict(name="bad.args", compute=T, body=FMA8_BODY, declarations=FMA8_DECL,
                features=("fma",))
    args.update(kw)
    with pytest.raises(TEError, match=message):
        te.TensorIntrin(**args)


def test_a_taken_name_is_refused():
    X, Y, r = _fma_parts()
    T = te.compute((8,), lambda j: te.sum(X[r] * Y[r, j], axis=r), name="T")
    with pytest.raises(TEError, match=r"another intrinsic of that name is declared already"):
        te.TensorIntrin(AVX2_U8S8.name, T, FMA8_BODY, FMA8_DECL, features=("fma",))
