"""The operators of examples/, declared as plain functions, equal their NumPy references under
the default schedule (small shapes), so auto-scheduled kernels and benchmarks compare against a
reference that is itself checked."""
import os
import sys

import numpy as np
import pytest

from einloop import build, create_schedule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import attention  # noqa: E402
import batch_matmul  # noqa: E402
import conv2d  # noqa: E402
import dense  # noqa: E402
import depthwise_conv2d  # noqa: E402
import gemm  # noqa: E402
import layer_norm  # noqa: E402
import model_ops  # noqa: E402
import softmax  # noqa: E402


def run_default(tensors, arrays):
    """Build the tensors' outputs (the last tensor) under the default schedule and run it."""
    out_t = tensors[-1]
    f = build(create_schedule(out_t), tensors)
    out = np.full([int(d) for d in out_t.shape], np.nan, np.float32)
    f(*arrays, out)
    return out


def rand(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


CASES = {
    "gemm": (lambda: gemm.gemm(19, 24, 13), lambda r: (rand(r, 19, 13), rand(r, 13, 24)),
             gemm.reference),
    "batch_matmul": (lambda: batch_matmul.batch_matmul(3, 7, 16, 9),
                     lambda r: (rand(r, 3, 7, 9), rand(r, 3, 9, 16)), batch_matmul.reference),
    "conv2d": (lambda: conv2d.conv2d(2, 3, 9, 11, 5, 3, 3, pad=1, stride=2),
               lambda r: (rand(r, 2, 3, 9, 11), rand(r, 5, 3, 3, 3)),
               lambda a, w: conv2d.reference(a, w, pad=1, stride=2)),
    "depthwise_conv2d": (lambda: depthwise_conv2d.depthwise_conv2d(2, 5, 8, 10, 3, 3, 1),
                         lambda r: (rand(r, 2, 5, 8, 10), rand(r, 5, 3, 3)),
                         lambda a, w: depthwise_conv2d.reference(a, w, 1)),
    "softmax": (lambda: softmax.softmax(7, 33), lambda r: (rand(r, 7, 33),), softmax.reference),
    "layer_norm": (lambda: layer_norm.layer_norm(6, 40),
                   lambda r: (rand(r, 6, 40), rand(r, 40), rand(r, 40)), layer_norm.reference),
    "dense_bias_gelu": (lambda: dense.dense_bias_gelu(10, 24, 17),
                        lambda r: (rand(r, 10, 17), rand(r, 17, 24), rand(r, 24)),
                        dense.reference),
    "attention": (lambda: attention.attention(12, 8),
                  lambda r: (rand(r, 12, 8), rand(r, 12, 8), rand(r, 12, 8)),
                  attention.reference),
    "swiglu": (lambda: model_ops.swiglu(5, 19, 23),
               lambda r: (rand(r, 5, 19), rand(r, 19, 23), rand(r, 19, 23)),
               model_ops.swiglu_reference),
    "causal_attention": (lambda: model_ops.causal_attention(2, 9, 4),
                         lambda r: (rand(r, 2, 9, 4), rand(r, 2, 9, 4), rand(r, 2, 9, 4)),
                         model_ops.causal_attention_reference),
    "conv2d_transpose": (lambda: model_ops.conv2d_transpose(2, 3, 5, 7, 4),
                         lambda r: (rand(r, 2, 3, 5, 7), rand(r, 3, 4, 4, 4)),
                         model_ops.conv2d_transpose_reference),
    "conv2d_transpose_k3_s3_p0": (
        lambda: model_ops.conv2d_transpose(1, 2, 4, 3, 3, kernel=3, stride=3, pad=0),
        lambda r: (rand(r, 1, 2, 4, 3), rand(r, 2, 3, 3, 3)),
        lambda a, w: model_ops.conv2d_transpose_reference(a, w, stride=3, pad=0)),
    "full_sum": (lambda: model_ops.full_sum(3, 5, 7), lambda r: (rand(r, 3, 5, 7),),
                 model_ops.full_sum_reference),
    "gemv": (lambda: model_ops.gemv(13, 29), lambda r: (rand(r, 13, 29), rand(r, 29)),
             model_ops.gemv_reference),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_operator_matches_numpy(name):
    declare, inputs, reference = CASES[name]
    tensors = declare()
    arrays = inputs(np.random.default_rng(0))
    assert len(tensors) == len(arrays) + 1, "inputs first, one output last"
    expect = reference(*arrays)
    out = run_default(tensors, arrays)
    assert out.shape == expect.shape
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)


def test_gelu_reference_is_the_tanh_form():
    """dense.reference and the declaration share one GELU formula: known values."""
    x = np.array([[1.0]], np.float32)
    got = dense.reference(x, np.eye(1, dtype=np.float32) * np.float32(2.0),
                          np.array([-2.0], np.float32))   # y = 0
    assert got[0, 0] == 0.0
    y = dense.reference(x, np.ones((1, 1), np.float32), np.zeros(1, np.float32))[0, 0]
    assert y == pytest.approx(0.8411920, abs=1e-6)        # gelu_tanh(1)


def test_default_schedules_still_declare_the_plain_functions():
    """gemm/conv2d/softmax ``default`` build the same declarations as the plain functions."""
    rng = np.random.default_rng(1)
    a, b = rand(rng, 8, 5), rand(rng, 5, 6)
    s, args = gemm.default(8, 6, 5)
    c = np.empty((8, 6), np.float32)
    build(s, args)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    x = rand(rng, 4, 16)
    s, args = softmax.default(4, 16)
    out = np.empty_like(x)
    build(s, args)(x, out)
    np.testing.assert_allclose(out, softmax.reference(x), rtol=1e-5, atol=1e-7)
