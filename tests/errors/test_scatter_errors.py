"""Error suite for scatters (te.scatter_reduce and the operators on it) and their schedules.

One misuse per test, each with its specific einloop error class and a distinctive part of the
message; ``test_accepts_*`` tests check that a near-miss is accepted.
"""
import pytest

from einloop import te, create_schedule
from einloop.errors import ScheduleError, TEError

IDS = te.placeholder((20,), "int32", name="ids")
X = te.placeholder((20,), "float32", name="X")
DY = te.placeholder((20, 6), "float32", name="dY")


def rk(n=20, name="j"):
    return te.reduce_axis((0, n), name=name)


def embedding_grad():
    return te.embedding_backward(IDS, DY, 9, name="G")


# declarations -------------------------------------------------------------------------------------

def test_index_tuple_of_the_wrong_length():
    j = rk()
    with pytest.raises(TEError, match=r"scatter 'S'.*target index has 1 expression.*output has "
                                      r"2 dimension"):
        te.scatter_reduce((9, 6), lambda: ((IDS[j],), X[j]), axis=j, name="S")


def test_non_integer_index():
    j = rk()
    with pytest.raises(TEError, match=r"target index X\[j\] of dimension 0 has dtype float32.*"
                                      r"must be integers"):
        te.scatter_reduce((9,), lambda: ((X[j],), X[j]), axis=j, name="S")


def test_value_dtype_disagrees_with_the_output():
    j = rk()
    with pytest.raises(TEError, match=r"value X\[j\] has dtype float32 but the output's is "
                                      r"int32.*astype"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X[j]), axis=j, dtype="int32", name="S")


def test_a_number_value_needs_a_dtype():
    j = rk()
    with pytest.raises(TEError, match=r"value 1 is a Python number; give the output's dtype="):
        te.scatter_reduce((9,), lambda: ((IDS[j],), 1), axis=j, name="S")


def test_init_that_the_dtype_cannot_hold():
    j = rk()
    with pytest.raises(TEError, match=r"init=1.5 is not a int32 value"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), 1), axis=j, dtype="int32", init=1.5)


def test_free_axis_that_is_not_a_whole_index():
    j = rk()
    with pytest.raises(TEError, match=r"free axis d indexes no dimension.*belongs in the "
                                      r"reduction domain"):
        te.scatter_reduce((9, 7), lambda d: ((IDS[j], d + 1), DY[j, d]), axis=j)


def test_free_axis_indexing_two_dimensions():
    j = rk()
    with pytest.raises(TEError, match=r"free axis d indexes dimensions \[1, 2\]"):
        te.scatter_reduce((9, 6, 6), lambda d: ((IDS[j], d, d), DY[j, d]), axis=j)


def test_missing_domain():
    j = rk()
    with pytest.raises(TEError, match=r"axis= is missing: give the reduction domain"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X[j]))


def test_domain_that_is_not_a_reduce_axis():
    with pytest.raises(TEError, match=r"axis 3 is not a reduction axis.*te.reduce_axis"):
        te.scatter_reduce((9,), lambda: ((IDS[0],), X[0]), axis=3)


def test_variable_outside_the_free_axes_and_the_domain():
    j, k = rk(), rk(name="k")
    with pytest.raises(TEError, match=r"variable k is neither a free axis.*axis= \(the "
                                      r"reduction domain: j\)"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X[k]), axis=j, name="S")


def test_update_that_is_not_a_pair():
    j = rk()
    with pytest.raises(TEError, match=r"fupdate must return \(index, value\)"):
        te.scatter_reduce((9,), lambda: IDS[j], axis=j)


def test_reducer_that_is_not_a_reducer():
    j = rk()
    with pytest.raises(TEError, match=r"reducer must be te.sum, te.max, te.min or a "
                                      r"te.comm_reducer"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X[j]), reducer=max, axis=j)


def test_where_that_is_not_a_condition():
    j = rk()
    with pytest.raises(TEError, match=r"where= must be a condition"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X[j]), axis=j, where=X[j])


def test_data_independent_index_certainly_out_of_bounds():
    j = rk()
    with pytest.raises(TEError, match=r"scatter 'S' writes out of bounds: its target index "
                                      r"j \+ 5.*reaches 24 \(at j=19\).*extent 20"):
        te.scatter_reduce((20,), lambda: ((j + 5,), X[j]), axis=j, name="S")


