"""Expression nodes shared by tensor declarations and the lowered loop IR (with buffers and Load).

Semantics, in brief:
- Every node is immutable and carries a ``dtype``.  Index variables are ``int64``.
- Integer ``//`` and ``%`` follow Python (floor) semantics, with NumPy's ``x // 0 == x % 0 == 0``;
  ``/`` is for floats only.
- Integers wrap around (two's complement; uint8 modulo 256), and the emitted code wraps int64 too;
  but the simplifier may reason about int64 (index) arithmetic as if it never overflowed, so an
  int64 result beyond +-2**63 is unspecified.  A float converted to an integer type truncates
  toward zero as NumPy does on x86-64 (out of range or NaN: via int32/int64's minimum, then
  wrapped), on every target: code for AArch64, whose NumPy saturates, computes the same.  A
  Python literal takes the dtype of the expression it meets and must fit in it.
- Float ``max``/``min`` propagate NaN, as NumPy's ``maximum``/``minimum`` do.
  ``TruncDiv``-style fast forms appear only after lowering has proven the operands non-negative
  (``BinOp.TDIV`` and ``BinOp.TMOD``).
- Float arithmetic may be contracted into FMA by codegen; nothing else is reassociated.
- ``Select`` is lazy: a branch that is not taken is not evaluated, so it may guard a read that
  would be out of bounds (padding is written this way).
- Operator kinds are enums (:class:`BinOp`, :class:`CmpOp`, :class:`LogicOp`) whose value is the
  printed symbol; comparing one with a string is an :class:`InternalError`, so a forgotten
  string comparison fails loudly instead of being silently false.
- Python's ``==`` on expressions builds a comparison (as in Halide and TVM); use ``is`` to compare
  nodes.  An expression has no truth value: ``if expr:`` raises.
"""
from __future__ import annotations

from dataclasses import dataclass
import enum
import math
import numbers

import numpy as np

from ..errors import InternalError, TEError
from . import dtypes


class _OpKind(enum.Enum):
    """An operator kind; its value is the symbol the printer writes.

    Members compare by identity.  Comparing one with a ``str`` raises :class:`InternalError`:
    operators used to be strings, and a left-over ``op == "+"`` would otherwise be silently
    false.  Convert a symbol once, at the public boundary, with ``BinOp("+")``.
    """

    def __eq__(self, other):
        if other.__class__ is str:
            raise InternalError(f"operator {type(self).__name__}.{self.name} compared with the "
                                f"string {other!r}: compare with {type(self).__name__} members")
        return self is other

    __hash__ = enum.Enum.__hash__

    def __str__(self):
        return self.value

    @property
    def symbol(self) -> str:
        return self.value


class BinOp(_OpKind):
    """Arithmetic operators of :class:`Binary`."""
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"            # floats only
    FLOORDIV = "//"      # integers, floor semantics, x // 0 == 0
    MOD = "%"            # integers, floor semantics, x % 0 == 0
    MAX = "max"
    MIN = "min"
    TDIV = "tdiv"        # truncating //, only where lowering proved the dividend non-negative
    TMOD = "tmod"        # truncating %, likewise


class CmpOp(_OpKind):
    """Comparison operators of :class:`Compare`."""
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="


class LogicOp(_OpKind):
    """Boolean connectives of :class:`Logical`."""
    AND = "and"
    OR = "or"


