"""bfloat16 on AArch64: the same integer widening and rounding, vectorized with NEON (``shll``
in, ``uzp2`` out), compiled here; run under qemu-aarch64 against ml_dtypes where Debian's cross
toolchain and qemu-user are installed (``.ci/run`` installs them)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.codegen.export import export_object, kernel_symbol

from bf16util import BF16, assert_same_bits, hard_float32, random_float32

AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
SYSROOT = "/usr/aarch64-linux-gnu"
CROSS_CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
N = 1031


def _kernel():
    """R = X rounded to bfloat16; S = H widened, doubled (float32)."""
    X = te.placeholder((N,), "float32", name="X")
    H = te.placeholder((N,), "bfloat16", name="H")
    R = te.compute((N,), lambda i: X[i].astype("bfloat16"), name="R")
    S = te.compute((N,), lambda i: H[i].astype("float32") * 2.0, name="S")
    s = create_schedule([R, S])
    for t in (R, S):
        s[t].vectorize(s[t].split(t.op.axis[0], factor=8)[1])
    return build(s, [X, H, R, S], target=AARCH64, name="bf16_a64")


def test_bfloat16_compiles_to_neon_vectors():
    asm = _kernel().get_source("asm")
    assert "uzp2\tv" in asm and ".8h" in asm        # eight rounded halves kept in one go
    assert "shll\tv" in asm or "shll2\tv" in asm     # 16 -> 32 bits, to the top half


DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
extern int32_t %(symbol)s(void *, void *, void *, void *, int32_t);
static float x[%(n)d], s[%(n)d];
static uint16_t h[%(n)d], r[%(n)d];
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    if (!f || fread(x, 4, %(n)d, f) != %(n)d || fread(h, 2, %(n)d, f) != %(n)d) return 3;
    fclose(f);
    if (%(symbol)s(x, h, r, s, 1) != 0) return 4;
    f = fopen(argv[2], "wb");
    fwrite(r, 2, %(n)d, f);
    fwrite(s, 4, %(n)d, f);
    return fclose(f);
}
"""


@pytest.mark.skipif(not (CROSS_CC and QEMU and os.path.isdir(SYSROOT)),
                    reason="needs Debian's AArch64 cross toolchain and qemu-user")
def test_bfloat16_on_aarch64_rounds_and_widens_as_ml_dtypes(tmp_path):
    k = _kernel()
    obj = export_object([k], tmp_path / "k.o")
    (tmp_path / "main.c").write_text(DRIVER % {"symbol": kernel_symbol(k.name), "n": N})
    cc = subprocess.run([CROSS_CC, "-O1", "-o", str(tmp_path / "run"), str(tmp_path / "main.c"),
                         str(obj)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    x = np.concatenate([hard_float32(), random_float32(N - len(hard_float32()), seed=3)])
    h = np.random.default_rng(4).integers(0, 2 ** 16, N, dtype=np.uint64).astype(np.uint16)
    (tmp_path / "in.bin").write_bytes(x.tobytes() + h.tobytes())
    run = subprocess.run([QEMU, "-L", SYSROOT, str(tmp_path / "run"), str(tmp_path / "in.bin"),
                          str(tmp_path / "out.bin")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    data = (tmp_path / "out.bin").read_bytes()
    r = np.frombuffer(data[:2 * N], np.uint16).view(BF16)
    s = np.frombuffer(data[2 * N:], np.float32)
    assert_same_bits(r, x.astype(BF16))
    want = h.view(BF16).astype(np.float32) * np.float32(2)
    finite = ~np.isnan(want)                 # a NaN times 2 is a NaN (its payload the CPU's)
    assert_same_bits(s[finite], want[finite])
    assert np.isnan(s[~finite]).all()