def test_accepts_a_data_independent_index_the_condition_keeps_inside():
    j = rk()
    S = te.scatter_reduce((20,), lambda: ((j + 5,), X[j]), axis=j, where=j < 15, name="S")
    assert S.shape == (20,)


def test_symbolic_output_shape():
    n = te.var("n")
    j = rk()
    with pytest.raises(TEError, match=r"output shape \(n,\) has a symbolic extent"):
        te.scatter_reduce((n,), lambda: ((IDS[j],), X[j]), axis=j)


def test_histogram_of_floats():
    with pytest.raises(TEError, match=r"histogram 'histogram': data must be an integer tensor"):
        te.histogram(X, 10)


def test_histogram_without_bins():
    with pytest.raises(TEError, match=r"bins must be a positive integer, got 0"):
        te.histogram(IDS, 0)


def test_scatter_add_updates_of_the_wrong_shape():
    with pytest.raises(TEError, match=r"updates has shape \(20, 6\).*needs \(20, 5\)"):
        te.scatter_add((9, 5), IDS, DY, axis=0)


def test_scatter_add_with_a_2d_index():
    with pytest.raises(TEError, match=r"index must be a 1-D integer tensor"):
        te.scatter_add((9, 6), DY, DY, axis=0)


def test_embedding_backward_grad_of_the_wrong_shape():
    with pytest.raises(TEError, match=r"grad must have the ids' shape \(20,\) plus the feature"):
        te.embedding_backward(IDS, te.placeholder((19, 6), name="g"), 9)


# schedules ----------------------------------------------------------------------------------------

def test_parallel_domain_loop():
    G = embedding_grad()
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"parallel on stage G: b0 is a loop of the "
                                            r"scatter's domain.*s.rfactor\(G, ro\)"):
        s[G].parallel(s[G].op.reduce_axis[0])


def test_vectorize_domain_loop():
    G = embedding_grad()
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"vectorize on stage G: b0 is a loop of the "
                                            r"scatter's domain.*vectorize a free axis \(d\)"):
        s[G].vectorize(s[G].op.reduce_axis[0])


def test_accepts_parallel_and_vector_free_axes():
    G = embedding_grad()
    s = create_schedule(G)
    do, di = s[G].split(s[G].op.axis[0], factor=4)
    s[G].parallel(do)
    s[G].vectorize(di)


def test_rfactor_of_a_free_axis():
    G = embedding_grad()
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"rfactor of the scatter G: d is a free axis, which "
                                            r"needs no privatization"):
        s.rfactor(G, s[G].op.axis[0])


def test_rfactor_of_the_only_domain_loop():
    G = embedding_grad()
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"b0 is its only domain loop.*split it first"):
        s.rfactor(G, s[G].op.reduce_axis[0])


def test_rfactor_of_a_scatter_with_factor_axis():
    G = embedding_grad()
    s = create_schedule(G)
    bo, bi = s[G].split(s[G].op.reduce_axis[0], nparts=2)
    with pytest.raises(ScheduleError, match=r"private copies are the first dimension of G.rf; "
                                            r"factor_axis must be 0"):
        s.rfactor(G, bo, factor_axis=1)


def test_rfactor_of_a_scatter_after_an_annotation():
    G = embedding_grad()
    s = create_schedule(G)
    bo, bi = s[G].split(s[G].op.reduce_axis[0], nparts=2)
    s[G].vectorize(s[G].op.axis[0])
    with pytest.raises(ScheduleError, match=r"loop d is already vectorized; annotate the loops "
                                            r"after rfactor"):
        s.rfactor(G, bo)


def test_rfactor_of_a_scatter_after_splitting_a_free_axis():
    G = embedding_grad()
    s = create_schedule(G)
    bo, bi = s[G].split(s[G].op.reduce_axis[0], nparts=2)
    s[G].split(s[G].op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match=r"a free axis was already split or fused"):
        s.rfactor(G, bo)


def test_compute_at_of_a_scatter():
    G = embedding_grad()
    O = te.compute((9, 6), lambda v, d: G[v, d] * 2.0, name="O")
    s = create_schedule(O)
    with pytest.raises(ScheduleError, match=r"compute_at on stage G: G is a scatter.*compute "
                                            r"it at the root"):
        s[G].compute_at(s[O], s[O].op.axis[0])


