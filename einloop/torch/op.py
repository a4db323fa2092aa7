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
- with ``backward=True``, a call that will be differentiated (grad mode on, an input that
  requires grad) runs ``ns::op_training`` instead: the same forward, which also writes the
  stages the backward would otherwise compute again (as autograd saves activations);
- the backward is an operator of its own, ``ns::op_backward`` (so it traces like the forward),
  whose kernels :class:`~.gradients.GradientKernels` generates from the declaration with
  ``te.gradient``, once per signature; it runs only those the gradients asked for need.

With ``dynamic=`` (see :class:`~.signature.DynamicDims` for which dimensions), the dynamic
dimensions are ``te.size_var`` s in the declaration, out of the signature: one forward kernel and
one set of gradient kernels serve every value of them.  The fake implementation then returns
outputs sized by the call's own (symbolic) sizes, so a ``torch.compile(dynamic=True)`` graph is
not specialised on them.  Each new set of sizes is checked once by declaring the operator at
those sizes, as a static operator is, without building anything: a read out of bounds there
(an input too short along a static dimension for the dynamic one that indexes it) is a
``TEError``, where the symbolic kernel would clamp it.

A plain eager call (CPU tensors, nothing tracing or watching ops) runs the real implementation
without going through PyTorch's dispatcher (:func:`_plain_eager`); one that will be
differentiated does so through an ``autograd.Function`` (:class:`_EagerTraining`) whose forward
and backward run what ``ns::op_training`` and ``ns::op_backward`` run.  Any other call goes
through ``torch.ops``.

The torch operator always returns a list of tensors (its schema is fixed when it is registered,
before any declaration says how many outputs there are); calling the :class:`CustomOp` returns
one tensor or a tuple, as the declaration does.
"""
from __future__ import annotations

import inspect
import os
import re
import warnings
from typing import NamedTuple

import torch

from ..autotune import auto_schedule
from ..autotune.log.database import Database
from ..autotune.log.deploy import UntunedScheduleWarning
from ..autotune.symbolic.dispatch import default_schedule, dispatch_from_records
from ..autotune.symbolic.points import DEFAULT_HINTS, extent_names, has_symbolic_extents
from ..codegen.build import build
from ..errors import ArgumentError, CustomOpError, Error, TEError, TuningError
from ..schedule.dispatch import SizeDispatch
from ..te import placeholder, size_var
from ..te.tensor import PlaceholderOp, Tensor
from .gradients import GradientKernels, differentiate, plan_backward
from .signature import DTYPES, FLOAT_DTYPES, DynamicDims, Signature, as_array, check_on_cpu, \
    concrete_shape, empty_like_te, signature_of
from .tensor_call import PLAIN_TENSORS, TensorCall

_NAME = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]\w*$")


def custom_op(name, *, log=None, dynamic=False, backward=True):
    """Decorator: register an einloop declaration as the PyTorch operator *name* (``"ns::op"``).

    Parameters
    ----------
    name : str
        The operator's qualified name; it is then also ``torch.ops.ns.op``.
    log : path, optional
        A tuning log: each signature's kernel uses the best schedule logged for it (replayed,
        nothing is measured; a signature the log lacks gets the default schedule, with an
        ``UntunedScheduleWarning``).  None: the auto-scheduler's default schedule, silently.
        A dynamic operator's kernels dispatch on size between the schedules logged at each
        size they were tuned at (``et.tune`` at one or several batch sizes), as
        ``auto_schedule`` with ``shape_hints`` does.
    dynamic : bool or dict
        Which input dimensions are symbolic (``te.size_var``): one kernel per dtypes and static
        dimensions then serves every value of them.  True: dimension 0 of the first input;
        ``{"x": 0}``, ``{"x": (0, 1)}``: those; ``{"q": {0: "b"}, "k": {0: "b"}}``: named
        size variables, shared where the name is (see :class:`~.signature.DynamicDims`).
        Untuned, a dynamic kernel dispatches between the default schedules at the sizes
        1, 16, 256 and 2048 of every variable.
    backward : bool
        Register a backward built from generated gradient kernels (see
        :mod:`einloop.torch.gradients`); False: the operator is not differentiable.
    """
    def wrap(fn):
        return CustomOp(name, fn, log=log, dynamic=dynamic, backward=backward)
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


def _plain_eager(args, recording=False) -> bool:
    """May a call with *args* run the kernel at once instead of through PyTorch's dispatcher?

    Only where the dispatcher would just call the real implementation: plain strided CPU
    tensors (or Parameters), no gradient to record (with *recording*: one may be, by
    :class:`_EagerTraining`), and nothing that watches or transforms ops (:func:`_watched`).
    The dispatcher's Python custom-op path costs tens of microseconds, more after other ops
    have evicted it from the caches, which is the speed a short kernel loses between PyTorch
    ops.
    """
    if _watched():
        return False
    grad = torch.is_grad_enabled() and not recording
    return all(type(a) in PLAIN_TENSORS and a.layout is torch.strided and a.is_cpu
               and not (grad and a.requires_grad) for a in args)


def _watched() -> bool:
    """Does something watch or transform ops: torch.compile tracing, a TorchFunctionMode or
    TorchDispatchMode (fake tensors, ``with torch.device``), functorch transforms,
    ``torch.jit.trace``, the profiler?  Then calls go through PyTorch's dispatcher."""
    return (torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled()
            or torch._C._len_torch_dispatch_stack() or torch._C._are_functorch_transforms_active()
            or torch._C._get_tracing_state() is not None or torch.autograd._profiler_enabled())


