"""Small operators for the auto-scheduler's rule tests, and a helper to run a step list."""
import numpy as np

from einloop import te, create_schedule
from einloop.autotune.space.sketch import MachineModel
from einloop.autotune.space.sketch.seeds import config_from

from oracle import random_inputs, run

#: the machine the rule tests state: AVX2 (8 float lanes, 16 ymm registers) and 2 cores; the
#: values they assert are this model's, whatever the host (the schedules still run on the host,
#: which needs none of it); test_machine_matrix.py checks invariants across other machines.  Its
#: threads cost nothing (min_parallel_points=1), so that small operators show the rules' parallel
#: loops; test_machine_matrix.py checks the default threshold, under which they run serially
AVX2 = MachineModel(lanes=8, registers=16, cores=2, min_parallel_points=1)


def gemm_relu(M=16, N=24, K=12, output_gemm=False):
    """relu(A @ B + bias): the bias add is inlined, the ReLU is the GEMM's elementwise consumer."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    T = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="T")
    R = te.compute((M, N), lambda i, j: te.maximum(T[i, j], 0.0), name="R")
    outs = [C, R] if output_gemm else [R]
    return [A, B, bias], outs, lambda a, b, c: ([a @ b] if output_gemm else []) \
        + [np.maximum(a @ b + c, 0)]


def check_steps(steps, ins, outs, ref, rtol=2e-4):
    """Replay *steps* on a fresh schedule and compare with NumPy."""
    s = create_schedule(outs).apply_steps(steps)
    arrays = random_inputs(ins, positive=True)
    for g, w in zip(run(s, ins, outs, arrays), ref(*arrays)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def kinds(steps, stage=None):
    """The step kinds (values) of *steps*, of one stage if given."""
    return [st.kind.value for st in steps if stage is None or st.stage == stage]


def steps_of(sp, **wishes):
    """The steps of the config of *sp* with the given knob values (``__`` in names as ``.``)."""
    return sp.steps(config_from(sp, {k.replace("__", "."): v for k, v in wishes.items()}))
