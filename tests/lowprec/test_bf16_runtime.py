"""bfloat16 at the edges of a kernel: exported libraries (metadata, a deploy process with the
runtime alone, the C header and a C program through it) and PyTorch's bfloat16 tensors,
taken through DLPack without a copy."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from einloop import build, create_schedule, runtime, te

from bf16util import BF16, assert_same_bits, random_bf16

HAVE_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler (cc, gcc, clang) on PATH")
M, N, K = 5, 19, 7


def _kernel():
    """Z = bfloat16(X @ W + b) of bfloat16 X, W and float32 b: both conversions in one."""
    X = te.placeholder((M, K), "bfloat16", name="X")
    W = te.placeholder((K, N), "bfloat16", name="W")
    b = te.placeholder((N,), "float32", name="b")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(X[i, k].astype("float32")
                                               * W[k, j].astype("float32"), axis=k), name="Y")
    Z = te.compute((M, N), lambda i, j: (Y[i, j] + b[j]).astype("bfloat16"), name="Z")
    s = create_schedule(Z)
    s[Y].compute_at(s[Z], Z.op.axis[0])
    return build(s, [X, W, b, Z], name="dense_bf16")


def _inputs():
    return [random_bf16((M, K), seed=1), random_bf16((K, N), seed=2),
            np.linspace(-1, 1, N, dtype=np.float32)]


def _reference(x, w, bias):
    return (x.astype(np.float32) @ w.astype(np.float32) + bias).astype(BF16)


@pytest.fixture(scope="module")
def kernel():
    return _kernel()


def test_a_kernel_takes_and_fills_ml_dtypes_arrays(kernel):
    x, w, bias = _inputs()
    z = np.zeros((M, N), BF16)
    kernel(x, w, bias, z)
    np.testing.assert_allclose(z.astype(np.float32), _reference(x, w, bias).astype(np.float32),
                               rtol=2 ** -7)
    assert [p.dtype for p in kernel.signature.args] == ["bfloat16", "bfloat16", "float32",
                                                       "bfloat16"]


LOAD_AND_RUN = """
import sys, numpy as np, ml_dtypes
from einloop import runtime
folder, lib = sys.argv[1], sys.argv[2]
m = runtime.load_module(lib)
ins = [np.load(f"{folder}/in{i}.npy", allow_pickle=False) for i in range(2)]
ins = [a.view(ml_dtypes.bfloat16) for a in ins] + [np.load(f"{folder}/in2.npy")]
z = np.zeros((%d, %d), ml_dtypes.bfloat16)
m(*ins, z)
np.save(f"{folder}/out.npy", z.view(np.uint16))
assert not [x for x in sys.modules if x.startswith(("llvmlite", "einloop.codegen"))]
print("ok")
""" % (M, N)


@needs_cc
def test_an_exported_library_records_bfloat16_and_runs_in_a_deploy_process(kernel, tmp_path):
    lib = kernel.export_library(tmp_path / "dense.so")
    meta = runtime.library.read_metadata(lib)
    assert meta["schema"] == runtime.library.SCHEMA_BFLOAT16   # older runtimes refuse it
    [entry] = meta["kernels"]
    assert [a["dtype"] for a in entry["args"]] == ["bfloat16", "bfloat16", "float32", "bfloat16"]
    x, w, bias = _inputs()
    for i, a in enumerate((x.view(np.uint16), w.view(np.uint16), bias)):  # .npy: no bfloat16
        np.save(tmp_path / f"in{i}.npy", a)
    out = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(tmp_path), lib],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
    got = np.load(tmp_path / "out.npy").view(BF16)
    here = np.zeros((M, N), BF16)
    kernel(x, w, bias, here)
    assert_same_bits(got, here)


C_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "dense.h"

static uint16_t to_bf16(float f) {          /* exact for the small values used here */
    uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
int main(void) {
    uint16_t x[EINLOOP_DENSE_BF16_X_SIZE], w[EINLOOP_DENSE_BF16_W_SIZE], z[EINLOOP_DENSE_BF16_Z_SIZE];
    float b[EINLOOP_DENSE_BF16_B_SIZE];
    for (int i = 0; i < EINLOOP_DENSE_BF16_X_SIZE; i++) x[i] = to_bf16((float)(i % 5) - 2.0f);
    for (int i = 0; i < EINLOOP_DENSE_BF16_W_SIZE; i++) w[i] = to_bf16((float)(i % 3) * 0.5f);
    for (int i = 0; i < EINLOOP_DENSE_BF16_B_SIZE; i++) b[i] = 0.25f * (float)i;
    if (einloop_dense_bf16(x, w, b, z, 1) != 0) return 1;
    for (int i = 0; i < EINLOOP_DENSE_BF16_Z_SIZE; i++) printf("%.9g\n", from_bf16(z[i]));
    return 0;
}
"""


@needs_cc
def test_the_c_header_declares_bfloat16_as_uint16_and_a_c_program_runs_it(kernel, tmp_path):
    lib = kernel.export_library(tmp_path / "dense.so", header=True)
    header = (tmp_path / "dense.h").read_text()
    assert "const uint16_t *X," in header and "uint16_t *Z," in header
    assert "const float *b," in header and "/* output: bfloat16[5, 19] */" in header
    assert "bfloat16 elements are uint16_t: the top half of a float32" in header
    (tmp_path / "main.c").write_text(C_MAIN)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    exe = tmp_path / "main"
    subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-o", str(exe), str(tmp_path / "main.c"),
                    f"-I{tmp_path}", lib, f"-Wl,-rpath,{tmp_path}"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60)
    x = (np.arange(M * K) % 5 - 2.0).astype(np.float32).reshape(M, K).astype(BF16)
    w = (np.arange(K * N) % 3 * 0.5).astype(np.float32).reshape(K, N).astype(BF16)
    bias = 0.25 * np.arange(N, dtype=np.float32)
    got = np.array(out.stdout.split(), dtype=np.float32).reshape(M, N)
    np.testing.assert_array_equal(got, _reference(x, w, bias).astype(np.float32))


def test_pytorch_bfloat16_tensors_go_in_and_out_without_a_copy(kernel):
    torch = pytest.importorskip("torch")
    x, w, bias = _inputs()
    tx = torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    tw = torch.from_numpy(w.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    tz = torch.zeros((M, N), dtype=torch.bfloat16)
    kernel(tx, tw, torch.from_numpy(bias), tz)
    got = tz.view(torch.int16).numpy().view(np.uint16).view(BF16)
    want = np.zeros((M, N), BF16)
    kernel(x, w, bias, want)
    assert_same_bits(got, want)


def test_metadata_of_a_bfloat16_kernel_is_plain_json(kernel):
    from einloop.runtime.library import signature_from_json, signature_to_json
    data = json.loads(json.dumps(signature_to_json(kernel.signature)))
    assert signature_from_json(data) == kernel.signature


def test_the_runtime_knows_the_dtypes_the_compiler_makes():
    """The runtime keeps its own list (it does not import the compiler's): the same dtypes."""
    from einloop.ir import dtypes
    from einloop.runtime.signature import DTYPES, numpy_dtype
    assert set(DTYPES) == set(dtypes.SUPPORTED)
    assert all(numpy_dtype(d) == dtypes.numpy_dtype(d) for d in DTYPES)
