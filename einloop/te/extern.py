"""``te.extern``: a stage of the DAG computed by a C function, found by its symbol.

The calling convention (fixed, so a user can write the function in plain C)::

    void SYMBOL(const T0 *in0, const T1 *in1, ..., T *out,
                int64_t <each dimension of in0>, int64_t <each dimension of in1>, ...,
                int64_t <each dimension of out>);

Every buffer is C-contiguous (row-major) and holds the whole tensor; the function must write
every element of ``out`` and nothing else.  The dimensions follow all the pointers, buffer by
buffer in the same order, each as an ``int64_t``: a symbolic extent (``te.size_var``) is passed
as its value at the call.  einloop cannot see the function's C signature: one that does not
follow this convention reads or writes the wrong memory, as any C call would.  A GEMM
``Y[m, n] = A[m, k] @ B[k, n]`` is therefore
``void gemm(const float *a, const float *b, float *y, int64_t m, int64_t k, int64_t k2,
int64_t n, int64_t m2, int64_t n2)``.

The symbol is looked up in *library* (a shared object, loaded when a kernel using it is
built or loaded) or, without one, among the symbols already loaded in the process.  An external
stage has one output, no loops to schedule, is computed at the root, and reads its inputs from
their whole buffers: its producers are always materialized (never inlined into it, never
computed at a loop of another stage).
"""
from __future__ import annotations

import os
import re

from ..errors import TEError
from ..ir import dtypes
from .tensor import Operation, Tensor, check_shape

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: the prefix of einloop's own kernel symbols (``einloop_<name>``): an external function there
#: could be a kernel calling itself
_RESERVED_PREFIX = "einloop_"


class ExternOp(Operation):
    """An operation computed by the C function *symbol* (of *library*, or of the process when
    it is None) from the whole buffers of *inputs*; see the module for the convention."""

    def __init__(self, name, shape, dtype, inputs, symbol, library):
        self.name, self.shape, self.dtype = name, shape, dtype
        self.inputs = tuple(inputs)
        self.symbol, self.library = symbol, library
        self._output = Tensor(self)

    @property
    def input_tensors(self):
        return tuple(dict.fromkeys(self.inputs))

    def redeclared(self, inputs, shape=None) -> Tensor:
        """The same call on other *inputs* (and *shape*, e.g. with symbolic extents bound): how
        a pass that declares an operator again (sizes bound, stages rewritten) rebuilds it."""
        inputs = tuple(inputs)
        if len(inputs) != len(self.inputs):
            raise TEError(f"extern {self.name!r}: declared again with {len(inputs)} inputs "
                          f"instead of {len(self.inputs)}")
        return ExternOp(self.name, self.shape if shape is None else tuple(shape), self.dtype,
                        inputs, self.symbol, self.library).output()

    def __repr__(self):
        where = self.library or "the process"
        return f"extern({self.name}, {self.shape}, {self.dtype}, {self.symbol} in {where})"


def extern(shape, inputs, symbol, library=None, dtype=None, name="extern") -> Tensor:
    """A tensor of *shape* computed by the C function *symbol* from the tensors *inputs*.

    Parameters
    ----------
    shape : tuple of int or symbolic extents
        The shape of the one output (several outputs are not supported).
    inputs : list of Tensor
        The tensors the function reads, in the order of its pointer parameters.
    symbol : str
        The C name of the function (see :mod:`einloop.te.extern` for its signature).
    library : str or PathLike, optional
        The shared library that defines *symbol*: a path, or the name of a file in the working
        directory (both made absolute), or else a bare name the dynamic loader searches for
        (``libm.so.6``); loaded when a kernel using it is built or loaded.  Without it, *symbol*
        must already be loaded in the process.
    dtype : str, optional
        The output's dtype; by default the first input's (float32 without inputs).
    name : str
        The tensor's name.
    """
    name = str(name)
    where = f"extern {name!r}"
    if isinstance(shape, (list, tuple)) and shape and all(
            isinstance(d, (list, tuple)) for d in shape):
        raise TEError(f"{where}: {len(shape)} output shapes given; an external stage has one "
                      "output (declare one te.extern per output, each its own C function)")
    shape = check_shape(shape, where)
    inputs = _check_inputs(where, inputs)
    symbol = _check_symbol(where, symbol)
    library = _check_library(where, library)
    if dtype is None:
        dtype = inputs[0].dtype if inputs else "float32"
    dtype = dtypes.canonical(dtype, where)
    return ExternOp(name, shape, dtype, inputs, symbol, library).output()


def _check_inputs(where, inputs):
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    try:
        inputs = tuple(inputs)
    except TypeError:
        raise TEError(f"{where}: inputs must be a list of tensors, got {inputs!r}") from None
    for n, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TEError(f"{where}: input {n} is {t!r}, not a tensor; pass the tensors the "
                          "function reads (placeholders or computed tensors)")
    return inputs


def _check_symbol(where, symbol):
    if not isinstance(symbol, str) or not _C_IDENTIFIER.match(symbol):
        raise TEError(f"{where}: the symbol must be the C name of a function (letters, digits "
                      f"and '_', not starting with a digit), got {symbol!r}")
    if symbol.startswith(_RESERVED_PREFIX):
        raise TEError(f"{where}: the symbol {symbol!r} starts with {_RESERVED_PREFIX!r}, the "
                      "prefix of einloop's own kernels; name the C function otherwise")
    return symbol


def _check_library(where, library):
    if library is None:
        return None
    try:
        path = os.fspath(library)
    except TypeError:
        raise TEError(f"{where}: library must be the path of a shared library (str or "
                      f"PathLike) or None, got {library!r}") from None
    if not isinstance(path, str) or not path:
        raise TEError(f"{where}: library must be a non-empty path, got {library!r}")
    # a path, or a file of that name here, is made absolute so that the kernel finds it from
    # any working directory; any other bare name (libm.so.6) is the dynamic loader's to search
    return os.path.abspath(path) if os.sep in path or os.path.isfile(path) else path
