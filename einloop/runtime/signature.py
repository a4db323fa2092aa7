"""What a kernel's caller must know about its buffers, as plain data: names, dtypes, shapes.

A :class:`Signature` is everything the runtime needs to check arguments, allocate temporaries
and call native code, with no compiler object behind it, so that it can travel between processes
(the tuner's runner) and, later, inside an exported library's metadata.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InternalError


@dataclass(frozen=True)
class BufferSpec:
    """Name, dtype (a NumPy dtype name) and shape of a kernel argument or temp buffer."""
    name: str
    dtype: str
    shape: tuple

    def __post_init__(self):
        object.__setattr__(self, "dtype", str(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    def type_str(self) -> str:
        """``float32[64, 64]``."""
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"

    def describe(self) -> str:
        """``A: float32[64, 64]``."""
        return f"{self.name}: {self.type_str()}"


@dataclass(frozen=True)
class Signature:
    """A kernel's buffers: arguments in call order, temporaries (allocated by the runtime per
    call, passed after the arguments), and the names of the arguments the kernel writes."""
    args: tuple = ()
    temps: tuple = ()
    outputs: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "temps", tuple(self.temps))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        for spec in self.args + self.temps:
            if not isinstance(spec, BufferSpec):
                raise InternalError(f"a Signature holds BufferSpecs, got {spec!r}")

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