class _PlainCall(NamedTuple):
    """The forward of a plain eager call at a static signature, looked up by its tensors'
    dtypes and shapes (:meth:`CustomOp.plain_call`): the kernel on the tensors' memory, how
    many of the tensors it writes are outputs, and (with saving) the backward's kernels."""
    sig: Signature
    call: TensorCall
    n_outputs: int
    gradients: object           # GradientKernels, or None without saving


class _EagerTraining(torch.autograd.Function):
    """A plain eager call that will be differentiated, without PyTorch's dispatcher: the
    training forward and the backward run at once, as ``ns::op_training`` and
    ``ns::op_backward`` would run them (the same kernels, saved tensors and gradients).  Each
    of those operators' Python path (the dispatcher, the custom op's autograd wrapper) costs
    tens of microseconds per call, which a model pays on every layer and step.  Anything
    tracing or watching ops takes the operators instead (:func:`_plain_eager`)."""

    @staticmethod
    def forward(ctx, op, *args):
        plain = op.plain_call(args, saving=True)
        if plain is None:                           # a dynamic operator
            sig = op.signature(args)
            outs, saved = op._forward(args, saving=True, sig=sig)
        else:
            sig, written = plain.sig, plain.call(args)
            outs, saved = written[:plain.n_outputs], written[plain.n_outputs:]
        op._save(ctx, args, [*outs, *saved], saving=True, sig=sig)
        ctx.op, ctx.plain = op, plain
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        plain, needs = ctx.plain, ctx.needs_input_grad[1:]
        if plain is not None and not _watched() and all(
                g is None or (type(g) in PLAIN_TENSORS and g.layout is torch.strided
                              and g.is_cpu) for g in grads):
            return (None, *ctx.op._plain_input_gradients(ctx, plain, grads, needs))
        return (None, *ctx.op._input_gradients(ctx, grads, needs))


