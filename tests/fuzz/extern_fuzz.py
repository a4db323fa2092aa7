"""The C functions of the fuzzer's ``te.extern`` stages, compiled once into a cached library.

``fuzz_affine_<f32|f64>_<rank>(x, y, dims of x, dims of y)`` computes ``y = 2 x + 1`` over a
C-contiguous array of that rank, following einloop's extern convention (the pointers, then each
buffer's dimensions as ``int64_t``).  This module uses only the standard library: reproducers
embed its source so that they stay standalone.
"""
import hashlib
import os
import shutil
import subprocess
import tempfile


def _c_source():
    out = ["#include <stdint.h>"]
    for suffix, ctype in (("f32", "float"), ("f64", "double")):
        for rank in (1, 2, 3):
            dims = [f"int64_t d{k}" for k in range(rank)] + [f"int64_t e{k}" for k in range(rank)]
            size = " * ".join(f"d{k}" for k in range(rank))
            out.append(f"void fuzz_affine_{suffix}_{rank}(const {ctype} *x, {ctype} *y, "
                       f"{', '.join(dims)}) {{\n"
                       f"  for (int64_t i = 0; i < {size}; i++) y[i] = 2 * x[i] + 1;\n}}")
    return "\n".join(out) + "\n"


C_SOURCE = _c_source()


def symbol(dtype, rank):
    """The name of the function for an array of *dtype* (float32/float64) and *rank*."""
    return f"fuzz_affine_{'f32' if dtype == 'float32' else 'f64'}_{rank}"


def library():
    """The path of the compiled library (built on first use, shared by processes)."""
    tag = hashlib.sha256(C_SOURCE.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"einloop_fuzz_extern_{tag}.so")
    if os.path.exists(path):
        return path
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler for the fuzzer's external functions")
    folder = tempfile.mkdtemp(prefix="einloop_fuzz_extern_")
    src, out = os.path.join(folder, "ext.c"), os.path.join(folder, "ext.so")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, src], check=True)
    os.replace(out, path)                  # atomic: a concurrent worker sees all or nothing
    return path
