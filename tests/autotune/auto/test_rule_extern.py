"""The auto-scheduler on operators with an external stage (``te.extern``): the stage is left as
it is (no knob, no step), its producers stay materialized at the root, its neighbours are still
tuned, and random configs of the space compute what NumPy computes."""
import random

import numpy as np
import pytest

from einloop import te
from einloop.autotune.space.sketch import generate_space
from einloop.autotune.space.sketch.analysis import Role
from extern_lib import build_library
from rule_ops import AVX2, check_steps


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_library(tmp_path_factory.mktemp("extern_auto"))


def gemm_extern_relu(lib, M=16, N=24, K=12):
    """A tiled GEMM whose only reader is the external call, then an elementwise output."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    Y = te.extern((M, N), [C], "ext_affine", library=lib, name="Y")
    Z = te.compute((M, N), lambda i, j: te.maximum(Y[i, j], 0.0), name="Z")
    return [A, B], [Z], lambda a, b: [np.maximum(2 * (a @ b) + 1, 0)]


def extern_softmax(lib, M=9, N=21, K=12):
    """GEMM + bias (fused), the call, then a softmax over its rows (flexible, row stages)."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    T = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="T")
    Y = te.extern((M, N), [T], "ext_affine", library=lib, name="Y")
    U = te.compute((M, N), lambda i, j: te.exp(Y[i, j] * 0.1), name="U")
    r = te.reduce_axis((0, N), name="r")
    S = te.compute((M,), lambda i: te.sum(U[i, r], axis=r), name="S")
    Z = te.compute((M, N), lambda i, j: U[i, j] / S[i], name="Z")

    def ref(a, b, c):
        u = np.exp((2 * (a @ b + c) + 1) * 0.1)
        return [u / u.sum(axis=1, keepdims=True)]
    return [A, B, bias], [Z], ref


def extern_output(lib, M=10, N=13):
    """The call is the output; its producer is a row reduction, then an elementwise stage."""
    A = te.placeholder((M, N), name="A")
    r = te.reduce_axis((0, N), name="r")
    S = te.compute((M,), lambda i: te.max(A[i, r], axis=r), name="S")
    P = te.compute((M, N), lambda i, j: A[i, j] - S[i], name="P")
    Y = te.extern((M, N), [P], "ext_affine", library=lib, name="Y")
    return [A], [Y], lambda a: [2 * (a - a.max(axis=1, keepdims=True)) + 1]


OPERATORS = {"gemm_extern_relu": gemm_extern_relu, "extern_softmax": extern_softmax,
             "extern_output": extern_output}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_default_steps_match_numpy(lib, name):
    ins, outs, ref = OPERATORS[name](lib)
    check_steps(generate_space(outs, AVX2).default_steps(), ins, outs, ref, rtol=1e-3)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_random_configs_match_numpy(lib, name, seed):
    """Two configs drawn at random per seed (each test stays short: every config compiles)."""
    ins, outs, ref = OPERATORS[name](lib)
    sp = generate_space(outs, AVX2)
    rng = random.Random(f"{name}{seed}")
    for _ in range(2):
        steps = sp.steps(rng.randrange(len(sp.config_space)))
        assert all(st.stage != "Y" for st in steps)         # the call has nothing to schedule
        check_steps(steps, ins, outs, ref, rtol=1e-3)


def test_extern_stage_is_left_alone_and_neighbours_tuned(lib):
    _, outs, _ = gemm_extern_relu(lib)
    sp = generate_space(outs, AVX2)
    an = sp.analysis
    facts = {f.name: f for f in an.stages()}
    assert "Y" not in facts                       # not a compute stage: no facts, no knobs
    assert facts["C"].role is Role.TILED and facts["C"].fused_into is None  # read by the call
    assert all(not k.startswith("Y.") for k in sp.config_space.knobs)
    assert any(k.startswith("C.tile") for k in sp.config_space.knobs)
    assert any(k.startswith("Z.") for k in sp.config_space.knobs)


def test_producers_of_the_call_are_never_inlined_or_moved(lib):
    """T (GEMM + bias) feeds the call: it stays at the root in every config, while the GEMM C
    before it may still be computed inside T's tiles."""
    _, outs, _ = extern_softmax(lib)
    sp = generate_space(outs, AVX2)
    rng = random.Random(1)
    for _ in range(20):
        steps = sp.steps(rng.randrange(len(sp.config_space)))
        assert not [st for st in steps if st.stage == "T"
                    and st.kind.value in ("compute_inline", "compute_at")]


def test_task_whose_output_is_the_call(lib):
    """An operator whose output is the external stage is a task like any other: its
    candidates schedule the stages before the call."""
    import einloop
    from einloop.autotune.task.auto import AutoTask
    ins, outs, ref = extern_output(lib)
    task = AutoTask.of_tensors(ins + outs)
    assert task.name == "Y"
    # the reference and the space's last config (the space's size depends on the machine:
    # 4 configs with AVX-512 lanes, more with AVX2)
    for candidate in (None, len(task.config_space) - 1):
        s, tensors = task.instantiate_reference() if candidate is None \
            else task.instantiate(candidate)
        a = np.random.default_rng(0).uniform(-1, 1, (10, 13)).astype("float32")
        y = np.zeros((10, 13), "float32")
        einloop.build(s, tensors)(a, y)
        np.testing.assert_allclose(y, ref(a)[0], rtol=1e-5, atol=1e-5)
