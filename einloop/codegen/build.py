"""``build``: lower a schedule and compile it into a callable kernel in one call."""
from typing import NamedTuple

from ..schedule import lower
from ..schedule.lower import kernel_name
from ..schedule.dispatch import SizeDispatch
from ..schedule.passes.split_prologue import split_prologue
from ..te.tensor import constant_positions
from .jit import compile_func


def build(s, args, target="llvm", name=None):
    """Compile schedule *s* into a native kernel taking the arrays of *args*, in that order.

    Parameters
    ----------
    s : Schedule or SizeDispatch
        A SizeDispatch (schedules of an operator with symbolic extents, each tuned at some
        sizes) compiles each schedule once into a DispatchKernel.
    args : list of Tensor
        The kernel's parameters: inputs and outputs, in call order.
    target : str
        ``"llvm"`` for the host CPU, or ``"llvm -mcpu=NAME -mattr=+feat,..."``.
    name : str, optional
        The kernel's name (``einloop_NAME`` in an exported library and its header); by default
        the first output tensor's name, as a C identifier.

    Returns
    -------
    Kernel
        Call it with NumPy arrays; ``get_source("llvm"|"asm"|"ir")`` shows the code, ``time()``
        measures it.  Building the same lowered kernel again reuses the compiled one.
    """
    if isinstance(s, SizeDispatch):
        return build_dispatch(s, args, target, name)
    return compile_func(lower(s, args, name=name), target=target)


def build_dispatch(d: SizeDispatch, args, target="llvm", name=None):
    """A DispatchKernel of the schedules of *d*; equal lowered kernels are compiled once."""
    from ..runtime.dispatch import DispatchKernel
    name = name or kernel_name(args)
    compiled, cases = {}, []
    for sizes, s in d.cases:
        func = lower(s, args, name=f"{name}__{len(compiled)}")    # each its own exported name
        key = str(func).split("\n", 1)[1]                          # the body: same code, once
        if key not in compiled:
            compiled[key] = compile_func(func, target=target)
        cases.append((tuple(sizes[n] for n in d.names), compiled[key]))
    return DispatchKernel(name, d.names, cases)


class SplitKernel(NamedTuple):
    """A kernel whose work on constant inputs is split off (:func:`build_split`): ``prologue``
    reads the arguments at positions ``sources`` of *args* and writes the arrays that
    ``main``, which takes *args*, then takes after them, and which never reads the arguments at
    positions ``unread``; ``prologue`` is None (and ``main`` the whole kernel) where there is no
    such work."""
    main: object
    prologue: object = None
    sources: tuple = ()
    unread: tuple = ()


def build_split(s, args, target="llvm", name=None) -> SplitKernel:
    """Schedule *s* compiled as :func:`build` does, with its work on the constant placeholders
    among *args* alone (``te.placeholder(..., constant=True)``: packing a weight) split off
    into a prologue (:func:`~einloop.schedule.passes.split_prologue.split_prologue`), for a
    caller that runs the prologue again only when those inputs change.  Running the prologue,
    then the main kernel, computes what :func:`build`'s kernel computes."""
    func = lower(s, args, name=name)
    split = split_prologue(func, constant_positions(args))
    if split is None:
        return SplitKernel(compile_func(func, target=target))
    return SplitKernel(compile_func(split.main, target=target),
                       compile_func(split.prologue, target=target), split.sources, split.unread)