class Expr:
    """Base class of all expression nodes: arithmetic operators build new nodes."""

    __slots__ = ()
    dtype: str

    # arithmetic -----------------------------------------------------------------------------
    def __add__(self, other): return binary(BinOp.ADD, self, other)
    def __radd__(self, other): return binary(BinOp.ADD, other, self)
    def __sub__(self, other): return binary(BinOp.SUB, self, other)
    def __rsub__(self, other): return binary(BinOp.SUB, other, self)
    def __mul__(self, other): return binary(BinOp.MUL, self, other)
    def __rmul__(self, other): return binary(BinOp.MUL, other, self)
    def __truediv__(self, other): return binary(BinOp.DIV, self, other)
    def __rtruediv__(self, other): return binary(BinOp.DIV, other, self)
    def __floordiv__(self, other): return binary(BinOp.FLOORDIV, self, other)
    def __rfloordiv__(self, other): return binary(BinOp.FLOORDIV, other, self)
    def __mod__(self, other): return binary(BinOp.MOD, self, other)
    def __rmod__(self, other): return binary(BinOp.MOD, other, self)
    def __neg__(self): return binary(BinOp.SUB, const(0, self.dtype), self)
    def __pos__(self): return self

    # comparisons ----------------------------------------------------------------------------
    def __lt__(self, other): return compare(CmpOp.LT, self, other)
    def __le__(self, other): return compare(CmpOp.LE, self, other)
    def __gt__(self, other): return compare(CmpOp.GT, self, other)
    def __ge__(self, other): return compare(CmpOp.GE, self, other)
    def __eq__(self, other): return compare(CmpOp.EQ, self, other)  # type: ignore[override]
    def __ne__(self, other): return compare(CmpOp.NE, self, other)  # type: ignore[override]
    __hash__ = object.__hash__

    def __and__(self, other): return logical(LogicOp.AND, self, other)
    def __rand__(self, other): return logical(LogicOp.AND, other, self)
    def __or__(self, other): return logical(LogicOp.OR, self, other)
    def __ror__(self, other): return logical(LogicOp.OR, other, self)
    def __invert__(self): return Not(as_expr(self))

    def __bool__(self):
        raise TEError(
            f"the expression {self} has no truth value: Python 'if', 'and', 'or' and chained "
            "comparisons cannot be used on einloop expressions; use te.if_then_else(cond, a, b), "
            "te.all(...), te.any(...), or the operators & and |")

    def astype(self, dtype) -> Expr:
        """Convert to *dtype* (C semantics: float to int truncates toward zero)."""
        dtype = dtypes.canonical(dtype, "astype")
        return self if dtype == self.dtype else Cast(dtype, self)

    def __str__(self):
        from .printer import expr_str
        return expr_str(self)

    __repr__ = __str__


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    value: object
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable: a loop index, a reduction index or a reducer operand."""
    name: str
    dtype: str = dtypes.INDEX


@dataclass(frozen=True, eq=False, repr=False)
class ShapeVar(Var):
    """A symbolic extent (``te.var``, ``te.size_var``): one kernel serves every value, which a
    call takes from its arrays' shapes.  The value is known to be at least ``min_value`` (0, or
    1 for a size variable), which is what proofs about it may assume."""
    min_value: int = 0


def is_static(extent) -> bool:
    """Is *extent* (of a shape, loop or axis) a Python int, as opposed to a symbolic one?"""
    return isinstance(extent, int)


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    op: BinOp
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Compare(Expr):
    op: CmpOp
    a: Expr
    b: Expr
    dtype: str = dtypes.BOOL


@dataclass(frozen=True, eq=False, repr=False)
class Logical(Expr):
    op: LogicOp
    a: Expr
    b: Expr
    dtype: str = dtypes.BOOL


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = dtypes.BOOL


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    dtype: str
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A math intrinsic (exp, log, sqrt, tanh, sigmoid, abs, pow, erf, ...)."""
    name: str
    args: tuple
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class TensorRead(Expr):
    tensor: object   # te.Tensor
    indices: tuple
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """``reducer`` over ``source`` for all points of ``axes`` (IterVars), where ``condition``."""
    reducer: object  # te.CommReducer
    source: Expr
    axes: tuple
    condition: Expr | None
    dtype: str


# construction helpers ---------------------------------------------------------------------------

def const(value, dtype=None) -> Const:
    """A constant; Python ints default to int64, floats to float32.

    Floats are rounded to *dtype* (so a float32 constant holds exactly the float32 value); an
    integer that *dtype* cannot hold is an error, as in NumPy, not a silent wrap-around.
    """
    if isinstance(value, np.bool_):
        value = bool(value)
    if dtype is None:
        if isinstance(value, bool):
            dtype = dtypes.BOOL
        elif isinstance(value, numbers.Integral):
            dtype = dtypes.INDEX
        elif isinstance(value, numbers.Real):
            dtype = "float32"
        else:
            raise TEError(f"cannot make a constant of {value!r} ({type(value).__name__}); "
                          "expected an int, float or bool")
    dtype = dtypes.canonical(dtype, "const")
    if isinstance(value, complex) or not isinstance(value, numbers.Real):
        raise TEError(f"cannot make a {dtype} constant of {value!r} ({type(value).__name__}); "
                      "expected an int, float or bool")
    if dtypes.is_int(dtype):
        if isinstance(value, numbers.Integral):
            value = int(value)
        elif not float(value).is_integer():
            raise TEError(f"constant {value} is not an integer but dtype is {dtype}")
        lo, hi = dtypes.int_range(dtype)
        if not lo <= int(value) <= hi:
            raise TEError(f"constant {value} is out of the range of {dtype} ({lo}..{hi}); use "
                          f"a value in that range, or a wider dtype and .astype('{dtype}') to "
                          "wrap it around explicitly")
    return Const(dtypes.normalise(value, dtype), dtype)


def clamp_index(ix, n) -> Expr:
    """Index *ix* clamped into ``0 .. n - 1`` (*n* an int or a symbolic extent): a read that
    cannot be proven inside, or a padded row, then reads a real element."""
    top = const(n - 1, dtypes.INDEX) if isinstance(n, int) else n - 1
    return Binary(BinOp.MAX, Binary(BinOp.MIN, ix, top, dtypes.INDEX), const(0, dtypes.INDEX),
                  dtypes.INDEX)


