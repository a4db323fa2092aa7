"""examples/gemm_int8.py's hand schedule: exact on odd row counts with each AVX2 intrinsic, and
the VNNI one's instruction where the target has it."""
import os
import re
import sys

import numpy as np
import pytest

from einloop import build
from einloop.codegen.intrinsics import AVX2_S16S8, AVX2_U8S8, AVX512VNNI_U8S8

from tzutil import host_has, random_int8

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import gemm_int8  # noqa: E402


@pytest.mark.skipif(not host_has("avx2"), reason="x86-64 with AVX2 only")
@pytest.mark.parametrize("intrin", [AVX2_S16S8, AVX2_U8S8], ids=lambda t: t.name)
@pytest.mark.parametrize("M, N, K", [(37, 48, 34), (101, 32, 10)])
def test_the_hand_schedule_is_exact(intrin, M, N, K):
    s, args = gemm_int8.schedule(M, N, K, intrin)
    f = build(s, args)
    a, b = random_int8(M, N, K, seed=M)
    c = np.full((M, N), -1, np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, gemm_int8.reference(a, b))


def test_the_hand_schedule_uses_vpdpbusd_with_avx512_vnni():
    s, args = gemm_int8.schedule(12, 64, 16, AVX512VNNI_U8S8, mr=4, bn=32)
    asm = build(s, args, target="llvm -mcpu=cascadelake").get_source("asm")
    assert len(re.findall(r"\bvpdpbusd\s+[^\n]*%zmm", asm)) >= 8    # 4 rows x 2 tiles
    assert not re.search(r"\bvpmulld\b", asm)


def test_sizes_the_tiles_do_not_divide_are_refused():
    with pytest.raises(ValueError, match=r"N=40 must be a multiple of bn=16"):
        gemm_int8.schedule(8, 40, 16, AVX2_S16S8)
