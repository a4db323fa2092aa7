"""``custom_op``: an einloop declaration registered as a PyTorch operator.

The decorated function is called with te placeholders shaped and typed like a call's tensors and
returns the output te tensor (or a tuple of them).  Registering it as a ``torch.library`` custom
op gives PyTorch what it needs to treat the kernel as one of its own:

- the fake (meta) implementation declares the operator at the fake tensors' shapes and dtypes and
  returns empty tensors shaped like its outputs, so ``torch.compile(fullgraph=True)`` traces
  through the call with no graph break and never runs a kernel while tracing;
- the real implementation declares the operator for the call's signature, schedules it (the
  auto-scheduler's default schedule, or the best one of ``log``: replayed, never measured),
  builds it, keeps the kernel for the signature, and runs it on the tensors' memory (inputs
  detached and made contiguous, outputs allocated by torch);
- the backward (``backward=True``) is an operator of its own, ``ns::op_backward`` (so it traces
  like the forward), whose kernels :class:`~.gradients.GradientKernels` generates from the
  declaration with ``te.gradient``, once per signature.

A plain eager call (CPU tensors, no gradient to record, nothing tracing or watching ops) runs the
real implementation without going through PyTorch's dispatcher (:func:`_plain_eager`); any other
call goes through ``torch.ops``.

The torch operator always returns a list of tensors (its schema is fixed when it is registered,
before any declaration says how many outputs there are); calling the :class:`CustomOp` returns
one tensor or a tuple, as the declaration does.
"""
from __future__ import annotations

import inspect
import re
import warnings

import torch

from ..autotune import auto_schedule
from ..autotune.log.deploy import UntunedScheduleWarning
from ..codegen.build import build
from ..errors import CustomOpError
from ..te import placeholder
from ..te.tensor import PlaceholderOp, Tensor
from .gradients import GradientKernels, differentiate
from .signature import DTYPES, FLOAT_DTYPES, TORCH_DTYPES, check_on_cpu, signature_of

_NAME = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]\w*$")


def custom_op(name, *, log=None, backward=True):
    """Decorator: register an einloop declaration as the PyTorch operator *name* (``"ns::op"``).

    Parameters
    ----------
    name : str
        The operator's qualified name; it is then also ``torch.ops.ns.op``.
    log : path, optional
        A tuning log: each signature's kernel uses the best schedule logged for it (replayed,
        nothing is measured; a signature the log lacks gets the default schedule, with an
        ``UntunedScheduleWarning``).  None: the auto-scheduler's default schedule, silently.
    backward : bool
        Register a backward built from generated gradient kernels (see
        :mod:`einloop.torch.gradients`); False: the operator is not differentiable.
    """
    def wrap(fn):
        return CustomOp(name, fn, log=log, backward=backward)
    return wrap


def _params(name, fn):
    """The names of *fn*'s parameters: one tensor each, positional, no defaults."""
    if not callable(fn):
        raise CustomOpError(f"custom_op {name!r}: expected a function declaring the operator, "
                            f"got {type(fn).__name__}")
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) \
                or p.default is not p.empty:
            raise CustomOpError(f"custom_op {name!r}: parameter {p.name!r} of "
                                f"{fn.__name__} must be a plain positional parameter (one "
                                "tensor each; no defaults, *args or keywords)")
        params.append(p.name)
    if not params:
        raise CustomOpError(f"custom_op {name!r}: {fn.__name__} takes no tensors")
    return tuple(params)