def as_expr(value, like: str | None = None) -> Expr:
    """Wrap a Python number as a Const of dtype *like* (the other operand's), else pass through."""
    if isinstance(value, Expr):
        return value
    if isinstance(getattr(value, "var", None), Var):      # an IterVar
        return value.var
    if hasattr(value, "op") and hasattr(value, "shape") and hasattr(value, "__getitem__"):
        raise TEError(f"tensor {getattr(value, 'name', value)} used as a scalar: index it, "
                      "e.g. A[i, j]")
    if isinstance(value, np.bool_):
        value = bool(value)
    if isinstance(value, numbers.Number) and not isinstance(value, complex):
        if like is not None and not isinstance(value, bool):
            if dtypes.is_int(like) and not isinstance(value, numbers.Integral) \
                    and not float(value).is_integer():
                raise TEError(f"the float literal {value} meets an {like} expression; "
                              f"cast the expression with .astype('float32') first")
            if dtypes.is_int(like):
                lo, hi = dtypes.int_range(like)
                if not lo <= value <= hi:
                    raise TEError(f"the literal {value} meets an {like} expression but {like} "
                                  f"holds only {lo}..{hi}; cast the expression to a wider dtype "
                                  "first, e.g. .astype('int64')")
            return const(value, like)
        return const(value)
    raise TEError(f"cannot use {value!r} ({type(value).__name__}) in an expression; "
                  "expected an einloop expression or a Python number")


def _unify(op, a, b):
    """Convert operands; Python literals take the other side's dtype; typed mismatch is an error."""
    a, b = (x if _is_literal(x) else as_expr(x) for x in (a, b))
    if _is_literal(a) and _is_literal(b):
        a = as_expr(a)
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    if a.dtype != b.dtype:
        raise TEError(
            f"dtype mismatch in '{a} {op} {b}': {a.dtype} {op} {b.dtype}; einloop does not convert "
            f"silently: cast one side explicitly, e.g. {_cast_hint(a, b)}")
    return a, b


def _cast_hint(a, b) -> str:
    """The cast that resolves a dtype mismatch: widen a bfloat16 side to the other float (it is
    a storage type, computed in float32), else cast *b* to *a*'s dtype."""
    low, other = (a, b) if a.dtype == dtypes.BFLOAT16 else (b, a)
    if low.dtype == dtypes.BFLOAT16 and dtypes.is_float(other.dtype):
        return f"({low}).astype('{other.dtype}')"
    return f"({b}).astype('{a.dtype}')"


def _is_literal(x):
    return isinstance(x, (numbers.Number, np.bool_))


def _kind(cls, op):
    """*op* as a member of *cls*: the public builders accept the enum or its symbol."""
    if op.__class__ is cls:
        return op
    try:
        return cls(op)
    except ValueError:
        raise InternalError(f"{op!r} is not a {cls.__name__} "
                            f"({', '.join(m.value for m in cls)})") from None


def binary(op, a, b) -> Expr:
    """``a op b`` for a :class:`BinOp` (or its symbol), with operands unified and checked."""
    op = _kind(BinOp, op)
    a, b = _unify(op, a, b)
    if a.dtype == dtypes.BOOL:
        raise TEError(f"arithmetic '{op}' on a boolean expression ({a}); use .astype(...) first")
    if op is BinOp.DIV and not dtypes.is_float(a.dtype):
        raise TEError(f"'/' on integers ({a} / {b}) is ambiguous; use '//' for floor division "
                      "or cast to a float dtype")
    if (op is BinOp.FLOORDIV or op is BinOp.MOD) and dtypes.is_float(a.dtype):
        raise TEError(f"'{op}' is only defined for integers here, got {a.dtype} ({a} {op} {b}); "
                      "use '/' or te.floor")
    return Binary(op, a, b, a.dtype)


def compare(op, a, b) -> Expr:
    """``a op b`` for a :class:`CmpOp` (or its symbol)."""
    op = _kind(CmpOp, op)
    a, b = _unify(op, a, b)
    return Compare(op, a, b)


def logical(op, a, b) -> Expr:
    """``a op b`` for a :class:`LogicOp` (or ``"and"``/``"or"``) on boolean operands."""
    op = _kind(LogicOp, op)
    a, b = as_expr(a), as_expr(b)
    for x in (a, b):
        if x.dtype != dtypes.BOOL:
            raise TEError(f"'{op}' needs boolean operands, got {x} of dtype {x.dtype}; "
                          "compare it first, e.g. (x > 0)")
    return Logical(op, a, b)


# buffers of the loop IR ----------------------------------------------------------------------

class Scope(enum.Enum):
    ARG = "arg"        # a kernel argument, owned by the caller
    TEMP = "temp"      # a whole-kernel intermediate, allocated by the kernel wrapper
    LOCAL = "local"    # allocated in the kernel, private to the enclosing parallel task


@dataclass(frozen=True, eq=False)
class Buffer:
    name: str
    dtype: str
    shape: tuple
    scope: Scope

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self):
        return f"Buffer({self.name}, {self.dtype}, {self.shape}, {self.scope.value})"


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    buffer: Buffer
    index: Expr
    dtype: str
