"""te.dag.ComputeDAG: order, consumers and the classifications the auto-scheduler rules use,
on the operator zoo; flop counts against closed formulas."""
import pytest

from einloop import te
from einloop.errors import TEError
from einloop.te.dag import ComputeDAG
from einloop.schedule import create_schedule
from ops import ZOO, EINSUMS, einsum


def dag_of(name, **kw):
    ins, outs, _ = ZOO[name](**kw)
    return ComputeDAG(outs), {t.name: t for t in ins + outs}


def names(ops):
    return [op.name for op in ops]


def kinds(dag):
    return {op.name: dag.kinds(op) for op in dag.ops}


def test_gemm():
    M, N, K = 37, 45, 29
    dag, t = dag_of("gemm", M=M, N=N, K=K)
    assert names(dag.ops) == ["A", "B", "C"]
    assert dag.inputs == (t["A"], t["B"]) and dag.outputs == (t["C"],)
    assert names(dag.consumers(t["A"])) == ["C"] and dag.consumers(t["C"]) == ()
    assert names(dag.producers(t["C"])) == ["A", "B"]
    C = t["C"]
    assert dag.is_reduction(C) and dag.has_data_reuse(C) and dag.is_output(C)
    assert not dag.is_injective(C) and not dag.is_inlinable(C)
    assert dag.is_placeholder(t["A"]) and not dag.is_injective(t["A"])
    assert not dag.has_data_reuse(t["A"]) and not dag.is_inlinable(t["A"])
    assert dag.flop_count(C) == dag.flop_count() == 2 * M * N * K
    assert dag.flop_count(t["A"]) == 0


def test_batched_matmul_and_transposed_matmul():
    dag, t = dag_of("batch_matmul", Bt=3, M=17, N=20, K=13)
    assert kinds(dag)["C"] == ("reduction", "data reuse", "output")
    assert dag.flop_count() == 2 * 3 * 17 * 20 * 13
    dag, t = dag_of("matmul_transposed", M=33, N=19, K=24)
    assert dag.has_data_reuse(t["C"]) and dag.flop_count() == 2 * 33 * 19 * 24


def test_conv2d_with_padding():
    N, C, H, W, K, R, S, pad, stride = 1, 5, 11, 13, 7, 3, 3, 1, 2
    dag, t = dag_of("conv2d")
    # the walk goes depth first through Out's reads in order: Pad (with A) before W
    assert names(dag.ops) == ["A", "Pad", "W", "Out"]
    assert names(dag.inputs) == ["A", "W"]
    pad_op, out = t["Out"].op.input_tensors[0], t["Out"]
    assert names(dag.consumers(pad_op)) == ["Out"] and names(dag.consumers(t["A"])) == ["Pad"]
    assert dag.is_injective(pad_op) and dag.is_inlinable(pad_op)
    assert not dag.is_strictly_inlinable(pad_op)            # a branch (if_then_else)
    assert not dag.has_data_reuse(pad_op) and not dag.is_reduction(pad_op)
    assert dag.is_reduction(out) and dag.has_data_reuse(out) and not dag.is_inlinable(out)
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    assert dag.flop_count(pad_op) == 0                       # a select of a load: no arithmetic
    assert dag.flop_count() == 2 * N * K * Ho * Wo * C * R * S


def test_depthwise_conv_reuses_but_pooling_does_not():
    dag, t = dag_of("depthwise_conv", C=6, H=10, W=9, R=3, pad=1)
    assert dag.has_data_reuse(t["Out"])                       # the weights miss y and x
    assert dag.flop_count() == 2 * 6 * 10 * 9 * 3 * 3
    dag, t = dag_of("max_pool", C=4, H=12, W=10, P=2, stride=2)
    assert dag.is_reduction(t["Out"]) and not dag.has_data_reuse(t["Out"])
    assert dag.flop_count() == 4 * 6 * 5 * 2 * 2             # one max per window element


