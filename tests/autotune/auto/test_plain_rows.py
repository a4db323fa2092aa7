"""The plain schedule (the untuned fallback and every candidate's reference) of a product of
rows, ``Y = X @ W.T`` with W stored out-by-in as PyTorch stores a linear layer's weight:
vectorized along the reduction, whose loads are contiguous, not along the output's last axis,
whose loads of W would be gathers."""
import numpy as np
import pytest

from rule_ops import AVX2, kinds
from einloop import build, create_schedule, te
from einloop.autotune.space.sketch import MachineModel, generate_space

AVX512 = MachineModel(lanes=16, registers=32, cores=4, min_parallel_points=1)


def linear_torch_layout(n, k, m):
    X = te.placeholder((n, k), name="X")
    W = te.placeholder((m, k), name="W")
    r = te.reduce_axis((0, k), name="r")
    Y = te.compute((n, m), lambda i, j: te.sum(X[i, r] * W[j, r], axis=r), name="Y")
    return [X, W], Y, lambda x, w: x @ w.T


def scores(b, s, d):
    Q = te.placeholder((b, s, d), name="Q")
    K = te.placeholder((b, s, d), name="K")
    r = te.reduce_axis((0, d), name="r")
    S = te.compute((b, s, s), lambda h, i, j: te.sum(Q[h, i, r] * K[h, j, r], axis=r), name="S")
    return [Q, K], S, lambda q, kk: q @ kk.transpose(0, 2, 1)


def gemm(n, k, m):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B], C, lambda a, b: a @ b


def run_default(machine, ins, out, ref):
    sp = generate_space(out, machine)
    steps = sp.default_steps()
    s = create_schedule(out).apply_steps(steps)
    f = build(s, [*ins, out])
    rng = np.random.default_rng(0)
    arrays = [rng.random(tuple(int(d) for d in t.shape), dtype=np.float32) - 0.5 for t in ins]
    y = np.full(tuple(int(d) for d in out.shape), np.nan, np.float32)
    f(*arrays, y)
    np.testing.assert_allclose(y, ref(*arrays), rtol=1e-4, atol=1e-4)
    return steps, f


@pytest.mark.parametrize("machine", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("case", [
    lambda: linear_torch_layout(1, 256, 96),
    lambda: linear_torch_layout(7, 200, 33),        # a reduction that is no multiple of lanes
    lambda: linear_torch_layout(64, 128, 256),
    lambda: scores(2, 24, 64),
], ids=["batch1", "odd", "batch64", "attention_scores"])
def test_rows_are_reduced_in_vector_lanes_with_no_gather(machine, case):
    ins, out, ref = case()
    steps, f = run_default(machine, ins, out, ref)
    assert "rfactor" in kinds(steps)
    rf = f"{out.name}.rf"
    vectorized = [st for st in steps if st.kind.value == "vectorize"]
    assert [st.stage for st in vectorized] == [rf], steps
    assert "@llvm.masked.gather" not in f.get_source("llvm")


def test_a_gemm_whose_last_axis_loads_contiguously_keeps_its_plain_schedule():
    ins, out, ref = gemm(16, 64, 48)
    steps, _ = run_default(AVX2, ins, out, ref)
    assert "rfactor" not in kinds(steps)
    assert [st.stage for st in steps if st.kind.value == "vectorize"] == ["C"]


def test_a_short_reduction_keeps_its_plain_schedule():
    ins, out, ref = linear_torch_layout(4, 12, 40)      # 12 < two vectors of 8
    steps, _ = run_default(AVX2, ins, out, ref)
    assert "rfactor" not in kinds(steps)


def test_a_transposed_weight_inlined_into_the_product_is_seen_through():
    """A transpose stage (``permute``, as PyTorch's graphs have it) inlined into the product:
    the product reads the weight row by row, so it is reduced in lanes too."""
    X = te.placeholder((8, 256), name="X")
    W = te.placeholder((96, 256), name="W")
    T = te.compute((256, 96), lambda a, b: W[b, a], name="T")
    r = te.reduce_axis((0, 256), name="r")
    Y = te.compute((8, 96), lambda i, j: te.sum(X[i, r] * T[r, j], axis=r), name="Y")
    steps, f = run_default(AVX2, [X, W], Y, lambda x, w: x @ w.T)
    assert "rfactor" in kinds(steps) and "@llvm.masked.gather" not in f.get_source("llvm")


@pytest.mark.parametrize("machine", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_rows_of_w_are_reduced_side_by_side_in_blocks(machine):
    """Where the rows of W (the output's last axis) come in multiples of PLAIN_INTERLEAVE and
    another data loop runs outside them, the lanes are reduced for a block of rows at a time:
    one load of X serves the block, each row its own chain of adds (one multiply-add per row
    and lane vector in the loop over the reduction); a row count that is no multiple keeps one
    row at a time.  Both compute X @ W.T."""
    from einloop.autotune.space.sketch.apply import PLAIN_INTERLEAVE
    ins, out, ref = linear_torch_layout(5, 64, 8 * PLAIN_INTERLEAVE)
    steps, f = run_default(machine, ins, out, ref)
    rf = f"{out.name}.rf"
    assert any(st.kind.value == "unroll" and st.stage == rf for st in steps), steps
    ins, out, ref = linear_torch_layout(5, 64, 8 * PLAIN_INTERLEAVE + 1)
    steps, f = run_default(machine, ins, out, ref)
    assert not any(st.kind.value == "unroll" and st.stage == f"{out.name}.rf" for st in steps)
