"""GEMM in int8, C = A @ B with A uint8, B int8 and C int32: a hand schedule on a tensor
intrinsic (``s[T].tensorize``), exact.

The declaration is the plain one (``A[i, k].astype("int32") * B[k, j].astype("int32")``)
except that it reads two copies made inside the kernel: B packed into the intrinsic's dense
``lanes x group`` tiles, ``PB[N/bn, K/group, bn, group]`` (one column panel of width ``bn``
contiguous over K), and, for the AVX2 intrinsic, A widened once to int16, so that the pair of
A an instruction multiplies is one broadcast load (``x86.avx2.s16s8_i32x8``).  The schedule is
the float32 one of ``gemm.py``: an ``mr x bn`` accumulator tile (a cache_write stage computed at
the tile loop, rows unrolled), column panels in parallel; inside, the tile's ``lanes x group``
loops are tensorized, one instruction (``vpmaddwd``, or ``vpdpbusd`` with VNNI) each.

Run it:  python examples/gemm_int8.py
"""
import numpy as np

from einloop import build, create_schedule, te
from einloop.codegen import intrinsics
from einloop.codegen.intrinsics import AVX2_S16S8, AVX2_U8S8


def pick_intrin(target="llvm"):
    """The best int8 intrinsic *target* has; the AVX2 one reads A widened to int16."""
    have = intrinsics.for_target(target)
    if not have:
        raise SystemExit(f"target {target!r} has none of einloop's int8 intrinsics (x86 AVX2 "
                         "or VNNI)")
    return AVX2_S16S8 if have[0] is AVX2_U8S8 else have[0]


def declare(M, N, K, intrin, bn):
    """``C = A @ B`` reading PB (B in the intrinsic's tiles) and, when the intrinsic takes an
    int16 A, AW (A widened).  N must be a multiple of *bn*, *bn* of the intrinsic's lanes and K
    of its group."""
    lanes, group = intrin.shape[0], intrin.op.reduce_axis[0].extent
    if N % bn or bn % lanes or K % group:
        raise ValueError(f"N={N} must be a multiple of bn={bn}, bn of {lanes} and K={K} of "
                         f"{group}")
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    a_dtype = intrin.inputs[0].dtype
    AW = te.compute((M, K), lambda i, k: A[i, k].astype(a_dtype), name="AW") \
        if a_dtype != "uint8" else None
    PB = te.compute((N // bn, K // group, bn, group),
                    lambda x, y, z, w: B[y * group + w, x * bn + z], name="PB")
    k = te.reduce_axis((0, K), name="k")
    Ar = AW if AW is not None else A
    C = te.compute((M, N), lambda i, j: te.sum(
        Ar[i, k].astype("int32")
        * PB[j // bn, k // group, j % bn, k % group].astype("int32"), axis=k), name="C")
    return A, B, AW, PB, C


def schedule(M, N, K, intrin=None, mr=6, bn=16):
    """The hand schedule: ``mr x bn`` int32 accumulators in registers, column panels in
    parallel, the intrinsic's tile loops tensorized.  ``mr=6, bn=16`` fills 12 of AVX2's 16
    registers with accumulators."""
    intrin = intrin or pick_intrin()
    lanes, group = intrin.shape[0], intrin.op.reduce_axis[0].extent
    A, B, AW, PB, C = declare(M, N, K, intrin, bn)
    s = create_schedule(C)
    if AW is not None:
        s[AW].parallel(s[AW].op.axis[0])
        s[AW].vectorize(s[AW].op.axis[1])
    s[PB].parallel(s[PB].op.axis[0])
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, mr, bn)
    s[C].reorder(jo, io, ii, ji)
    s[C].parallel(jo)
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], io)
    mc, nc = s[CC].op.axis
    nco, nci = s[CC].split(nc, factor=lanes)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=group)
    s[CC].reorder(ko, mc, nco, nci, ki)
    s[CC].unroll(mc)
    s[CC].unroll(nco)
    s[CC].tensorize(nci, intrin)
    return s, [A, B, C]


def reference(a, b):
    """NumPy's int32 matmul (exact: int32 wraps as the kernel's accumulators do)."""
    return a.astype(np.int32) @ b.astype(np.int32)


if __name__ == "__main__":
    M = N = K = 1024
    s, args = schedule(M, N, K)
    f = build(s, args)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    c = np.empty((M, N), np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, reference(a, b))
    t = f.time(a, b, c, number=5, repeat=5)
    print(f"int8 GEMM {M}x{N}x{K}: {2 * M * N * K / t.median / 1e9:.1f} GOP/s")