class CustomOp:
    """A registered operator: call it with torch tensors (see the module's docstring)."""

    def __init__(self, name, fn, *, log=None, dynamic=False, backward=True):
        if not isinstance(name, str) or not _NAME.match(name):
            raise CustomOpError(f"custom_op: the name must be 'namespace::operator' (Python "
                                f"identifiers), got {name!r}")
        self.name, self.fn, self.log, self.backward = name, fn, log, bool(backward)
        self.params = _params(name, fn)
        self.dynamic = DynamicDims(name, self.params, dynamic)
        self._checked = set()           # (Signature, sizes) a dynamic declaration was checked at
        self._ranks = None              # input ranks of the first call: every call must match
        self._returns_tuple = None      # does the declaration return a tuple?
        self._declarations = {}         # Signature -> (inputs, outputs)
        self._plain_calls = {}          # (saving, (dtype, shape) per input) -> _PlainCall
        self._float_masks = {}          # Signature -> (float outputs, float inputs) as bools
        self._kernels = {}              # (Signature, saving) -> Kernel
        self._tensor_calls = {}         # (Signature, saving) -> TensorCall (static signatures)
        self._plans = {}                # (Signature, saving) -> BackwardPlan
        self._gradients = {}            # (Signature, saving) -> GradientKernels
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
        self.training_op = None
        if self.backward:
            # the backward is an operator too, so torch.compile traces it with no graph break
            self.backward_op = torch.library.custom_op(
                f"{name}_backward", self._run_backward, mutates_args=(),
                schema="(Tensor[] inputs, Tensor?[] heads, Tensor[] given, bool saving, "
                       "bool[] needed) -> Tensor[]")
            self.backward_op.register_fake(self._fake_backward)
            op.register_autograd(self._backward, setup_context=self._setup_context)
            # the forward when a gradient will be asked for: it also writes the stages the
            # backward would otherwise compute again (see gradients.plan_backward)
            self.training_op = torch.library.custom_op(
                f"{name}_training", self._run_training, mutates_args=(),
                schema=schema.replace("-> Tensor[]", "-> (Tensor[], Tensor[])"))
            self.training_op.register_fake(self._fake_training)
            self.training_op.register_autograd(self._backward_training,
                                               setup_context=self._setup_training)
            ops = getattr(torch.ops, namespace)
            self._backward_overload = getattr(ops, f"{opname}_backward").default
            self._training_overload = getattr(ops, f"{opname}_training").default
        self._overload = getattr(getattr(torch.ops, namespace), opname).default
        self.__name__ = getattr(fn, "__name__", opname)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self):
        return f"<einloop.torch.CustomOp {self.name}>"

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._positional(args, kwargs)
        if len(args) != len(self.params) or not all(isinstance(a, torch.Tensor) for a in args):
            signature_of(self.name, self.params, args)      # raises, naming the argument
        if self.backward and torch.is_grad_enabled() and any(a.requires_grad for a in args):
            if _plain_eager(args, recording=True):
                outs = _EagerTraining.apply(self, *args)
            else:
                outs, _ = self._training_overload(*args)
        elif _plain_eager(args):
            plain = self.plain_call(args, saving=False)
            outs = self._forward(args, False)[0] if plain is None else plain.call(args)
        else:
            outs = self._overload(*args)
        return tuple(outs) if self._returns_tuple else outs[0]

    def _positional(self, args, kwargs) -> tuple:
        """*args* and the tensors passed by name in *kwargs*, in parameter order."""
        unknown = sorted(set(kwargs) - set(self.params))
        twice = sorted(set(kwargs) & set(self.params[:len(args)]))
        if unknown or twice:
            what = (f"no parameter {', '.join(map(repr, unknown))}" if unknown
                    else f"{', '.join(map(repr, twice))} given by position and by name")
            raise ArgumentError(f"{self.name}: {what}; its parameters are "
                                f"({', '.join(self.params)})")
        missing = [p for p in self.params[len(args):] if p not in kwargs]
        if missing:
            raise ArgumentError(f"{self.name}: missing tensor(s) {', '.join(map(repr, missing))}")
        return tuple(args) + tuple(kwargs[p] for p in self.params[len(args):])

    # -- declarations and kernels, per signature ------------------------------------------------

    def signature(self, args):
        """The :class:`~.signature.Signature` of a call with *args* (checked)."""
        sig = signature_of(self.name, self.params, args, self._ranks, self.dynamic)
        if self._ranks is None:
            self._ranks = tuple(len(s) for s in sig.shapes)
        return sig

    def plain_call(self, args, saving):
        """The :class:`_PlainCall` of a plain eager call with *args* (:func:`_plain_eager`),
        None for a dynamic operator: a call path that runs every step of a model checks each
        new combination of dtypes and shapes once, then goes straight to the kernel."""
        key = (saving, *[(a.dtype, a.shape) for a in args])
        found = self._plain_calls.get(key)
        if found is None and not self.dynamic.dims:
            sig = self.signature(args)
            _, outputs = self.declaration(sig)
            found = self._plain_calls[key] = _PlainCall(
                sig, self.tensor_call(sig, saving), len(outputs),
                self.gradient_kernels(sig, True) if saving else None)
        return found

    def declaration(self, sig):
        """``(inputs, outputs)``: the te placeholders and output tensors at *sig* (cached)."""
        found = self._declarations.get(sig)
        if found is not None:
            return found
        variables = {}                  # a dynamic signature's size variables, by name
        inputs = [placeholder(tuple(variables.setdefault(d, size_var(d)) if isinstance(d, str)
                                    else d for d in s), d, p)
                  for p, s, d in zip(self.params, sig.shapes, sig.dtypes)]
        where = f"{self.name} at ({sig.text(self.params)})"
        try:
            result = self.fn(*inputs)
        except TEError as exc:
            if not variables:
                raise
            raise TEError(f"{where}: the declaration fails with the dynamic dimensions as size "
                          f"variables ({', '.join(variables)}): {exc}.  A dynamic dimension must "
                          "be an extent of its own (not n // 2), and no Python branch may "
                          "depend on it") from exc
        except Error:
            raise
        except Exception as exc:        # the user's own code failed at these shapes
            raise CustomOpError(f"{where}: the declaration {getattr(self.fn, '__name__', '')}"
                                f" raised {type(exc).__name__}: {exc} (does it take inputs of "
                                "these ranks and dtypes?)") from exc
        is_tuple = isinstance(result, (tuple, list))
        outputs = list(result) if is_tuple else [result]
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

    def check_sizes(self, sig, sizes):
        """Declare the operator at the concrete *sizes* of a dynamic signature *sig* (once per
        sizes; nothing is built): the declaration's checks, a read out of bounds above all,
        then hold for this call as for a static operator's."""
        key = (sig, tuple(sorted(sizes.items())))
        if not sizes or key in self._checked:
            return
        shapes = [tuple(sizes[d] if isinstance(d, str) else d for d in s) for s in sig.shapes]
        self.fn(*[placeholder(s, d, p) for p, s, d in zip(self.params, shapes, sig.dtypes)])
        self._checked.add(key)

    def schedule(self, tensors):
        """The schedule of *tensors* (inputs first, outputs last): the log's best, or the
        default schedule when the operator has no log.  With size variables, a
        :class:`~einloop.schedule.dispatch.SizeDispatch` (:meth:`dispatch`)."""
        if has_symbolic_extents(tensors):
            return self.dispatch(tensors)
        if self.log is not None:
            s, _ = auto_schedule(tensors, log=self.log)
            return s
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntunedScheduleWarning)
            s, _ = auto_schedule(tensors)
        return s

    def dispatch(self, tensors):
        """The size dispatch of the symbolic kernel *tensors*: the log's best schedule at each
        size it was tuned at, else (with one ``UntunedScheduleWarning`` when there is a log)
        the default schedule at each of DEFAULT_HINTS (every variable at that size)."""
        if self.log is not None:
            if not os.path.exists(self.log):
                raise TuningError(f"{self.name}: no tuning log at {self.log}; tune it with "
                                  "einloop.torch.tune(op, example_inputs, n_trial=, log=)")
            found, _ = dispatch_from_records(tensors, Database.open(self.log))
            if found is not None:
                return found
            warnings.warn(f"{self.name}: {self.log} has no schedule of the kernel over "
                          f"{', '.join(extent_names(tensors))}; using its default schedules",
                          UntunedScheduleWarning, stacklevel=3)
        names = extent_names(tensors)
        points = [{n: h for n in names} for h in DEFAULT_HINTS]
        return SizeDispatch([(p, default_schedule(tensors, p)) for p in points])

    def forward_tensors(self, sig, saving=False) -> list:
        """The forward kernel's arguments at *sig*: inputs, outputs, then (with *saving*) the
        stages it saves for the backward."""
        inputs, outputs = self.declaration(sig)
        saved = self.backward_plan(sig, saving=True).saved if saving else ()
        return [*inputs, *outputs, *saved]

    def kernel(self, sig, saving=False):
        """The forward kernel of *sig* (with *saving*: the one that also writes the saved
        stages): built on its first call, then kept for the process."""
        kernel = self._kernels.get((sig, saving))
        if kernel is None:
            tensors = self.forward_tensors(sig, saving)
            suffix = "_training" if saving else ""
            kernel = build(self.schedule(tensors), tensors,
                           name=self.name.replace("::", "_") + suffix)
            self._kernels[(sig, saving)] = kernel
        return kernel

    def tensor_call(self, sig, saving=False) -> TensorCall:
        """The forward kernel of the static signature *sig* as a :class:`~.tensor_call.
        TensorCall` (it writes the outputs, then with *saving* the saved stages)."""
        call = self._tensor_calls.get((sig, saving))
        if call is None:
            tensors = self.forward_tensors(sig, saving)
            n_written = len(tensors) - len(self.params)
            call = self._tensor_calls[(sig, saving)] = TensorCall(self.kernel(sig, saving),
                                                                  tensors, n_written)
        return call

    # -- what torch calls -----------------------------------------------------------------------

    def _fake(self, *args):
        sig = self.signature(args)
        _, outputs = self.declaration(sig)
        sizes = self.dynamic.sizes(args)        # SymInts under a dynamic trace: kept symbolic
        if all(type(v) is int for v in sizes.values()) and 0 not in sizes.values():
            self.check_sizes(sig, sizes)
        return [empty_like_te(o, sizes, args[0].device) for o in outputs]

    def _empty_call(self, sig, sizes) -> bool:
        """Is this a call with a dynamic size of 0?  A size variable is at least 1, so no kernel
        runs it: served when every output is empty then (nothing to compute; every gradient is
        zero), refused when one is not (a reduction over the empty size)."""
        if not any(v == 0 for v in sizes.values()):
            return False
        _, outputs = self.declaration(sig)
        full = [o.name for o in outputs if 0 not in concrete_shape(o.shape, sizes)]
        if full:
            zero = ", ".join(k for k, v in sizes.items() if v == 0)
            raise ArgumentError(f"{self.name}: the dynamic size {zero} is 0, and the output "
                                f"{full[0]!r} is not empty then; einloop's size variables are "
                                "at least 1 (give this call a non-empty batch)")
        return True

    def _run(self, *args):
        return self._forward(args, saving=False)[0]

    def _run_training(self, *args):
        return self._forward(args, saving=True)

    def _forward(self, args, saving, sig=None):
        """Run the forward kernel on *args* (of signature *sig*, read from them if None):
        ``(outputs, saved stages)`` as new torch tensors (no saved stages without *saving*)."""
        check_on_cpu(self.name, self.params, args)
        sig = self.signature(args) if sig is None else sig
        sizes = self._concrete_sizes(args)
        _, outputs = self.declaration(sig)
        if not sizes:                   # static: the kernel on the tensors' memory
            written = self.tensor_call(sig, saving)(args)
            return written[:len(outputs)], written[len(outputs):]
        saved = self.backward_plan(sig, saving=True).saved if saving else ()
        outs = [empty_like_te(t, sizes) for t in (*outputs, *saved)]
        if not self._empty_call(sig, sizes):
            self.check_sizes(sig, sizes)
            arrays = [as_array(a.detach().contiguous()) for a in args]
            self.kernel(sig, saving)(*arrays, *[as_array(o) for o in outs])
        return outs[:len(outputs)], outs[len(outputs):]

    def _concrete_sizes(self, args) -> dict:
        """The values of the dynamic size variables in a real call with *args* (as ints)."""
        return {k: int(v) for k, v in self.dynamic.sizes(args).items()}

    def _fake_training(self, *args):
        sig = self.signature(args)
        _, outputs = self.declaration(sig)
        saved = self.backward_plan(sig, saving=True).saved
        sizes, device = self.dynamic.sizes(args), args[0].device
        return ([empty_like_te(o, sizes, device) for o in outputs],
                [empty_like_te(t, sizes, device) for t in saved])

    def _setup_context(self, ctx, inputs, output):
        self._save(ctx, inputs, output, saving=False)

    def _setup_training(self, ctx, inputs, output):
        outs, saved = output
        self._save(ctx, inputs, [*outs, *saved], saving=True)

    def _save(self, ctx, inputs, given, saving, sig=None):
        """What the backward needs: the inputs and the forward's *given* tensors (its outputs,
        and the stages a training forward saved), the signature (*sig*, read from *inputs* if
        None) and which forward ran."""
        ctx.save_for_backward(*inputs, *given)
        ctx.signature = sig if sig is not None else \
            signature_of(self.name, self.params, inputs, dynamic=self.dynamic)
        ctx.saving = saving
        ctx.set_materialize_grads(False)        # no zeros for an output nothing flows back to

    def _backward_training(self, ctx, grads, _saved_grads):
        return self._backward(ctx, grads)

    def _backward(self, ctx, grads):
        return self._input_gradients(ctx, grads, ctx.needs_input_grad)

    def _input_gradients(self, ctx, grads, needs_input_grad):
        """One gradient (or None) per input, from the backward operator (run at once where
        nothing traces or watches ops); *grads*: one per output (None where nothing flows
        back).  Only the gradients autograd asks for (*needs_input_grad*) are computed."""
        sig = ctx.signature
        n_inputs = len(self.params)
        tensors = list(ctx.saved_tensors)
        inputs, given = tensors[:n_inputs], tensors[n_inputs:]
        heads, needed = self._heads_and_needed(sig, grads, needs_input_grad)
        if _plain_eager([*tensors, *(h for h in heads if h is not None)], recording=True):
            computed = self._run_backward(inputs, heads, given, ctx.saving, needed, sig)
        else:
            computed = self._backward_overload(inputs, heads, given, ctx.saving, needed)
        return self._per_input(sig, computed, needs_input_grad)

    def _plain_input_gradients(self, ctx, plain, grads, needs_input_grad):
        """:meth:`_input_gradients` of a plain eager call at a static signature (nothing traces
        or watches ops, every head a plain CPU tensor or None): the gradient kernels at once."""
        heads, needed = self._heads_and_needed(plain.sig, grads, needs_input_grad)
        tensors = ctx.saved_tensors
        n_inputs = len(self.params)
        computed = plain.gradients(tensors[:n_inputs], heads, tensors[n_inputs:], needed)
        return self._per_input(plain.sig, computed, needs_input_grad)

    def _heads_and_needed(self, sig, grads, needs_input_grad) -> tuple:
        """The heads of the floating-point outputs (of *grads*, one per output) and which of
        the floating-point inputs' gradients autograd asks for: what the gradient kernels take."""
        outputs_float, inputs_float = self._float_mask(sig)
        return ([g for g, f in zip(grads, outputs_float) if f],
                [bool(n) for n, f in zip(needs_input_grad, inputs_float) if f])

    def _per_input(self, sig, computed, needs_input_grad) -> tuple:
        """One gradient (or None) per input from *computed* (one per floating-point input)."""
        computed = iter(computed)
        out = []
        for n, f in zip(needs_input_grad, self._float_mask(sig)[1]):
            g = next(computed) if f else None
            out.append(g if n else None)
        return tuple(out)

    def _float_mask(self, sig) -> tuple:
        """``(outputs, inputs)``: which of the outputs and inputs at *sig* are floating-point
        (only those send and get gradients)."""
        found = self._float_masks.get(sig)
        if found is None:
            _, outputs = self.declaration(sig)
            found = self._float_masks[sig] = (
                tuple(o.dtype in FLOAT_DTYPES for o in outputs),
                tuple(d in FLOAT_DTYPES for d in sig.dtypes))
        return found

    def backward_plan(self, sig, saving=False):
        """What the backward computes at *sig* and what the forward saves for it (a
        :class:`~.gradients.BackwardPlan`, declared once per signature; nothing is built)."""
        plan = self._plans.get((sig, saving))
        if plan is None:
            plan = plan_backward(self, sig, differentiate(self), saving)
            self._plans[(sig, saving)] = plan
        return plan

    def gradient_kernels(self, sig, saving=False):
        """The gradient kernels of *sig* (see :mod:`.gradients`), built once per signature."""
        kernels = self._gradients.get((sig, saving))
        if kernels is None:
            kernels = GradientKernels(self, sig, self.backward_plan(sig, saving))
            self._gradients[(sig, saving)] = kernels
        return kernels

    def _run_backward(self, inputs, heads, given, saving, needed, sig=None):
        check_on_cpu(self.name, self.params, inputs)
        sig = self.signature(inputs) if sig is None else sig
        wrt = _float_inputs(inputs)
        if self._empty_call(sig, self._concrete_sizes(inputs)):
            grads = [torch.zeros_like(a) if n else None for a, n in zip(wrt, needed)]
        else:
            grads = self.gradient_kernels(sig, saving)(inputs, heads, given, needed)
        # the schema returns tensors: an input whose gradient is not needed gets an empty one
        return [g if g is not None else torch.empty(0, dtype=a.dtype) for g, a in zip(grads, wrt)]

    def _fake_backward(self, inputs, heads, given, saving, needed):
        return [torch.empty(a.shape if n else (0,), dtype=a.dtype, device=a.device)
                for a, n in zip(_float_inputs(inputs), needed)]


def _float_inputs(inputs) -> list:
    """The inputs that get a gradient: the floating-point ones."""
    return [a for a in inputs if DTYPES.get(a.dtype) in FLOAT_DTYPES]


__all__ = ["custom_op", "CustomOp"]
