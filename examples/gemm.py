"""GEMM, C = A @ B, float32: the declaration and a hand schedule for AVX-512 CPUs.

The schedule follows the classic recipe: pack B into column panels ``PB[N/bn, K, bn]`` so the
inner loop reads it contiguously; accumulate a ``mr x bn`` tile of C in registers (a cache_write
stage computed at the tile loop, rows unrolled, columns vectorized: 6 x 64 floats is 24 of the 32
AVX-512 registers); run column panels on all cores, so that each core keeps its panel of B in
its L2 cache while it sweeps the rows of A.

Tune it from the command line: ``gemm`` (the plain declaration) is auto-scheduled with no
template, ``gemm_template`` is the tunable template (registered as "gemm"):

    einloop tune examples/gemm.py:gemm --args 1024 1024 1024 --trials 200
    einloop tune examples/gemm.py:gemm_template --args 1024 1024 1024 --trials 200

Run it:  python examples/gemm.py
"""
import numpy as np

from einloop import te, create_schedule, build, autotune


def declare(M, N, K, bn=32, dtype="float32", pack_b=True):
    """C[i, j] = sum_k A[i, k] * B[k, j], reading B through a packed copy PB (or directly)."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    if not pack_b:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return A, B, None, C
    nb = -(-N // bn)
    PB = te.compute((nb, K, bn),
                    lambda x, y, z: te.if_then_else(x * bn + z < N, B[y, x * bn + z], 0.0),
                    name="PB")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * PB[j // bn, k, j % bn], axis=k),
                   name="C")
    return A, B, PB, C


def schedule(M, N, K, mr=6, bn=64, ku=4, parallel_panels=True, pack_b=True, unroll_rows=True,
             rows_inside_k=True):
    """The hand schedule: packed B, a register-blocked mr x bn micro-kernel, panels in parallel.

    The other choices (no packing, rows not unrolled, rows outside the k loop) exist for the
    tuner: they are what a less careful schedule does, and cost a lot.
    """
    A, B, PB, C = declare(M, N, K, bn, pack_b=pack_b)
    s = create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, mr, bn)
    if parallel_panels:
        s[C].reorder(jo, io, ii, ji)
        s[C].parallel(jo)
        s[CC].compute_at(s[C], io)
    else:
        s[C].parallel(io)
        s[CC].compute_at(s[C], jo)
    s[C].vectorize(ji)
    mc, nc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=ku)
    s[CC].reorder(*((ko, ki, mc, nc) if rows_inside_k else (mc, ko, ki, nc)))
    s[CC].unroll(ki)
    if unroll_rows:
        s[CC].unroll(mc)
    s[CC].vectorize(nc)
    if PB is not None:
        x, y, z = s[PB].op.axis
        s[PB].vectorize(z)
        s[PB].parallel(x)
    return s, [A, B, C]


@autotune.template("gemm")
def gemm_template(M, N, K):
    """The tunable GEMM: panel width, micro-kernel rows, k unrolling, the parallel loop, and
    whether to pack B, unroll the rows and keep the rows inside the k loop.  Panel widths divide
    N, so every panel read stays contiguous."""
    cfg = autotune.get_config()
    cfg.define_split("tile_n", N, num_outputs=2, policy="factors",
                     filter=lambda e: 16 <= e.size[-1] <= 128 and e.size[-1] % 16 == 0)
    cfg.define_split("tile_m", M, num_outputs=2,
                     candidate=[[-1, m] for m in range(1, 17) if m <= M])
    cfg.define_split("tile_k", K, num_outputs=2, policy="power2", max_factor=8)
    cfg.define_knob("parallel_panels", [True, False])
    cfg.define_knob("pack_b", [True, False])
    cfg.define_knob("unroll_rows", [True, False])
    cfg.define_knob("rows_inside_k", [True, False])
    return schedule(M, N, K, mr=cfg["tile_m"].size[-1], bn=cfg["tile_n"].size[-1],
                    ku=cfg["tile_k"].size[-1], parallel_panels=cfg["parallel_panels"].val,
                    pack_b=cfg["pack_b"].val, unroll_rows=cfg["unroll_rows"].val,
                    rows_inside_k=cfg["rows_inside_k"].val)


def gemm(M, N, K):
    """The plain declaration, C = A @ B, as a function returning its tensors [A, B, C] (inputs
    first, output last): what ``autotune.auto_schedule(gemm(M, N, K), ...)`` schedules without
    a template."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def default(M, N, K):
    """The plain declaration under the default schedule."""
    A, B, C = gemm(M, N, K)
    return create_schedule(C), [A, B, C]


def reference(a, b):
    """NumPy's matmul (BLAS)."""
    return a @ b


if __name__ == "__main__":
    M = N = K = 1024
    s, args = schedule(M, N, K)
    f = build(s, args)
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    c = np.empty((M, N), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    t = f.time(a, b, c, number=5, repeat=5)
    print(f"GEMM {M}x{N}x{K}: {2 * M * N * K / t.median / 1e9:.1f} GFLOP/s")
