"""GEMM on Intel AMX tiles, by hand: C = A @ B with u8 x s8 -> s32 (``tdpbusd``, exact) or
bf16 x bf16 -> f32 (``tdpbf16ps``), through ``s[T].tensorize`` with einloop's AMX intrinsics
(:mod:`einloop.codegen.amx`).

An AMX intrinsic computes a 32 x 32 output block (2 x 2 tiles of 16 x 16 accumulators) over a K
depth ``kb``; each tile it loads is 16 rows of 64 contiguous bytes, wherever the rows lie (the
intrinsic is given each operand's strides).  The declaration reads two copies made inside the
kernel, both plain ``te.compute`` stages, so that every tile is a dense kilobyte:

- ``PA[M/16, K/E, 16, E]``: A in tiles of 16 rows x ``E`` values (64 bytes: E = 64 int8 or
  32 bf16);
- ``PB[N/16, K/g, 16, g]``: B in the tiles' "VNNI" layout, ``g`` = 4 (int8) or 2 (bf16) k
  values of one column side by side, a 16-column panel contiguous over K.

The schedule: a 32 x 32 accumulator (``cache_write``) computed per output block, its K loop
split by ``kb``, the block's rows and columns by 16 and each ``kb`` by ``(kb/E, 16, g)``, the
intrinsic's loops tensorized (the first K block of each output block zeroes the accumulator
tiles in their registers: the intrinsic's reset form); output blocks row block by row block
(a block of PA stays in cache over the columns), the row blocks in parallel; the copies are
parallel loops of their own, outside the GEMM's.  (Column panels outside ran at a fifth to a
half of the speed on a loaded Sapphire Rapids-class machine.)

Run it (on a CPU with AMX, e.g. Sapphire Rapids; elsewhere it prints the assembly's AMX
instructions for ``llvm -mcpu=sapphirerapids``):  python examples/gemm_amx.py
"""
import sys

import numpy as np

from einloop import build, create_schedule, te
from einloop.codegen import amx
from einloop.codegen.target import Target

KINDS = {"int8": ("uint8", "int8", "int32", amx.U8S8),
         "bf16": ("bfloat16", "bfloat16", "float32", amx.BF16)}


