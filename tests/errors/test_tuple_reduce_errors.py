"""Misuses of tuple reducers and multi-output computes: each raises a TEError (declaration) or
ScheduleError (schedule) that says what is wrong and what would be right."""
import pytest

from einloop import te, create_schedule
from einloop.errors import ScheduleError, TEError

X = te.placeholder((8, 9), name="X")
Y = te.placeholder((8, 9), name="Y", dtype="int32")


def argmax():
    return te.comm_reducer(
        lambda x, y: (te.if_then_else(x[1] >= y[1], x[0], y[0]), te.maximum(x[1], y[1])),
        lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")


def test_combiner_returns_more_values_than_it_takes():
    three = te.comm_reducer(lambda x, y: (x[0], x[1], y[0]), lambda a, b: (0, 0), name="three")
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer three: fcombine returned 3 value\(s\) for a "
                                      r"reduction of 2 values; it takes two 2-tuples"):
        te.compute((8,), lambda i: three((k, X[i, k]), axis=k), name="T")


def test_combiner_returns_a_single_value_for_tuples():
    one = te.comm_reducer(lambda x, y: x[1] + y[1], lambda a, b: (0, 0), name="one")
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer one: fcombine returned the single value"):
        te.compute((8,), lambda i: one((k, X[i, k]), axis=k), name="T")


def test_identity_of_the_wrong_arity():
    bad = te.comm_reducer(lambda x, y: (x[0], te.maximum(x[1], y[1])), lambda a, b: (0,),
                          name="bad")
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer bad: fidentity returned 1 value\(s\) for a "
                                      r"reduction of 2 values; it takes the 2 dtypes"):
        te.compute((8,), lambda i: bad((k, X[i, k]), axis=k), name="T")


def test_identity_taking_one_dtype_for_a_tuple():
    bad = te.comm_reducer(lambda x, y: (x[0], te.maximum(x[1], y[1])), lambda dt: (0, 0),
                          name="bad")
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer bad: fidentity\(int64, float32\) failed for a "
                                      r"tuple reduction: TypeError"):
        te.compute((8,), lambda i: bad((k, X[i, k]), axis=k), name="T")


def test_a_scalar_reducer_given_a_tuple():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer sum: fcombine returned 4 value\(s\) for a "
                                      r"reduction of 2 values"):
        te.compute((8,), lambda i: te.sum((X[i, k], X[i, k]), axis=k), name="T")


def test_a_tuple_combiner_given_one_value():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer argmax: its combine\(x, y\) or identity\(dtype\) "
                                      r"failed on float32 operands"):
        te.compute((8,), lambda i: argmax()(X[i, k], axis=k), name="T")


def test_tuple_reduction_in_arithmetic():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"the tuple reduction argmax\(...\) gives 2 values and "
                                      r"cannot be used in arithmetic"):
        te.compute((8,), lambda i: argmax()((k, X[i, k]), axis=k) + 1, name="T")


def test_tuple_reduction_on_the_right_of_arithmetic():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"the tuple reduction argmax\(...\) gives 2 values"):
        te.compute((8,), lambda i: 2 * argmax()((k, X[i, k]), axis=k), name="T")


def test_component_of_a_tuple_reduction_in_arithmetic():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"compute 'T': component 1 of the tuple reduction argmax "
                                      r"is used inside an expression or alone"):
        te.compute((8,), lambda i: argmax()((k, X[i, k]), axis=k)[1] * 2.0, name="T")


def test_component_of_a_tuple_reduction_alone():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"compute 'T': component 0 of the tuple reduction argmax "
                                      r"is used inside an expression or alone"):
        te.compute((8,), lambda i: argmax()((k, X[i, k]), axis=k)[0], name="T")


def test_components_out_of_order():
    k = te.reduce_axis((0, 9), name="k")

    def body(i):
        idx, val = argmax()((k, X[i, k]), axis=k)
        return val, idx
    with pytest.raises(TEError, match=r"compute 'T': its outputs must be exactly the 2 values "
                                      r"of the tuple reduction argmax, in order"):
        te.compute((8,), body, name="T")


def test_a_tuple_reduction_mixed_with_another_reducer():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"its outputs must be exactly the 2 values of the tuple "
                                      r"reduction argmax"):
        te.compute((8,), lambda i: (*argmax()((k, X[i, k]), axis=k), te.sum(X[i, k], axis=k)),
                   name="T")


