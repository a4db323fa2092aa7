"""What one core's AMX unit does at best on this machine: the 2 x 2 block of einloop's AMX
intrinsics (4 accumulator tiles, 2 A and 2 B tiles loaded per K step) with every tile in the
level-1 cache, called in a loop of its own so that no call overhead counts, at its best
moment of about a second.  A GEMM cannot beat it (its tiles come from further away);
bench_lowprec prints it beside the tuned kernels so that a target above it reads as a property
of the machine.

    .venv/bin/python benchmarks/amx_ceiling.py
"""
import ctypes
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from einloop.codegen import amx  # noqa: E402
from einloop.codegen.jit import jit_compile_ir  # noqa: E402
from einloop.runtime import amx as amx_runtime  # noqa: E402

#: K steps of one call of the intrinsic (its A and B tiles: 2 x 8 KB, in a 48 KB L1 cache),
#: and calls per timed run
STEPS, CALLS = 8, 4000


def _module(intrin) -> str:
    """LLVM IR: ``run(tiles, out, n)`` calls *intrin*'s reset form *n* times on the same
    L1-resident tiles, each a dense kilobyte."""
    e = amx.k_depth(intrin) // STEPS            # K values in a 64-byte row
    tile = 16 * e                               # elements of a tile
    strides = {"out": (512, 32, 16),            # [2, 16, 2, 16]: a dense 32 x 32 block
               "a": (STEPS * tile, e, tile),    # [2, 16, STEPS, e]: tile (ti, ks)
               "b": (2 * tile, e, tile)}        # [STEPS, 16, 2, e]: tile (ks, tj)
    args = []
    for name in ("out", "a", "b"):
        args.append(f"ptr %{name}")
        args += [f"i64 {x}" for x in strides[name]]
    return "\n".join([
        *intrin.declarations, intrin.reset_definition,
        "define void @run(ptr %tiles, ptr %out, i64 %n) {",
        "entry:",
        "  %slot = alloca ptr",
        "  store ptr %tiles, ptr %slot",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %loop]",
        # read through a volatile load each call: the same call on the same tiles would
        # otherwise be loop-invariant, and LLVM would run it once
        "  %a = load volatile ptr, ptr %slot",
        f"  %b = getelementptr i8, ptr %a, i64 {2 * 1024 * STEPS}",
        f'  call void @"{intrin.reset_symbol}"({", ".join(args)})',
        "  %i1 = add i64 %i, 1",
        "  %d = icmp eq i64 %i1, %n",
        "  br i1 %d, label %exit, label %loop",
        "exit:",
        "  ret void",
        "}"])


def per_core(kind) -> float | None:
    """G(FL)OP/s of one core at the ceiling for *kind* ("int8" or "bf16"), or None where this
    process cannot run AMX."""
    table = amx.U8S8 if kind == "int8" else amx.BF16
    if not amx.for_target("llvm", "u8s8" if kind == "int8" else "bf16") \
            or amx_runtime.request() is not None:
        return None
    intrin = table[STEPS * (64 if kind == "int8" else 32)]
    _engine, address = jit_compile_ir(_module(intrin), "run", f"amx_ceiling_{kind}")
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)
    # A's and B's tiles (2 KB a step each) of random values: AMX treats bf16 subnormals as
    # zero, and zeros run faster than data, so bf16 tiles hold normal numbers
    rng = np.random.default_rng(0)
    if kind == "int8":
        tiles = rng.integers(0, 256, 4 * 1024 * STEPS).astype(np.uint8)
    else:
        import ml_dtypes
        tiles = rng.standard_normal(2 * 1024 * STEPS).astype(ml_dtypes.bfloat16).view(np.uint8)
    out = np.zeros(1024, np.float32)                        # 32 x 32 results
    run(tiles.ctypes.data, out.ctypes.data, 10)
    # the best run of about a second: on a shared host the tile unit's rate can change from
    # one moment to the next (another tenant's work on the same physical core)
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < 1.0:
        t0 = time.perf_counter()
        run(tiles.ctypes.data, out.ctypes.data, CALLS)
        best = min(best, time.perf_counter() - t0)
    return CALLS * 2 * 32 * 32 * amx.k_depth(intrin) / best / 1e9


if __name__ == "__main__":
    for kind in ("int8", "bf16"):
        rate = per_core(kind)
        print(f"AMX {kind}: " + ("not on this machine" if rate is None else
                                 f"{rate:.0f} G{'' if kind == 'int8' else 'FL'}OP/s per core"))
