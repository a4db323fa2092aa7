"""What a kernel's caller must know about its buffers, as plain data: names, dtypes, shapes.

A :class:`Signature` is everything the runtime needs to check arguments, allocate temporaries
and call native code, with no compiler object behind it, so that it can travel between processes
(the tuner's runner) and inside an exported library's metadata.

A dimension is an int (static) or the name of a symbolic variable (a :class:`VarSpec`): one
kernel then serves every value of that variable, which each call binds from the arrays it gets
and passes to the native code as an int64 after the temporaries.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InternalError


#: the dtypes kernels take (einloop.ir.dtypes.SUPPORTED, which the runtime does not import)
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "bool")


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a buffer's dtype *name*: NumPy's own, or ml_dtypes' ``bfloat16``
    (NumPy has none; imported on first use).  TypeError for a name not in DTYPES."""
    if name not in DTYPES:
        raise TypeError(f"einloop kernels take no arrays of dtype {name!r}")
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _dim(d):
    """A shape entry normalised: an int, or a symbolic variable's name (an identifier)."""
    if isinstance(d, str):
        if not d.isidentifier():
            raise InternalError(f"a symbolic dimension is a variable's name (an identifier), "
                                f"got {d!r}")
        return d
    return int(d)


@dataclass(frozen=True)
class VarSpec:
    """A symbolic extent the kernel takes as an int64 parameter; *min_value* is what the
    compiler assumed of it (1 for ``te.size_var``, 0 for ``te.var``), checked at every call."""
    name: str
    min_value: int = 0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise InternalError(f"a VarSpec's name is an identifier, got {self.name!r}")
        object.__setattr__(self, "min_value", int(self.min_value))


@dataclass(frozen=True)
class BufferSpec:
    """Name, dtype (a NumPy dtype name) and shape of a kernel argument or temp buffer; each
    dimension an int or the name of a symbolic variable (``("n", 1024)``)."""
    name: str
    dtype: str
    shape: tuple

    def __post_init__(self):
        object.__setattr__(self, "dtype", str(self.dtype))
        object.__setattr__(self, "shape", tuple(_dim(d) for d in self.shape))

    @property
    def symbols(self) -> tuple:
        """The names of the symbolic dimensions, in axis order (repeats kept)."""
        return tuple(d for d in self.shape if isinstance(d, str))

    def type_str(self) -> str:
        """``float32[64, 64]``."""
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"

    def describe(self) -> str:
        """``A: float32[64, 64]``."""
        return f"{self.name}: {self.type_str()}"


@dataclass(frozen=True)
class Signature:
    """A kernel's buffers: arguments in call order, temporaries (allocated by the runtime per
    call, passed after the arguments), the names of the arguments the kernel writes, and the
    symbolic variables of the shapes (passed after the temporaries, in this order)."""
    args: tuple = ()
    temps: tuple = ()
    outputs: tuple = ()
    vars: tuple = ()

    def __post_init__(self):
        for field in ("args", "temps", "outputs", "vars"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        for spec in self.args + self.temps:
            if not isinstance(spec, BufferSpec):
                raise InternalError(f"a Signature holds BufferSpecs, got {spec!r}")
        self._check_vars()

    def _check_vars(self):
        """Every symbolic dimension names a var, and every var can be bound by a call."""
        names = []
        for v in self.vars:
            if not isinstance(v, VarSpec):
                raise InternalError(f"a Signature's vars are VarSpecs, got {v!r}")
            if v.name in names:
                raise InternalError(f"variable {v.name} is listed twice in a Signature")
            names.append(v.name)
        for spec in self.args + self.temps:
            unknown = [d for d in spec.symbols if d not in names]
            if unknown:
                raise InternalError(f"buffer {spec.describe()}: dimension {unknown[0]} is not "
                                    f"a variable of the signature (vars: {names})")
        in_args = {d for a in self.args for d in a.symbols}
        for name in names:
            if name not in in_args:
                raise InternalError(f"variable {name} is no argument's dimension, so no call "
                                    "can bind it")

    @property
    def symbolic(self) -> bool:
        """Does any shape have a symbolic dimension?"""
        return bool(self.vars)

    @property
    def written(self) -> tuple:
        """Per argument, in call order: does the kernel write it?"""
        outputs = set(self.outputs)
        return tuple(a.name in outputs for a in self.args)

    @property
    def inputs(self) -> tuple:
        """Specs of the arguments the kernel only reads."""
        return tuple(a for a, w in zip(self.args, self.written) if not w)

    def __str__(self):
        return ", ".join(a.describe() for a in self.args)