def declare(M, N, K, kind="int8", kb=None):
    """``C = A @ B`` reading PA and PB (A and B in the AMX tiles' layouts); returns
    ``(A, B, PA, PB, C, intrin)``.  M and N must be multiples of 32, K of the K depth *kb*
    (default: 256 bytes of a row, or the deepest of the intrinsic's that divides K)."""
    a_dtype, b_dtype, c_dtype, table = KINDS[kind]
    if kb is None:
        best = 256 if kind == "int8" else 128
        kb = best if K % best == 0 else max((d for d in table if K % d == 0), default=None)
    if kb not in table or M % 32 or N % 32 or K % kb:
        raise ValueError(f"M={M} and N={N} must be multiples of 32 and K={K} of a K depth of "
                         f"the {kind} AMX intrinsics ({sorted(table)}), got kb={kb}")
    intrin = table[kb]
    g = amx.group(intrin)
    e = 16 * g                                    # K values in a 64-byte tile row
    A = te.placeholder((M, K), a_dtype, name="A")
    B = te.placeholder((K, N), b_dtype, name="B")
    PA = te.compute((M // 16, K // e, 16, e),
                    lambda x, y, z, w: A[x * 16 + z, y * e + w], name="PA")
    PB = te.compute((N // 16, K // g, 16, g),
                    lambda x, y, z, w: B[y * g + w, x * 16 + z], name="PB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(
        PA[i // 16, k // e, i % 16, k % e].astype(c_dtype)
        * PB[j // 16, k // g, j % 16, k % g].astype(c_dtype), axis=k), name="C")
    return A, B, PA, PB, C, intrin


def schedule(M, N, K, kind="int8", kb=None, rows_outer=True, panel=1):
    """The hand schedule; returns ``(s, [A, B, C])``.  *rows_outer*: row blocks outside,
    in parallel (a block of A stays in cache over the columns) instead of column panels.
    *panel* > 1: column blocks in groups of *panel*, the groups outside in parallel, then the
    row blocks, then the blocks of the group (a group of B's panels stays in cache while every
    row block passes, a block of A is reused across the group)."""
    A, B, PA, PB, C, intrin = declare(M, N, K, kind, kb)
    kb, g = amx.k_depth(intrin), amx.group(intrin)
    s = create_schedule(C)
    for P in (PA, PB):
        x, y, z, w = s[P].op.axis
        s[P].parallel(x)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 32, 32)
    if panel > 1:
        jb, jp = s[C].split(jo, factor=panel)
        order = [jb, io, jp]
    else:
        order = [io, jo] if rows_outer else [jo, io]
    s[C].reorder(*order, ii, ji)
    s[C].parallel(order[0])
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], order[-1])
    mo, no, mc, nc = s[CC].tile(*s[CC].op.axis, 32, 32)   # mo, no: one step each
    mt, mi = s[CC].split(mc, factor=16)
    nt, ni = s[CC].split(nc, factor=16)
    kt, kr = s[CC].split(s[CC].op.reduce_axis[0], factor=kb)
    ks, ke = s[CC].split(kr, factor=16 * g)
    kq, kg = s[CC].split(ke, factor=g)
    s[CC].reorder(mo, no, kt, mt, mi, nt, ni, ks, kq, kg)
    s[CC].tensorize(mt, intrin)
    return s, [A, B, C]


def random_inputs(M, N, K, kind="int8", seed=0):
    """Random A and B for *kind*: the int8 extremes included; bf16 from normal float32."""
    rng = np.random.default_rng(seed)
    if kind == "int8":
        a = rng.integers(0, 256, (M, K), dtype=np.uint8)
        b = rng.integers(-128, 128, (K, N), dtype=np.int8)
        a[0, :] = 255
        b[:, 0] = -128
        return a, b
    import ml_dtypes
    return (rng.standard_normal((M, K), dtype=np.float32).astype(ml_dtypes.bfloat16),
            rng.standard_normal((K, N), dtype=np.float32).astype(ml_dtypes.bfloat16))


def reference(a, b, kind="int8"):
    """NumPy: the int32 matmul (exact), or the float32 matmul of the bf16 inputs."""
    if kind == "int8":
        return a.astype(np.int32) @ b.astype(np.int32)
    return a.astype(np.float32) @ b.astype(np.float32)


def host_has_amx(kind="int8") -> bool:
    return bool(amx.for_target(Target.parse("llvm"), "u8s8" if kind == "int8" else "bf16"))


if __name__ == "__main__":
    M = N = K = 1024
    for kind in ("int8", "bf16"):
        s, args = schedule(M, N, K, kind)
        if not host_has_amx(kind):
            from einloop import lower
            from einloop.codegen.jit import assembly
            asm = assembly(lower(s, args), "llvm -mcpu=sapphirerapids")
            print(f"{kind}: this CPU has no AMX; for sapphirerapids the kernel has",
                  {w: asm.count(w) for w in ("ldtilecfg", "tileloadd", "tdpbusd", "tdpbf16ps")})
            continue
        f = build(s, args)
        a, b = random_inputs(M, N, K, kind)
        out = np.empty((M, N), np.int32 if kind == "int8" else np.float32)
        f(a, b, out)
        if kind == "int8":
            np.testing.assert_array_equal(out, reference(a, b, kind))
        else:
            np.testing.assert_allclose(out, reference(a, b, kind), rtol=1e-3, atol=1e-2)
        t = f.time(a, b, out, number=10, repeat=7)
        unit = "GOP/s" if kind == "int8" else "GFLOP/s"
        print(f"{kind} AMX GEMM {M}x{N}x{K}: {2 * M * N * K / t.median / 1e9:.0f} {unit}",
              file=sys.stdout)