#: tensor types that behave as plain tensors (a Parameter has no ``__torch_function__`` of its own)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plain_eager(args) -> bool:
    """May a call with *args* run the kernel at once instead of through PyTorch's dispatcher?

    Only where the dispatcher would just call the real implementation: plain strided CPU
    tensors (or Parameters), no gradient to record, and nothing that watches or transforms ops
    (torch.compile tracing, a TorchFunctionMode or TorchDispatchMode such as fake tensors or
    ``with torch.device``, functorch transforms, ``torch.jit.trace``, the profiler).  The
    dispatcher's Python custom-op path costs tens of microseconds, more after other ops have
    evicted it from the caches, which is the speed a short kernel loses between PyTorch ops.
    """
    if (torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled()
            or torch._C._len_torch_dispatch_stack() or torch._C._are_functorch_transforms_active()
            or torch._C._get_tracing_state() is not None or torch.autograd._profiler_enabled()):
        return False
    grad = torch.is_grad_enabled()
    return all(type(a) in _PLAIN and a.layout is torch.strided and a.device.type == "cpu"
               and not (grad and a.requires_grad) for a in args)


class CustomOp:
    """A registered operator: call it with torch tensors (see the module's docstring)."""

    def __init__(self, name, fn, *, log=None, backward=True):
        if not isinstance(name, str) or not _NAME.match(name):
            raise CustomOpError(f"custom_op: the name must be 'namespace::operator' (Python "
                                f"identifiers), got {name!r}")
        self.name, self.fn, self.log, self.backward = name, fn, log, bool(backward)
        self.params = _params(name, fn)
        self._ranks = None              # input ranks of the first call: every call must match
        self._returns_tuple = None      # does the declaration return a tuple?
        self._declarations = {}         # Signature -> (inputs, outputs)
        self._kernels = {}              # Signature -> Kernel
        self._gradients = {}            # Signature -> GradientKernels
        schema = "(" + ", ".join(f"Tensor {p}" for p in self.params) + ") -> Tensor[]"
        try:
            # every device reaches _run, which refuses all but the CPU with einloop's message
            op = torch.library.custom_op(name, self._run, mutates_args=(), schema=schema)
        except (RuntimeError, ValueError) as exc:      # a reserved namespace, for one
            raise CustomOpError(f"custom_op: cannot register {name!r} with PyTorch: {exc}") \
                from None
        op.register_fake(self._fake)
        self.torch_op, self.backward_op = op, None
        namespace, opname = name.split("::")
        if self.backward:
            # the backward is an operator too, so torch.compile traces it with no graph break
            self.backward_op = torch.library.custom_op(
                f"{name}_backward", self._run_backward, mutates_args=(),
                schema="(Tensor[] inputs, Tensor[] heads) -> Tensor[]")
            self.backward_op.register_fake(self._fake_backward)
            op.register_autograd(self._backward, setup_context=self._setup_context)
            self._backward_overload = getattr(getattr(torch.ops, namespace),
                                              f"{opname}_backward").default
        self._overload = getattr(getattr(torch.ops, namespace), opname).default
        self.__name__ = getattr(fn, "__name__", opname)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self):
        return f"<einloop.torch.CustomOp {self.name}>"

    def __call__(self, *args):
        if len(args) != len(self.params) or not all(isinstance(a, torch.Tensor) for a in args):
            signature_of(self.name, self.params, args)      # raises, naming the argument
        outs = self._run(*args) if _plain_eager(args) else self._overload(*args)
        return tuple(outs) if self._returns_tuple else outs[0]

    # -- declarations and kernels, per signature ------------------------------------------------

    def signature(self, args):
        """The :class:`~.signature.Signature` of a call with *args* (checked)."""
        sig = signature_of(self.name, self.params, args, self._ranks)
        if self._ranks is None:
            self._ranks = tuple(len(s) for s in sig.shapes)
        return sig

    def declaration(self, sig):
        """``(inputs, outputs)``: the te placeholders and output tensors at *sig* (cached)."""
        found = self._declarations.get(sig)
        if found is not None:
            return found
        inputs = [placeholder(s, d, p) for p, s, d in zip(self.params, sig.shapes, sig.dtypes)]
        result = self.fn(*inputs)
        is_tuple = isinstance(result, (tuple, list))
        outputs = list(result) if is_tuple else [result]
        where = f"{self.name} at ({sig.text(self.params)})"
        if not outputs or not all(isinstance(o, Tensor) for o in outputs):
            raise CustomOpError(f"{where}: the declaration must return a te tensor or a tuple "
                                f"of them, got {result!r}")
        for o in outputs:
            if isinstance(o.op, PlaceholderOp):
                raise CustomOpError(f"{where}: output {o.name!r} is a placeholder; return a "
                                    "te.compute (an input is not an output)")
        if self._returns_tuple is None:
            self._returns_tuple = is_tuple
        elif self._returns_tuple != is_tuple:
            raise CustomOpError(f"{where}: the declaration returned "
                                f"{'a tuple' if is_tuple else 'one tensor'} here and "
                                f"{'one tensor' if is_tuple else 'a tuple'} before")
        self._declarations[sig] = found = (inputs, outputs)
        return found

    def schedule(self, tensors):
        """The schedule of *tensors* (inputs first, outputs last): the log's best, or the
        default schedule when the operator has no log."""
        if self.log is not None:
            s, _ = auto_schedule(tensors, log=self.log)
            return s
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntunedScheduleWarning)
            s, _ = auto_schedule(tensors)
        return s

    def kernel(self, sig):
        """The forward kernel of *sig*: built on its first call, then kept for the process."""
        kernel = self._kernels.get(sig)
        if kernel is None:
            inputs, outputs = self.declaration(sig)
            tensors = [*inputs, *outputs]
            kernel = build(self.schedule(tensors), tensors, name=self.name.replace("::", "_"))
            self._kernels[sig] = kernel
        return kernel

    # -- what torch calls -----------------------------------------------------------------------

    def _fake(self, *args):
        sig = self.signature(args)
        _, outputs = self.declaration(sig)
        device = args[0].device
        return [torch.empty(tuple(int(d) for d in o.shape), dtype=TORCH_DTYPES[o.dtype],
                            device=device) for o in outputs]

    def _run(self, *args):
        check_on_cpu(self.name, self.params, args)
        sig = self.signature(args)
        kernel = self.kernel(sig)
        _, outputs = self.declaration(sig)
        outs = [torch.empty(tuple(int(d) for d in o.shape), dtype=TORCH_DTYPES[o.dtype])
                for o in outputs]
        arrays = [a.detach().contiguous().numpy() for a in args]
        kernel(*arrays, *[o.numpy() for o in outs])
        return outs

    def _setup_context(self, ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.signature = signature_of(self.name, self.params, inputs)

    def _backward(self, ctx, grads):
        """One gradient (or None) per input, from the backward operator; *grads*: one per
        output (None where nothing flows back: zeros then)."""
        sig = ctx.signature
        _, outputs = self.declaration(sig)
        inputs = list(ctx.saved_tensors)
        heads = [g if g is not None else torch.zeros(tuple(int(d) for d in o.shape),
                                                     dtype=TORCH_DTYPES[o.dtype],
                                                     device=inputs[0].device)
                 for g, o in zip(grads, outputs) if o.dtype in FLOAT_DTYPES]
        computed = iter(self._backward_overload(inputs, heads))
        return tuple(next(computed) if d in FLOAT_DTYPES else None for d in sig.dtypes)

    def gradient_kernels(self, sig):
        """The gradient kernels of *sig* (see :mod:`.gradients`), built once per signature."""
        kernels = self._gradients.get(sig)
        if kernels is None:
            kernels = self._gradients[sig] = GradientKernels(self, sig, differentiate(self))
        return kernels

    def _run_backward(self, inputs, heads):
        check_on_cpu(self.name, self.params, inputs)
        return self.gradient_kernels(self.signature(inputs))(inputs, heads)

    def _fake_backward(self, inputs, heads):
        return [torch.empty(a.shape, dtype=a.dtype, device=a.device) for a in inputs
                if DTYPES.get(a.dtype) in FLOAT_DTYPES]


__all__ = ["custom_op", "CustomOp"]