def test_multi_output_parts_with_different_reduce_axes():
    k = te.reduce_axis((0, 9), name="k")
    r = te.reduce_axis((0, 9), name="r")
    with pytest.raises(TEError, match=r"compute 'T': output 1 reduces over \(r\) but output 0 "
                                      r"over \(k\)"):
        te.compute((8,), lambda i: (te.sum(X[i, k], axis=k), te.max(X[i, r], axis=r)), name="T")


def test_multi_output_mixing_a_reduction_and_a_non_reduction():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"compute 'T': output 1 is not a reduction but output 0 "
                                      r"is"):
        te.compute((8,), lambda i: (te.sum(X[i, k], axis=k), X[i, 0]), name="T")


def test_multi_output_parts_with_different_conditions():
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"compute 'T': output 1 has the condition where="):
        te.compute((8,), lambda i: (te.sum(X[i, k], axis=k),
                                    te.max(X[i, k], axis=k, where=k > 2)), name="T")


def test_combiner_changes_a_dtype():
    bad = te.comm_reducer(lambda x, y: (x[0], (x[1] + y[1]).astype("float64")),
                          lambda a, b: (0, 0.0), name="bad")
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer bad: component 1 of fcombine has dtype float64 "
                                      r"but the value reduced there has dtype float32"):
        te.compute((8,), lambda i: bad((k, X[i, k]), axis=k), name="T")


def test_identity_of_the_wrong_dtype():
    bad = te.comm_reducer(lambda x, y: (x[0], te.maximum(x[1], y[1])),
                          lambda a, b: (te.const(0, "int32"), te.min_value(b)), name="bad")
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer bad: component 0 of fidentity has dtype int32 "
                                      r"but the value reduced there has dtype int64"):
        te.compute((8,), lambda i: bad((k, X[i, k]), axis=k), name="T")


def test_combiner_mixing_dtypes_of_two_components():
    bad = te.comm_reducer(lambda x, y: (x[0] + y[1], x[1]), lambda a, b: (0, 0.0), name="bad")
    k = te.reduce_axis((0, 9), name="k")
    with pytest.raises(TEError, match=r"reducer bad: in fcombine\(x, y\) of a tuple reduction: "
                                      r"dtype mismatch in 'x0 \+ y1': int64 \+ float32"):
        te.compute((8,), lambda i: bad((k, X[i, k]), axis=k), name="T")


def test_argmax_index_dtype_not_an_integer():
    with pytest.raises(TEError, match=r"te.argmax\(X\): the index dtype must be int32 or int64, "
                                      r"got float32"):
        te.argmax(X, axis=1, dtype="float32")


def test_argmax_axis_out_of_range():
    with pytest.raises(TEError, match=r"te.argmin\(Y\): axis must be an integer in -2..1"):
        te.argmin(Y, axis=2)


def test_rfactor_of_a_multi_output_stage_keeps_the_rules():
    idx, val = te.argmax(X, axis=1)
    s = create_schedule([idx, val])
    with pytest.raises(ScheduleError, match=r"rfactor of X.argmax: i0 is a data axis"):
        s.rfactor(val, s[val].op.axis[0])


def test_gradient_through_a_user_tuple_reducer():
    welford = te.comm_reducer(
        lambda a, b: (a[0] + b[0], a[1] + (b[1] - a[1]) * (b[0] / te.maximum(a[0] + b[0], 1.0)),
                      a[2] + b[2]), lambda t0, t1, t2: (0.0, 0.0, 0.0), name="welford")
    X = te.placeholder((4, 9), name="X")
    k = te.reduce_axis((0, 9), name="k")
    n, mean, m2 = te.compute((4,), lambda i: welford((te.const(1.0, "float32"), X[i, k],
                                                      te.const(0.0, "float32")), axis=k),
                             name="W")
    with pytest.raises(TEError, match=r"te.gradient: stage W is a tuple reduction with welford, "
                                      r"whose combine has no derivative rule here"):
        te.gradient(mean, X)


def test_gradient_of_welford_means_with_counts_that_depend_on_the_input():
    from einloop.te.tuple_builtins import welford_reducer
    X = te.placeholder((4, 9), name="X")
    k = te.reduce_axis((0, 9), name="k")
    n, mean, m2 = te.compute((4,), lambda i: welford_reducer(
        (X[i, k] * X[i, k], X[i, k], te.const(0.0, "float32")), axis=k), name="W")
    with pytest.raises(TEError, match=r"the counts of the Welford reduction W \(X\[i, k\] \* "
                                      r"X\[i, k\]\) depend on an input"):
        te.gradient(mean, X)
