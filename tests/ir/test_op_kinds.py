"""Operator kinds are enums: nodes hold members, builders accept a member or its symbol, the printer
writes the symbol, and a left-over comparison with a string fails loudly."""
import pickle

import pytest

from einloop.errors import InternalError
from einloop.ir import BinOp, CmpOp, LogicOp
from einloop.ir import expr as E

i, j = E.Var("i"), E.Var("j")


def test_operators_build_nodes_holding_enum_members():
    assert (i + 1).op is BinOp.ADD and (i // 2).op is BinOp.FLOORDIV and (i % 2).op is BinOp.MOD
    assert (i < j).op is CmpOp.LT and (i != j).op is CmpOp.NE
    assert ((i < j) & (j < 3)).op is LogicOp.AND and ((i < j) | (j < 3)).op is LogicOp.OR


def test_builders_accept_a_member_or_its_symbol():
    assert E.binary("max", i, j).op is BinOp.MAX
    assert E.binary(BinOp.MAX, i, j).op is BinOp.MAX
    assert E.compare(">=", i, 1).op is CmpOp.GE
    assert E.logical("or", i < 1, j < 1).op is LogicOp.OR
    with pytest.raises(InternalError, match="not a BinOp"):
        E.binary("**", i, j)


def test_comparing_an_operator_with_a_string_is_an_internal_error():
    with pytest.raises(InternalError, match="compared with the string"):
        BinOp.ADD == "+"                                    # noqa: B015
    with pytest.raises(InternalError):
        (i + 1).op in ("+", "-")                            # noqa: B015
    assert BinOp.ADD in {BinOp.ADD: 1} and BinOp.ADD != BinOp.SUB and BinOp.MAX != CmpOp.LT


def test_text_is_the_symbol():
    assert [str(op) for op in BinOp] == ["+", "-", "*", "/", "//", "%", "max", "min", "tdiv",
                                          "tmod"]
    assert f"{CmpOp.LE}" == "<=" and LogicOp.AND.symbol == "and"
    tm = E.Binary(BinOp.TMOD, i, E.const(4), "int64")
    assert str(E.binary("max", i - j * 2, tm) // 3 < 5) == "max(i - j * 2, tmod(i, 4)) // 3 < 5"
    assert str(~((i < 1) | (j >= 2)) & (i == j)) == "not (i < 1 or j >= 2) and i == j"


def test_members_survive_pickling():
    for op in (*BinOp, *CmpOp, *LogicOp):
        assert pickle.loads(pickle.dumps(op)) is op
