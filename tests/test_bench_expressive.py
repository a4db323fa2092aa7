"""The operators of ``benchmarks/bench_expressive.py``, declared at small sizes and built with
their default schedules, against the NumPy versions the benchmark times them with: the benchmark
compares against a reference that is itself checked, and its declarations cannot rot unseen."""
import os
import sys

import numpy as np
import pytest

from einloop import build, create_schedule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import bench_expressive as bx  # noqa: E402

RNG = np.random.default_rng(7)

CASES = {
    "argmax": (lambda: bx.declare_argmax(13, 37),
               lambda: (RNG.integers(-3, 4, (13, 37)).astype(np.float32),),
               lambda x: (np.argmax(x, axis=1), np.max(x, axis=1))),
    "cumsum_rows": (lambda: bx.declare_cumsum(11, 29, 1),
                    lambda: (RNG.standard_normal((11, 29), np.float32),),
                    lambda x: (np.cumsum(x, axis=1),)),
    "cumsum_cols": (lambda: bx.declare_cumsum(11, 29, 0),
                    lambda: (RNG.standard_normal((11, 29), np.float32),),
                    lambda x: (np.cumsum(x, axis=0),)),
    "welford": (lambda: bx.declare_welford(9, 101),
                lambda: (RNG.standard_normal((9, 101), np.float32) + np.float32(100),),
                lambda x: (np.mean(x, axis=1), np.var(x, axis=1))),
    "histogram": (lambda: bx.declare_histogram(1001, 16),
                  lambda: (RNG.integers(0, 16, 1001, dtype=np.int32),),
                  lambda x: (np.bincount(x, minlength=16).astype(np.int32),)),
    "embedding_backward": (lambda: bx.declare_embedding_backward(57, 8, 10),
                           lambda: (RNG.integers(0, 10, 57, dtype=np.int32),
                                    RNG.standard_normal((57, 8), np.float32)),
                           lambda ids, g: (bx._add_at(ids, g, 10),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_benchmark_operator_matches_its_numpy_version(name):
    declare, inputs, reference = CASES[name]
    tensors = declare()
    arrays = inputs()
    expect = reference(*arrays)
    outputs = tensors[len(arrays):]
    f = build(create_schedule(outputs), tensors)
    got = [np.full(e.shape, -1, t.dtype) for e, t in zip(expect, outputs)]
    f(*arrays, *got)
    for g, e in zip(got, expect):
        if np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_every_benchmarked_operator_has_a_case():
    assert sorted(CASES) == sorted(op.name for op in bx.OPS)
