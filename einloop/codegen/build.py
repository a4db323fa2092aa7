"""``build``: lower a schedule and compile it into a callable kernel in one call."""
from ..schedule import lower
from .jit import compile_func


def build(s, args, target="llvm", name="main"):
    """Compile schedule *s* into a native kernel taking the arrays of *args*, in that order.

    Parameters
    ----------
    s : Schedule
    args : list of Tensor
        The kernel's parameters: inputs and outputs, in call order.
    target : str
        ``"llvm"`` for the host CPU, or ``"llvm -mcpu=NAME -mattr=+feat,..."``.

    Returns
    -------
    Kernel
        Call it with NumPy arrays; ``get_source("llvm"|"asm"|"ir")`` shows the code, ``time()``
        measures it.  Building the same lowered kernel again reuses the compiled one.
    """
    return compile_func(lower(s, args, name=name), target=target)