def test_cache_write_of_a_scatter():
    G = embedding_grad()
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"cache_write on stage G: G is a scatter"):
        s.cache_write(G)


def test_cache_read_for_a_scatter_reader():
    G = embedding_grad()
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"cache_read on stage G: G is a scatter, whose "
                                            r"reads this primitive cannot redirect"):
        s.cache_read(DY, "local", [G])


def test_storage_order_of_a_scatter():
    G = embedding_grad()
    O = te.compute((9, 6), lambda v, d: G[v, d] * 2.0, name="O")
    s = create_schedule(O)
    with pytest.raises(ScheduleError, match=r"storage_order on stage G: G is a scatter"):
        s[G].storage_order(s[G].op.axis[0])


def test_gradient_through_a_max_scatter():
    j = rk()
    S = te.scatter_reduce((9,), lambda: ((IDS[j],), X[j] * X[j]), te.max, axis=j, name="S")
    with pytest.raises(TEError, match=r"te.gradient: stage S is a scatter combining its updates "
                                      r"with max; .*Only sum scatters \(te.scatter_add"):
        te.gradient(S, [X])


def test_domain_axis_listed_twice():
    j = rk()
    with pytest.raises(TEError, match=r"an axis is listed twice in axis="):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X[j]), axis=[j, j])


def test_update_function_with_star_args():
    j = rk()
    with pytest.raises(TEError, match=r"fupdate takes \*args; name each free axis"):
        te.scatter_reduce((9,), lambda *a: ((IDS[j],), X[j]), axis=j)


def test_init_that_is_an_expression():
    j = rk()
    with pytest.raises(TEError, match=r"init= must be a number, got the expression"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X[j]), axis=j, init=X[0])


def test_value_that_is_a_whole_tensor():
    j = rk()
    with pytest.raises(TEError, match=r"the value is the tensor X; index it"):
        te.scatter_reduce((9,), lambda: ((IDS[j],), X), axis=j, dtype="float32")


def test_scatter_add_along_a_missing_axis():
    with pytest.raises(TEError, match=r"axis must be a dimension of the output, 0..1, got 2"):
        te.scatter_add((9, 6), IDS, DY, axis=2)


def test_histogram_weights_of_another_shape():
    with pytest.raises(TEError, match=r"weights must be a tensor of the data's shape \(20,\)"):
        te.histogram(IDS, 4, weights=DY)


def test_embedding_backward_of_float_ids():
    with pytest.raises(TEError, match=r"ids must be an integer tensor"):
        te.embedding_backward(X, DY, 9)


def test_embedding_backward_padding_idx_that_is_not_an_int():
    with pytest.raises(TEError, match=r"padding_idx must be an int or None, got 1.5"):
        te.embedding_backward(IDS, DY, 9, padding_idx=1.5)


def test_scatter_add_updates_of_another_symbolic_length():
    n, m = te.var("n"), te.var("m")
    ids = te.placeholder((n,), "int32", name="ids")
    U = te.placeholder((m, 3), name="U")
    with pytest.raises(TEError, match=r"updates has shape \(m, 3\), but an output of shape "
                                      r"\(4, 3\) scattered along axis 0 by n indices needs "
                                      r"\(n, 3\)"):
        te.scatter_add((4, 3), ids, U)


def test_histogram_weights_of_another_symbolic_length():
    n, m = te.var("n"), te.var("m")
    X = te.placeholder((n,), "int32", name="X")
    with pytest.raises(TEError, match=r"weights must be a tensor of the data's shape \(n,\)"):
        te.histogram(X, 4, weights=te.placeholder((m,), name="W"))


def test_embedding_backward_grad_of_another_symbolic_batch():
    b, c = te.size_var("b"), te.size_var("c")
    ids = te.placeholder((b, 2), "int32", name="ids")
    with pytest.raises(TEError, match=r"grad must have the ids' shape \(b, 2\) plus the feature "
                                      r"dimension, got \(c, 2, 5\)"):
        te.embedding_backward(ids, te.placeholder((c, 2, 5), name="G"), 7)
