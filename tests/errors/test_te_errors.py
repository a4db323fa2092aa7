"""Error suite for tensor-expression declarations (Halide's test/error, for einloop.te).

One misuse per test.  Each asserts the specific einloop error class, a distinctive part of the
message (what is wrong), and that the message names where (tensor / compute / axis) and, where
einloop offers one, what would be right.  Tests named ``test_accepts_*`` check that a near-miss
of a misuse is *not* rejected.  Misuses einloop does not catch yet are ``xfail(strict=True)``:
the test states the wanted behaviour.
"""
import re

import pytest

from einloop import create_schedule, te
from einloop.errors import TEError
from einloop.ir.expr import Compare


def mentions(excinfo, *names):
    """The error message names every one of *names* (as a whole word)."""
    msg = str(excinfo.value)
    for n in names:
        assert re.search(rf"(?<!\w){re.escape(n)}(?!\w)", msg), f"message does not name {n!r}: {msg}"


A = te.placeholder((8, 8), name="A")             # 2-D float32
B = te.placeholder((8,), name="B")               # 1-D float32
D = te.placeholder((8,), dtype="float64", name="D")
I32 = te.placeholder((8,), dtype="int32", name="I32")


def rk(n=8, name="k"):
    return te.reduce_axis((0, n), name=name)


# shapes and dtypes -------------------------------------------------------------------------------

def test_placeholder_zero_dimension():
    with pytest.raises(TEError, match=r"shape \(4, 0\) has the entry 0.*positive integer") as e:
        te.placeholder((4, 0), name="Img")
    mentions(e, "Img")


def test_placeholder_negative_dimension():
    with pytest.raises(TEError, match=r"has the entry -3.*positive integer") as e:
        te.placeholder((-3,), name="Img")
    mentions(e, "Img")


def test_placeholder_float_dimension():
    with pytest.raises(TEError, match=r"has the entry 2\.5.*positive integer") as e:
        te.placeholder((2.5, 4), name="Img")
    mentions(e, "Img")


def test_placeholder_empty_shape():
    with pytest.raises(TEError, match=r"shape is empty.*\(1,\) for a scalar") as e:
        te.placeholder((), name="Img")
    mentions(e, "Img")


def test_placeholder_shape_not_a_sequence():
    with pytest.raises(TEError, match=r"shape must be a tuple of positive integers, got None") as e:
        te.placeholder(None, name="Img")
    mentions(e, "Img")


def test_compute_zero_dimension():
    with pytest.raises(TEError, match=r"shape \(0,\) has the entry 0.*positive integer") as e:
        te.compute((0,), lambda i: B[i], name="Out")
    mentions(e, "Out")


def test_compute_float_dimension():
    with pytest.raises(TEError, match=r"has the entry 4\.0.*positive integer") as e:
        te.compute((4.0,), lambda i: B[i], name="Out")
    mentions(e, "Out")


def test_compute_empty_shape():
    with pytest.raises(TEError, match=r"shape is empty") as e:
        te.compute((), lambda: B[0], name="Out")
    mentions(e, "Out")


def test_placeholder_unsupported_dtype():
    with pytest.raises(TEError, match=r"unsupported dtype 'complex64'; use one of .*float32") as e:
        te.placeholder((4,), dtype="complex64", name="Img")
    mentions(e, "Img")


def test_astype_unsupported_dtype():
    with pytest.raises(TEError, match=r"astype: unsupported dtype 'fp8'; use one of"):
        te.compute((8,), lambda i: B[i].astype("fp8"), name="Out")


# indexing ------------------------------------------------------------------------------------------

def test_too_few_indices():
    with pytest.raises(TEError, match=r"A has 2 dimension\(s\) \(8, 8\) but was indexed with 1 "
                                      r"index\(es\); write A\[i, j\]"):
        te.compute((8,), lambda i: A[i], name="Out")


