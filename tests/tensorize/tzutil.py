"""Shared pieces of the tensorize tests: the u8 x s8 -> s32 GEMM declaration, its schedule with
an intrinsic (B packed into the intrinsic's tiles), the NumPy reference, and a user-declared
float32 FMA intrinsic."""
import numpy as np

from einloop import create_schedule, te
from einloop.codegen.target import Target


def int8_gemm(M, N, K, a_dtype="uint8", b_dtype="int8"):
    A = te.placeholder((M, K), a_dtype, name="A")
    B = te.placeholder((K, N), b_dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"),
                                               axis=k), name="C")
    return A, B, C


def intrin_tile(intrin):
    """(lanes, group) of a u8 x s8 intrinsic: its output tile and its reduction."""
    return intrin.shape[0], intrin.op.reduce_axis[0].extent


def pack_for(s, B, lanes, group):
    """Lay B[K, N] out as dense lanes x group tiles: [K/group, N/lanes, lanes, group]."""
    BP = s.pack(B, 1, lanes)                # [N/lanes, K, lanes]
    return s.pack(BP, 1, group)             # [K/group, N/lanes, lanes, group]


def tiled(s, C, lanes, group):
    """Split C's j by *lanes* and k by *group*, the tile's loops innermost: (i, jo, ko, ji, ki)."""
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=lanes)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=group)
    s[C].reorder(i, jo, ko, ji, ki)
    return i, jo, ko, ji, ki


def default_tensorized(intrin, M, N, K):
    """The GEMM with B packed, its tile's loops innermost and tensorized: (s, [A, B, C])."""
    A, B, C = int8_gemm(M, N, K)
    s = create_schedule(C)
    lanes, group = intrin_tile(intrin)
    pack_for(s, B, lanes, group)
    *_, ji, _ = tiled(s, C, lanes, group)
    s[C].tensorize(ji, intrin)
    return s, [A, B, C]


def random_int8(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    # the extremes too: 255 * -128 is the largest product in magnitude
    a[0, :] = 255
    b[:, 0] = -128
    return a, b


def reference(a, b):
    return a.astype(np.int32) @ b.astype(np.int32)


def host_has(*features):
    target = Target.parse("llvm")
    return all(target.has_feature(f) for f in features)


FMA8_BODY = """
  %a = load float, ptr %in0, align 4
  %a.one = insertelement <8 x float> poison, float %a, i64 0
  %a.all = shufflevector <8 x float> %a.one, <8 x float> poison, <8 x i32> zeroinitializer
  %b = load <8 x float>, ptr %in1, align 4
  %acc = load <8 x float>, ptr %out, align 4
  %r = call <8 x float> @llvm.fma.v8f32(<8 x float> %a.all, <8 x float> %b, <8 x float> %acc)
  store <8 x float> %r, ptr %out, align 4
  ret void
"""
FMA8_DECL = "declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)"


def fma8(name="test.fma_f32x8"):
    """A user's intrinsic: C[8] += X[0] * Y[0, 8] in float32 (one broadcast FMA)."""
    X = te.placeholder((1,), "float32", name="X")
    Y = te.placeholder((1, 8), "float32", name="Y")
    r = te.reduce_axis((0, 1), name="r")
    C = te.compute((8,), lambda j: te.sum(X[r] * Y[r, j], axis=r), name="C")
    return te.TensorIntrin(name, C, FMA8_BODY, FMA8_DECL, features=("avx2", "fma"))
