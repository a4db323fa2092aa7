"""Small templates for the tuning tests (importable by name from worker processes)."""
from einloop import te, create_schedule, autotune


@autotune.template("tiny_matmul")
def tiny_matmul(M, N, K):
    cfg = autotune.get_config()
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    i, j = s[C].op.axis
    cfg.define_split("tile_i", i, num_outputs=2, policy="power2")
    cfg.define_split("tile_j", j, num_outputs=2, policy="power2")
    cfg.define_knob("vectorize", [True, False])
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, s[C].op.reduce_axis[0], ii, ji)
    if cfg["vectorize"].val:
        s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]