def test_softmax():
    M, N = 9, 35
    dag, t = dag_of("softmax", M=M, N=N)
    assert names(dag.ops) == ["X", "Mx", "E", "S", "Out"]
    assert names(dag.consumers(t["X"])) == ["Mx", "E"]
    assert kinds(dag) == {
        "X": ("placeholder",),
        "Mx": ("reduction",),                                 # a row max: no reuse
        "E": ("injective", "inlinable"),                      # exp is dear to recompute
        "S": ("reduction",),
        "Out": ("injective", "output"),
    }
    E_op = dag.ops[2]
    assert names(dag.consumers(E_op)) == ["S", "Out"] and dag.elementwise_consumer(E_op) is None
    # max per element; sub and exp per element; add per element; divide per element
    assert dag.flop_count() == M * N + 2 * M * N + M * N + M * N


def test_row_sum_has_no_reuse():
    X = te.placeholder((64, 128), name="X")
    k = te.reduce_axis((0, 128), name="k")
    S = te.compute((64,), lambda i: te.sum(X[i, k], axis=k), name="S")
    dag = ComputeDAG(S)
    assert dag.is_reduction(S) and not dag.has_data_reuse(S)
    assert dag.flop_count() == 64 * 128
    dag, t = dag_of("multi_axis_reduce")
    assert not any(dag.has_data_reuse(op) for op in dag.ops)
    assert dag.is_output(t["S"]) and dag.is_output(t["Mx"])
    assert dag.flop_count() == 2 * 5 * 3 * 6 * 7


def test_layer_norm():
    M, N = 7, 40
    dag, t = dag_of("layer_norm", M=M, N=N)
    assert names(dag.ops) == ["X", "Sum", "Var", "gamma", "beta", "Out"]
    assert [dag.is_reduction(op) for op in dag.compute_ops] == [True, True, False]
    assert not any(dag.has_data_reuse(op) for op in dag.ops)
    # Sum: N adds; Var: (2 subs + 2 divides + 1 mul + add) per element; Out: 8 per element
    assert dag.flop_count() == M * N + M * N * 6 + M * N * 8


def test_elementwise_chain():
    N, M = 50, 23
    dag, t = dag_of("elementwise_chain", N=N, M=M)
    assert names(dag.ops) == ["X", "Y", "T1", "T2", "Out"]
    T1, T2 = dag.ops[2], dag.ops[3]
    assert all(dag.is_injective(op) for op in dag.compute_ops)
    assert not any(dag.is_reduction(op) or dag.has_data_reuse(op) for op in dag.ops)
    assert dag.is_inlinable(T1) and dag.is_inlinable(T2) and not dag.is_inlinable(t["Out"])
    assert not dag.is_strictly_inlinable(T1)                 # tanh and sigmoid
    assert dag.elementwise_consumer(T1) is T2
    assert dag.elementwise_consumer(T2) is t["Out"].op
    # T1: tanh, sigmoid, *; T2: -, abs, exp, *, +, log, +; Out: sqrt, pow, +, max, erf, -
    assert dag.flop_count() == N * M * (3 + 7 + 6)


def test_strictly_inlinable_elementwise_and_broadcast_not_transpose():
    A = te.placeholder((8, 16), name="A")
    b = te.placeholder((16,), name="b")
    Bias = te.compute((8, 16), lambda i, j: A[i, j] + b[j], name="Bias")
    Shift = te.compute((8, 15), lambda i, j: Bias[i, j + 1] * 2.0, name="Shift")
    T = te.compute((15, 8), lambda j, i: Shift[i, j], name="T")
    Relu = te.compute((15, 8), lambda i, j: te.maximum(T[i, j], 0.0), name="Relu")
    dag = ComputeDAG(Relu)
    assert dag.is_strictly_inlinable(Bias)                    # elementwise with a broadcast
    assert dag.is_strictly_inlinable(Shift)                   # an axis plus a constant
    assert dag.is_inlinable(T) and not dag.is_strictly_inlinable(T)   # a transpose
    assert not dag.is_inlinable(Relu) and not dag.is_strictly_inlinable(Relu)
    assert dag.elementwise_consumer(Bias) is None             # Shift reads j + 1, not j
    assert dag.elementwise_consumer(T) is Relu.op
    assert kinds(dag)["Bias"] == ("injective", "strictly inlinable")