def test_too_many_indices():
    with pytest.raises(TEError, match=r"A has 2 dimension\(s\).* indexed with 3 index\(es\)"):
        te.compute((8,), lambda i: A[i, i, i], name="Out")


def test_slice_index():
    with pytest.raises(TEError, match=r"A\[\.\.\.\]: slices are not supported.*index each "
                                      r"dimension"):
        te.compute((8,), lambda i: A[i, :], name="Out")


def test_ellipsis_index():
    with pytest.raises(TEError, match=r"slices are not supported") as e:
        te.compute((8,), lambda i: A[i, ...], name="Out")
    mentions(e, "A")


def test_float_literal_index():
    with pytest.raises(TEError, match=r"of A along axis 1 has dtype float32; indices must be "
                                      r"integers"):
        te.compute((8,), lambda i: A[i, 1.5], name="Out")


def test_float_expression_index():
    with pytest.raises(TEError, match=r"index B\[i\] of A along axis 1 has dtype float32.*astype"):
        te.compute((8,), lambda i: A[i, B[i]], name="Out")


def test_constant_index_out_of_bounds():
    with pytest.raises(TEError, match=r"constant index 8 of A along axis 1 is outside 0\.\.7"):
        te.compute((8,), lambda i: A[i, 8], name="Out")


# reductions --------------------------------------------------------------------------------------

def test_reduce_axis_used_outside_its_reduction():
    k = rk()
    with pytest.raises(TEError, match=r"the reduce axis k is used outside a reduction over it.*"
                                      r"te\.sum\(\.\.\., axis=k\)") as e:
        te.compute((8,), lambda i: A[i, k], name="Out")
    mentions(e, "Out")


