"""External C functions for the tests of ``te.extern``, compiled into a shared library.

They follow the convention of :mod:`einloop.te.extern`: the inputs' pointers, the output's,
then every dimension of each buffer as ``int64_t``.
"""
import shutil
import subprocess

import pytest

C_SOURCE = r"""
#include <stdint.h>
/* Y[m, n] = A[m, k] @ B[k, n]; the dimensions of A, B, then Y */
void ext_gemm(const float *a, const float *b, float *y, int64_t m, int64_t k, int64_t k2,
              int64_t n, int64_t m2, int64_t n2) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float acc = 0;
      for (int64_t p = 0; p < k; p++) acc += a[i * k + p] * b[p * n + j];
      y[i * n + j] = acc;
    }
}
/* y = 2 x + 1, elementwise over a 2-d array */
void ext_affine(const float *x, float *y, int64_t r, int64_t c, int64_t r2, int64_t c2) {
  for (int64_t i = 0; i < r * c; i++) y[i] = 2.0f * x[i] + 1.0f;
}
/* no input: y[i] = i */
void ext_iota(int32_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = (int32_t)i;
}
/* y[i] = sum_j x[i, j], in double */
void ext_rowsum(const float *x, double *y, int64_t r, int64_t c, int64_t r2) {
  for (int64_t i = 0; i < r; i++) {
    double acc = 0;
    for (int64_t j = 0; j < c; j++) acc += x[i * c + j];
    y[i] = acc;
  }
}
"""


def build_library(folder) -> str:
    """Compile :data:`C_SOURCE` into ``folder/libext.so`` with the system's C compiler (the
    calling test is skipped without one); its path."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build the external functions")
    src, out = folder / "ext.c", folder / "libext.so"
    src.write_text(C_SOURCE)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return str(out)