def test_reduction_output_of_data_reuse_fused_consumer():
    A = te.placeholder((16, 8), name="A")
    B = te.placeholder((8, 12), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((16, 12), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    R = te.compute((16, 12), lambda i, j: te.maximum(C[i, j], 0.0), name="R")
    dag = ComputeDAG([R])
    assert dag.elementwise_consumer(C) is R.op and not dag.is_output(C)
    assert dag.has_data_reuse(C) and not dag.is_inlinable(C)  # a reduction is never inlined
    assert dag.flop_count(C) == 2 * 16 * 12 * 8 and dag.flop_count(R) == 16 * 12


def test_index_math_and_conditions_are_not_flops():
    A = te.placeholder((10,), name="A")
    k = te.reduce_axis((0, 10), name="k")
    S = te.compute((10,), lambda i: te.sum(A[(i + k) % 10] * 3.0, axis=k, where=k < i + 1),
                   name="S")
    G = te.compute((10,), lambda i: te.if_then_else(i > 2, S[i].astype("float64"),
                                                    te.const(0.0, "float64")), name="G")
    dag = ComputeDAG(G)
    assert dag.flop_count(S) == 10 * 10 * 2                  # the multiply and the add
    assert dag.flop_count(G) == 0                            # compare, select and cast


@pytest.mark.parametrize("subscripts, shapes", EINSUMS)
def test_einsum_classification(subscripts, shapes):
    ins, outs, _ = einsum(subscripts, shapes)
    dag = ComputeDAG(outs)
    (out,) = outs
    reduces = dag.is_reduction(out)
    assert dag.is_injective(out) != reduces
    reuse = {"ij,jk->ik", "bij,bjk->bik", "ij,j->i", "ik,kj"}
    assert dag.has_data_reuse(out) == (subscripts in reuse)


def test_order_matches_the_schedule_stages():
    for name, make in ZOO.items():
        ins, outs, _ = make()
        s = create_schedule(outs)
        assert [st.origin_op for st in s.stages] == list(ComputeDAG(outs).ops), name


def test_shared_producer_visited_once_and_outputs_deduplicated():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((4,), lambda i: B[i] + B[3 - i], name="C")
    D = te.compute((4,), lambda i: B[i] - C[i], name="D")
    dag = ComputeDAG([D, C, D])
    assert names(dag.ops) == ["A", "B", "C", "D"]
    assert dag.outputs == (D, C)
    assert names(dag.consumers(B)) == ["C", "D"] and names(dag.producers(D)) == ["B", "C"]
    assert dag.is_output(C) and not dag.is_inlinable(C) and dag.is_inlinable(B)
    assert len(dag.reads(C)) == 2
    assert dag.flop_count() == 4 + 4 + 4                     # B and C counted once each


def test_deep_chain_has_no_recursion_limit():
    def add_one(t, n):
        return te.compute((2,), lambda i: t[i] + 1.0, name=f"T{n}")
    t = te.placeholder((2,), name="X")
    for n in range(3000):
        t = add_one(t, n)
    dag = ComputeDAG(t)
    assert len(dag.ops) == 3001 and dag.flop_count() == 2 * 3000


def test_immutable_and_errors():
    dag, t = dag_of("gemm")
    with pytest.raises(AttributeError, match="immutable"):
        dag.ops = ()
    other = te.placeholder((3,), name="Z")
    with pytest.raises(TEError, match="Z is not an operation of this DAG"):
        dag.consumers(other)
    with pytest.raises(TEError, match="non-empty list of tensors"):
        ComputeDAG([])
    with pytest.raises(TEError, match="list of tensors"):
        ComputeDAG(3)


def test_str_is_one_line_per_op():
    dag, _ = dag_of("gemm", M=4, N=5, K=6)
    assert str(dag) == (
        "A = placeholder((4, 6), float32)\n"
        "B = placeholder((6, 5), float32)\n"
        "C[i, j] = sum(A[i, k] * B[k, j], axis=[k])    # (4, 5) float32, k in 0..6; reduction; "
        "data reuse; output; 240 flop")
    assert repr(dag) == "ComputeDAG(C: 3 ops, 2 inputs)"