def test_accepts_reduction_nested_in_arithmetic():
    k = rk()
    out = te.compute((8,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="Out")
    assert [t.name for t in out.op.input_tensors] == ["Out.sum0"]


def test_min_of_a_value_and_a_reduce_axis_is_a_reduction_and_says_so():
    k, r = rk(name="k"), rk(name="r")
    with pytest.raises(TEError, match=r"te.min\(x, k\) with a reduce axis k reduce over k.*"
                                      r"te.minimum") as e:
        te.compute((8,), lambda i: te.sum(te.min(A[i, k], r), axis=k), name="Out")
    mentions(e, "Out")


def test_reduction_inside_a_reduction():
    k, r = rk(name="k"), rk(name="r")
    with pytest.raises(TEError, match=r"the reduction max over r is inside the body of the "
                                      r"reduction sum over k") as e:
        te.compute((8,), lambda i: te.sum(te.max(A[k, r], axis=r), axis=k), name="Out")
    mentions(e, "Out")


def test_variable_from_another_compute():
    leaked = []
    te.compute((8,), lambda i: leaked.append(i) or B[i], name="First")
    with pytest.raises(TEError, match=r"the variable i is not an index of this compute "
                                      r"\(its indices are j\)") as e:
        te.compute((8,), lambda j: B[leaked[0]], name="Second")
    mentions(e, "Second")


def test_reduce_axis_empty_domain():
    with pytest.raises(TEError, match=r"reduce_axis: domain \(3, 3\) must be two integers with "
                                      r"start < stop"):
        te.reduce_axis((3, 3), name="k")


def test_reduce_axis_reversed_domain():
    with pytest.raises(TEError, match=r"domain \(5, 2\) must be two integers with start < stop"):
        te.reduce_axis((5, 2), name="k")


def test_reduce_axis_zero_extent():
    with pytest.raises(TEError, match=r"domain \(0, 0\) must be two integers with start < stop"):
        te.reduce_axis(0, name="k")


def test_reduce_axis_float_bound():
    with pytest.raises(TEError, match=r"domain \(0, 2\.5\) must be two integers"):
        te.reduce_axis((0, 2.5), name="k")


def test_reduce_axis_malformed_domain():
    with pytest.raises(TEError, match=r"domain must be \(start, stop\) or an extent, got "
                                      r"\(0, 2, 3\)"):
        te.reduce_axis((0, 2, 3), name="k")


def test_sum_axis_is_a_data_index():
    with pytest.raises(TEError, match=r"te\.sum: axis i is not a reduction axis; create it with "
                                      r"te\.reduce_axis"):
        te.compute((8,), lambda i: te.sum(A[i, i], axis=i), name="Out")


def test_sum_axis_is_an_int():
    with pytest.raises(TEError, match=r"te\.sum: axis 3 is not a reduction axis"):
        te.compute((8,), lambda i: te.sum(A[i, 0], axis=3), name="Out")


def test_sum_axis_empty():
    with pytest.raises(TEError, match=r"te\.sum: axis= is empty"):
        te.compute((8,), lambda i: te.sum(A[i, 0], axis=[]), name="Out")


def test_sum_axis_listed_twice():
    k = rk()
    with pytest.raises(TEError, match=r"te\.sum: an axis is listed twice") as e:
        te.compute((8,), lambda i: te.sum(A[i, k], axis=[k, k]), name="Out")
    mentions(e, "k")


def test_sum_without_axis():
    k = rk()
    with pytest.raises(TEError, match=r"te\.sum.*axis="):
        te.compute((8,), lambda i: te.sum(A[i, k]), name="Out")


def test_max_without_axis():
    k = rk()
    with pytest.raises(TEError, match=r"te\.max needs axis= to reduce, or two operands"):
        te.compute((8,), lambda i: te.max(A[i, k]), name="Out")


def test_reduce_a_boolean():
    k = rk()
    with pytest.raises(TEError, match=r"te\.sum: cannot reduce a boolean expression.*astype"):
        te.compute((8,), lambda i: te.sum(A[i, k] > 0.0, axis=k), name="Out")


def test_reduction_where_is_not_a_condition():
    k = rk()
    with pytest.raises(TEError, match=r"te\.sum: where= must be a condition, got int64"):
        te.compute((8,), lambda i: te.sum(A[i, k], axis=k, where=k), name="Out")


def test_true_division_on_reduce_axis():
    k = rk()
    with pytest.raises(TEError, match=r"'/' on integers.*'//'"):
        te.compute((8,), lambda i: te.sum(A[i, k / 2], axis=k), name="Out")


def test_accepts_reduce_axis_compared_with_eq():
    k = rk()
    out = te.compute((8,), lambda i: te.sum(A[i, k], axis=k, where=(k == 0)), name="Out")
    assert isinstance(out.op.body.condition, Compare)


# bounds ------------------------------------------------------------------------------------------

def test_read_out_of_bounds_past_the_end():
    with pytest.raises(TEError, match=r"compute 'Out' reads B\[i \+ 1\] out of bounds: index "
                                      r"i \+ 1 along axis 0 of B reaches up to 8.*valid 0\.\.7.*"
                                      r"te\.if_then_else"):
        te.compute((8,), lambda i: B[i + 1], name="Out")


def test_read_out_of_bounds_before_the_start():
    # held until the compute is used: te.scan may accept it on its state (te/deferred.py)
    out = te.compute((8,), lambda i: B[i - 1], name="Out")
    with pytest.raises(TEError, match=r"reads B\[i - 1\] out of bounds.*reaches down to -1") as e:
        create_schedule(out)
    mentions(e, "Out")


def test_read_before_the_start_of_a_computed_tensor_is_refused_at_once():
    Twice = te.compute((8,), lambda i: B[i] * 2, name="Twice")
    with pytest.raises(TEError, match=r"reads Twice\[i - 1\] out of bounds.*down to -1") as e:
        te.compute((8,), lambda i: Twice[i - 1], name="Out")
    mentions(e, "Out")


def test_read_out_of_bounds_in_a_reduction():
    k = rk()
    with pytest.raises(TEError, match=r"reads A\[i, k \+ 1\] out of bounds.*axis 1 of A reaches "
                                      r"up to 8") as e:
        te.compute((8,), lambda i: te.sum(A[i, k + 1], axis=k), name="Out")
    mentions(e, "Out")


def test_read_out_of_bounds_in_the_unguarded_branch():
    # the guard protects the wrong branch: where i >= 7, B[i + 1] is always out of bounds
    with pytest.raises(TEError, match=r"reads B\[i \+ 1\] out of bounds") as e:
        te.compute((8,), lambda i: te.if_then_else(i < 7, 0.0, B[i + 1]), name="Out")
    mentions(e, "Out")


def test_accepts_guarded_read():
    out = te.compute((8,), lambda i: te.if_then_else(i < 7, B[i + 1], 0.0), name="Out")
    assert out.shape == (8,)


def test_accepts_guarded_padding_2d():
    pad = te.compute((10, 10), lambda i, j: te.if_then_else(
        te.all(i >= 1, i < 9, j >= 1, j < 9), A[i - 1, j - 1], 0.0), name="Pad")
    assert pad.shape == (10, 10)


# dtypes and operators ----------------------------------------------------------------------------

def test_dtype_mismatch_float32_float64():
    with pytest.raises(TEError, match=r"dtype mismatch in 'B\[i\] \+ D\[i\]': float32 \+ float64.*"
                                      r"astype\('float32'\)"):
        te.compute((8,), lambda i: B[i] + D[i], name="Out")


def test_dtype_mismatch_float_tensor_and_index_var():
    with pytest.raises(TEError, match=r"dtype mismatch in 'B\[i\] \+ i': float32 \+ int64.*cast "
                                      r"one side explicitly"):
        te.compute((8,), lambda i: B[i] + i, name="Out")


def test_true_division_on_ints():
    with pytest.raises(TEError, match=r"'/' on integers \(I32\[i\] / .*\) is ambiguous; use '//'"):
        te.compute((8,), lambda i: I32[i] / 2, name="Out")


def test_true_division_on_index_var():
    with pytest.raises(TEError, match=r"'/' on integers \(i / 2\) is ambiguous; use '//'"):
        te.compute((8,), lambda i: B[i / 2], name="Out")


def test_floor_division_on_floats():
    with pytest.raises(TEError, match=r"'//' is only defined for integers here, got float32 "
                                      r"\(B\[i\] // .*\); use '/'"):
        te.compute((8,), lambda i: B[i] // 2.0, name="Out")


def test_modulo_on_floats():
    with pytest.raises(TEError, match=r"'%' is only defined for integers here, got float32"):
        te.compute((8,), lambda i: B[i] % 2.0, name="Out")


def test_float_literal_meets_int_expression():
    with pytest.raises(TEError, match=r"the float literal 1\.5 meets an int32 expression"):
        te.compute((8,), lambda i: I32[i] + 1.5, name="Out")


def test_arithmetic_on_booleans():
    with pytest.raises(TEError, match=r"arithmetic '\+' on a boolean expression \(i > 2\)"):
        te.compute((8,), lambda i: (i > 2) + (i > 3), name="Out")


def test_expression_in_python_if():
    with pytest.raises(TEError, match=r"the expression i > 2 has no truth value.*"
                                      r"te\.if_then_else"):
        te.compute((8,), lambda i: B[i] if i > 2 else 0.0, name="Out")


def test_expression_in_python_and():
    with pytest.raises(TEError, match=r"has no truth value.*operators & and \|"):
        te.compute((8,), lambda i: te.if_then_else(i > 2 and i < 5, B[i], 0.0), name="Out")


def test_chained_comparison():
    with pytest.raises(TEError, match=r"has no truth value.*chained comparisons"):
        te.compute((8,), lambda i: te.if_then_else(2 < i < 5, B[i], 0.0), name="Out")


def test_logical_and_on_non_boolean():
    with pytest.raises(TEError, match=r"'and' needs boolean operands, got i of dtype int64"):
        te.compute((8,), lambda i: te.if_then_else((i > 2) & i, B[i], 0.0), name="Out")


def test_if_then_else_condition_not_boolean():
    with pytest.raises(TEError, match=r"if_then_else: the condition i has dtype int64; it must be "
                                      r"a comparison"):
        te.compute((8,), lambda i: te.if_then_else(i, B[i], 0.0), name="Out")


def test_if_then_else_branch_dtypes_differ():
    with pytest.raises(TEError, match=r"dtype mismatch in .*float32 if_then_else float64"):
        te.compute((8,), lambda i: te.if_then_else(i > 0, B[i], D[i]), name="Out")


def test_exp_of_int_tensor():
    with pytest.raises(TEError, match=r"te\.exp\(I32\[i\]\): exp needs a float argument, got "
                                      r"int32; cast with \.astype\('float32'\)"):
        te.compute((8,), lambda i: te.exp(I32[i]), name="Out")


def test_exp_of_index_var():
    with pytest.raises(TEError, match=r"te\.exp\(i\): exp needs a float argument, got int64"):
        te.compute((8,), lambda i: te.exp(i), name="Out")


def test_string_in_expression():
    with pytest.raises(TEError, match=r"cannot use 'a' \(str\) in an expression"):
        te.compute((8,), lambda i: B[i] + "a", name="Out")


# the compute function ----------------------------------------------------------------------------

def test_lambda_has_too_few_indices():
    with pytest.raises(TEError, match=r"compute 'Out': the function takes 1 index argument\(s\) "
                                      r"but the shape has 2 dimension\(s\); write lambda i, j"):
        te.compute((8, 8), lambda i: A[i, i], name="Out")


def test_lambda_has_too_many_indices():
    with pytest.raises(TEError, match=r"compute 'Out': the function takes 2 index argument\(s\) "
                                      r"but the shape has 1 dimension\(s\); write lambda i:"):
        te.compute((8,), lambda i, j: A[i, j], name="Out")


def test_fcompute_not_callable():
    with pytest.raises(TEError, match=r"compute 'Out': fcompute must be a function of the "
                                      r"indices, got 3"):
        te.compute((8,), 3, name="Out")


def test_compute_returns_an_empty_tuple():
    # a tuple of expressions declares a multi-output compute (tests/te/test_multi_output.py)
    with pytest.raises(TEError, match=r"compute 'Out': the function returned an empty tuple"):
        te.compute((8,), lambda i: (), name="Out")


def test_compute_returns_none():
    with pytest.raises(TEError, match=r"cannot use None \(NoneType\) in an expression"):
        te.compute((8,), lambda i: None, name="Out")


def test_compute_returns_a_whole_tensor():
    with pytest.raises(TEError, match=r"tensor B used as a scalar: index it"):
        te.compute((8,), lambda i: B, name="Out")


def test_arithmetic_on_a_whole_tensor():
    with pytest.raises(TEError, match=r"arithmetic on the tensor B itself is not defined; index it "
                                      r"inside te\.compute"):
        B + 1.0


# einsum ------------------------------------------------------------------------------------------

M84 = te.placeholder((8, 4), name="M84")
M64 = te.placeholder((8, 8), dtype="float64", name="M64")


def test_einsum_too_few_operands():
    with pytest.raises(TEError, match=r"einsum 'ij,jk->ik' names 2 operand\(s\) but 1 tensor\(s\) "
                                      r"were given"):
        te.einsum("ij,jk->ik", A)


def test_einsum_too_many_operands():
    with pytest.raises(TEError, match=r"einsum 'ij->ij' names 1 operand\(s\) but 2 tensor\(s\)"):
        te.einsum("ij->ij", A, A)


def test_einsum_subscript_rank_mismatch():
    with pytest.raises(TEError, match=r"operand A has 2 dimension\(s\) but its subscript 'ijk' "
                                      r"names 3"):
        te.einsum("ijk,jk->ik", A, A)


def test_einsum_extent_mismatch():
    with pytest.raises(TEError, match=r"einsum 'ij,jk->ik': index 'j' has extent 4 .*but 8") as e:
        te.einsum("ij,jk->ik", M84, A)
    mentions(e, "A")


def test_einsum_extent_mismatch_names_both_operands():
    with pytest.raises(TEError, match=r"index 'j' has extent 4 in M84 but 8 in A"):
        te.einsum("ij,jk->ik", M84, A)


def test_einsum_mixed_dtypes():
    with pytest.raises(TEError, match=r"einsum 'ij,jk->ik': operands mix dtypes float32 and "
                                      r"float64; cast them"):
        te.einsum("ij,jk->ik", A, M64)


def test_einsum_digit_as_index():
    with pytest.raises(TEError, match=r"einsum 'i1,jk->ik': '1' is not an axis letter"):
        te.einsum("i1,jk->ik", A, A)


def test_einsum_bad_output_letter():
    with pytest.raises(TEError, match=r"einsum 'ij,jk->i_': '_' is not an axis letter"):
        te.einsum("ij,jk->i_", A, A)


def test_einsum_ellipsis():
    with pytest.raises(TEError, match=r"ellipsis \('\.\.\.'\) is not supported; name every axis"):
        te.einsum("...j,jk->...k", A, A)


def test_einsum_repeated_output_index():
    with pytest.raises(TEError, match=r"einsum 'ij,jk->ii': the output 'ii' repeats an index"):
        te.einsum("ij,jk->ii", A, A)


def test_einsum_output_index_not_in_inputs():
    with pytest.raises(TEError, match=r"einsum 'ij,jk->iz': output index 'z' appears in no "
                                      r"operand"):
        te.einsum("ij,jk->iz", A, A)


def test_einsum_two_arrows():
    with pytest.raises(TEError, match=r"more than one '->'"):
        te.einsum("ij->j->i", A)


def test_einsum_subscripts_not_a_string():
    with pytest.raises(TEError, match=r"einsum: the first argument must be the subscripts string"):
        te.einsum(A, A)


def test_einsum_operand_not_a_tensor():
    with pytest.raises(TEError, match=r"einsum: operands must be einloop tensors, got 3"):
        te.einsum("ij->i", 3)


# user-defined reducers ---------------------------------------------------------------------------

def test_comm_reducer_non_callables():
    with pytest.raises(TEError, match=r"comm_reducer\(fcombine, fidentity\): both arguments must "
                                      r"be callables"):
        te.comm_reducer(1, 0)


def test_comm_reducer_identity_not_callable():
    with pytest.raises(TEError, match=r"both arguments must be callables"):
        te.comm_reducer(lambda x, y: x + y, 0)


def test_comm_reducer_combine_changes_dtype():
    widen = te.comm_reducer(lambda x, y: (x + y).astype("float64"), lambda dt: 0, name="widen")
    k = rk()
    with pytest.raises(TEError, match=r"reducer widen: combine returned dtype float64 for float32 "
                                      r"operands"):
        te.compute((8,), lambda i: widen(A[i, k], axis=k), name="Out")


def test_comm_reducer_combine_wrong_arity():
    with pytest.raises(TEError, match=r"comm_reducer 'unary': .*two"):
        te.comm_reducer(lambda x: x, lambda dt: 0, name="unary")


def test_comm_reducer_identity_not_a_number():
    bad = te.comm_reducer(lambda x, y: x + y, lambda dt: "zero", name="strid")
    k = rk()
    with pytest.raises(TEError, match=r"'zero'"):
        te.compute((8,), lambda i: bad(A[i, k], axis=k), name="Out")
