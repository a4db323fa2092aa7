"""int8 GEMM on a tensor intrinsic against float32, in one run: u8 x s8 -> s32 (the hand schedule
of ``examples/gemm_int8.py``, on the best intrinsic the host has) and float32 (the hand schedule
of ``examples/gemm.py``, its register tile sized for the host's vectors), both exact against
NumPy, at 512^3 and 1024^3.  The calls are interleaved over rounds (the machine is shared and
noisy); the table shows each one's median rate and the int8 / float32 ratio per round's median.

Issue 26's target on a CPU with AVX2 only: int8 >= 1.5x einloop float32 (3x with VNNI).

    .venv/bin/python benchmarks/bench_int8.py [--sizes 512,1024] [--rounds 5]
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import gemm  # noqa: E402
import gemm_int8  # noqa: E402
from common import interleaved, setup_peers  # noqa: E402
from einloop import build  # noqa: E402
from einloop.codegen.target import Target  # noqa: E402


def kernels(n):
    """(int8 kernel, its arrays), (float32 kernel, its arrays), the intrinsic's name."""
    rng = np.random.default_rng(0)
    intrin = gemm_int8.pick_intrin()
    s, args = gemm_int8.schedule(n, n, n, intrin)
    f8 = build(s, args)
    a8 = rng.integers(0, 256, (n, n), dtype=np.uint8)
    b8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    c8 = np.empty((n, n), np.int32)
    f8(a8, b8, c8)
    np.testing.assert_array_equal(c8, gemm_int8.reference(a8, b8))
    wide = Target.parse("llvm").has_feature("avx512f")
    s, args = gemm.schedule(n, n, n, mr=6, bn=64 if wide else 16)
    f32 = build(s, args)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    f32(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    return (f8, (a8, b8, c8)), (f32, (a, b, c)), intrin.name


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="512,1024", help="comma-separated n of the n^3 GEMMs")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = p.parse_args(argv)
    limiter, threads, peers = setup_peers()
    print(peers)
    print(f"{'GEMM':<8} {'int8 intrinsic':<28} {'int8 GOP/s':>10} {'fp32 GFLOP/s':>12} "
          f"{'int8/fp32':>9}")
    for n in (int(x) for x in args.sizes.split(",")):
        (f8, arr8), (f32, arr32), name = kernels(n)
        t8, t32 = interleaved([lambda: f8(*arr8), lambda: f32(*arr32)], args.rounds)
        work = 2 * n ** 3 / 1e9
        ratio = statistics.median(b / a for a, b in zip(t8, t32))
        print(f"{n}^3{'':<{5 - len(str(n))}} {name:<28} {work / statistics.median(t8):10.1f} "
              f"{work / statistics.median(t32):12.1f} {ratio:8.2f}x")


if __name__ == "__main__":
    main()
