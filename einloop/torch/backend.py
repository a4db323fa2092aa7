"""``torch.compile(model, backend="einloop")``: ATen graphs run as einloop kernels.

Dynamo hands the backend an FX graph; :func:`einloop_backend` lowers it to ATen through
``aot_autograd`` (the forward graph of inference, and of training with the backward graph
compiled the same way), then:

1. **partitions** the graph into the parts einloop supports (:data:`.aten.LOWERINGS`, static
   shapes, dtypes einloop compiles for) with PyTorch's ``CapabilityBasedPartitioner``;
   everything else stays a PyTorch call, so a model einloop cannot handle at all still runs;
2. **groups** each part into kernels (:func:`.grouping.group_nodes`), once its reshapes are
   moved past the elementwise nodes that read them (:func:`.views.sink_views`): an elementwise
   or layout node joins the kernel of the node it reads when it is that node's only reader (an
   epilogue: a GEMM's bias and GELU, a convolution's batch norm and ReLU), an injective node
   whose only reader is another kernel joins that kernel (a prologue: a transpose read through
   by a matmul, so no layout op ever copies), and a softmax between two products is one kernel
   with them (attention); a reshape that ends a kernel runs as a torch view of its output,
   one of a tensor the kernel reads as a torch view of that tensor (:func:`.views.leading_views`)
   (:class:`.views.ViewStep`);
3. **builds** each group's te DAG (inputs: the tensors it reads from outside) with its tuned
   schedule from ``options={"log": PATH}`` when the log has it, else the auto-scheduler's
   first seed schedule (one notice per process for what the log lacks), and calls it on the
   tensors' memory
   (:class:`.tensor_call.TensorCall`);
4. **runs** consecutive kernels (and the views between them) by one native call
   (:class:`.kernel_run.KernelRun`): their intermediates and temporaries in one arena, the
   partition's inputs checked once.

Each group is a tuning task of its own, keyed by its structure, so identical layers share one.

A graph with symbolic sizes (``torch.compile(..., dynamic=True)``, ``mark_dynamic``) is compiled
once by :func:`compile_symbolic`: its sizes are ``te.size_var`` s (:mod:`.symbolic`), its kernels
take them at each call, and a log's schedules tuned at several sizes are dispatched between
by size.  What that cannot compile goes to :class:`PerSizeGraph`, which compiles the graph
again at each new size (as ``options={"symbolic": False}`` asks for every such graph).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
import warnings

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from .. import nn, te
from ..te.tensor import PlaceholderOp
from ..autotune import UntunedScheduleWarning, apply_history_best, auto_schedule
from ..autotune.task.auto import AutoTask
from ..autotune.task.base import outputs_of
from ..codegen.build import build, build_split
from ..errors import ArgumentError, EinloopWarning, Error, InternalError, TuningError, \
    VectorizeWarning
from ..nn.elementwise import same_shape
from ..schedule.replay import replay
from ..te.bind import shape_vars_of
from .aten import LOWERINGS, shape_of
from .symbolic import SIZES, NotSymbolic, SizeTable, SymbolicKernel, SymbolicViewStep, \
    UnboundSize, check_bound, declaring, fold_batched_products
from .decompositions import decompositions
from .grouping import group_nodes
from .index_checks import check_indices, guard_indices
from .kernel_run import KernelRun
from .views import ViewStep, is_view_group, leading_views, sink_views, trailing_views
from .prepack import Prepack
from .signature import DTYPES
from .tensor_call import TensorCall, at_least_1d

#: dtypes a partition's tensors may have: all of einloop's (float16 and bfloat16 reductions and
#: composite functions compute in float32, as PyTorch's, einloop.nn.opmath)
KERNEL_DTYPES = set(DTYPES)
#: ATen operators that may read a symbolic size (a node computing it): their lowerings take
#: the result's shape from the node's fake value, never from that argument
SIZE_READERS = frozenset({torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
                          torch.ops.aten.reshape.default, torch.ops.aten.expand.default})

_log = logging.getLogger("einloop.torch")


class BackendWarning(EinloopWarning):
    """What the backend tells a user once: parts of a model it leaves to PyTorch, kernels the
    log has no schedule for."""


def _static_tensor(v, symbolic=False) -> bool:
    """Is *v* a tensor a kernel may read or write: dense, on the CPU, of a kernel dtype, its
    sizes positive ints (or, *symbolic*, sizes dynamo made symbolic)?"""
    return isinstance(v, torch.Tensor) and v.dtype in KERNEL_DTYPES and \
        v.device.type == "cpu" and v.layout is torch.strided and \
        all(isinstance(d, int) and d > 0 or symbolic and isinstance(d, torch.SymInt)
            for d in v.shape)


def _is_size(node) -> bool:
    """Is *node* a symbolic size (a SymInt: a placeholder, or arithmetic on sizes)?"""
    return isinstance(node.meta.get("val"), torch.SymInt)


def _values(node):
    v = node.meta.get("val")
    return v if isinstance(v, (tuple, list)) else (v,)


class EinloopSupport(OperatorSupport):
    """The nodes einloop runs: a lowering in the table that accepts the node, every tensor
    read and produced static (or, *symbolic*, of symbolic sizes too), dense, on the CPU and
    of a kernel dtype; with *symbolic*, a reshape or expand may read a symbolic size."""

    def __init__(self, symbolic=False):
        super().__init__()
        self.symbolic = symbolic

    def is_node_supported(self, submodules, node) -> bool:
        if node.op != "call_function":
            return False
        low = LOWERINGS.get(node.target)
        if low is None:
            return False
        if node.target is operator.getitem:           # a part of a supported tuple result
            return node.args[0].op == "call_function" and \
                self.is_node_supported(submodules, node.args[0]) and \
                _static_tensor(node.meta.get("val"), self.symbolic)
        outs = _values(node)            # a tuple's other parts: unused (its lowering accepts)
        if not outs or not _static_tensor(outs[0], self.symbolic):
            return False
        if not all(_static_tensor(a.meta.get("val"), self.symbolic)
                   or self.symbolic and node.target in SIZE_READERS and _is_size(a)
                   for a in node.all_input_nodes):
            return False
        return low.accepts is None or bool(low.accepts(node))


# -- kernels -----------------------------------------------------------------------------------

#: ``node.meta`` key of a graph input whose values stay the same from call to call (a
#: parameter or buffer of the model: dynamo's static inputs): its kernels' placeholders are
#: constant (``te.placeholder(..., constant=True)``), so their work on it alone is done once
CONSTANT = "einloop_constant"


def declare_kernel(group, sinks) -> tuple:
    """The te declaration of *group*'s kernel writing its outputs *sinks* (the group's nodes
    read outside it): ``(the nodes it reads from outside the group, in order; its tensors: a
    placeholder per node read (constant where the node is marked :data:`CONSTANT`), then one
    output per distinct sink value; for each sink, the index of its output)``."""
    members = set(group)
    needed = _needed(sinks, members)
    reads, values, placeholders = [], {}, []
    for n in needed:
        for a in n.all_input_nodes:
            if a not in members and a not in values:
                v = a.meta["val"]
                if isinstance(v, torch.SymInt):             # a size a reshape reads: unused
                    values[a] = None
                    continue
                values[a] = te.placeholder(shape_of(v), DTYPES[v.dtype], name=_name(a),
                                           constant=bool(a.meta.get(CONSTANT)))
                placeholders.append(values[a])
                reads.append(a)
    for n in needed:
        args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: values[a])
        if n.target is operator.getitem:
            values[n] = args[0][args[1]]
            continue
        out = n.meta.get("val")
        values[n] = LOWERINGS[n.target].lower(out[0] if isinstance(out, (tuple, list)) else out,
                                              *args, **kwargs)
    outputs, where = [], []
    for sink in sinks:
        result, want = values[sink], sink.meta["val"]
        if result.dtype != DTYPES[want.dtype] or \
                not same_shape(tuple(result.shape), shape_of(want)):
            raise ArgumentError(f"einloop backend: the lowering of {describe_node(sink)} gave "
                                f"{result.dtype}{tuple(result.shape)}, PyTorch "
                                f"{want.dtype}{tuple(want.shape)}")
        if isinstance(result.op, PlaceholderOp):      # an input passed through unchanged
            result = nn.cast(result, result.dtype, name=_name(sink))
        same = next((k for k, o in enumerate(outputs) if o is result), None)
        if same is None:
            same = len(outputs)
            outputs.append(result)
        where.append(same)
    read = set().union(*(_placeholders_read(o) for o in outputs))
    kept = [(a, p) for a, p in zip(reads, placeholders) if p.op in read]
    return [a for a, _ in kept], [p for _, p in kept] + outputs, where


def _placeholders_read(t) -> set:
    """The placeholder operations *t*'s DAG reads (a node's input may be read for its shape
    alone, as ``full_like``'s)."""
    seen, found, stack = set(), set(), [t]
    while stack:
        x = stack.pop()
        if id(x.op) in seen:
            continue
        seen.add(id(x.op))
        if isinstance(x.op, PlaceholderOp):
            found.add(x.op)
        stack.extend(x.op.input_tensors)
    return found


class Kernel:
    """One group's kernel (:func:`declare_kernel`): ``run(env)`` reads the tensors it needs
    from *env* (node -> torch tensor) and stores each of its outputs there.  With *prepack*,
    its work on constant inputs alone (packing a weight) is a :class:`~.prepack.Prepack`
    (``prepack``), run again only when they change, and the kernel reads its outputs after
    its own (``call.kernel`` takes them after the tensors it writes)."""

    def __init__(self, sinks, reads, tensors, where, log, prepack=True):
        self.sinks, self.reads, self.tensors, self.where = sinks, reads, tensors, where
        self.name = _name(sinks[-1])
        n_out = len(tensors) - len(reads)
        kernel, self.prepack = _build(tensors, log, self.name, prepack)
        self.call = TensorCall(kernel, tensors, n_out)
        self.scalar = [s.meta["val"].dim() == 0 for s in sinks]

    def run(self, env):
        reads = [at_least_1d(env[a]) for a in self.reads]
        extra = () if self.prepack is None else \
            self.prepack.packed([reads[p] for p in self.prepack.sources])
        outs = self.call(reads, extra)
        for sink, k, scalar in zip(self.sinks, self.where, self.scalar):
            env[sink] = outs[k].reshape(()) if scalar else outs[k]


class EagerKernel:
    """A group's outputs computed by its ATen operators in PyTorch: where its einloop kernel
    could not be built (the reason is in one notice), the model still runs, correctly."""

    def __init__(self, group, sinks):
        self.sinks = sinks
        self.nodes = _needed(sinks, set(group))

    def run(self, env):
        local = dict(env)
        for n in self.nodes:
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), local.__getitem__)
            local[n] = n.target(*args, **kwargs)
        for sink in self.sinks:
            env[sink] = local[sink]


def _kernel(group, sinks, log, declared=None, table=None, prepack=True):
    """The einloop kernel of *group* writing *sinks*, or, if it cannot be built, its
    :class:`EagerKernel`.  With a list *declared*, the kernel's te tensors are appended to it
    instead of built (and the group runs in PyTorch): what
    :func:`einloop.torch.model_tune.extract_tasks` reads.  With a :class:`~.symbolic.
    SizeTable` *table*, symbolic sizes are size variables (a :class:`~.symbolic.
    SymbolicKernel`), and a kernel that cannot be built raises NotSymbolic instead.
    *prepack*: see :class:`Kernel`."""
    try:
        with declaring(table) if table is not None else contextlib.nullcontext():
            reads, tensors, where = declare_kernel(group, sinks)
        if table is not None:
            check_bound(tensors, _name(sinks[-1]))
        if declared is not None:        # a kernel over size variables: with its example sizes
            declared.append((tensors, table.hints_of(tensors))
                            if table is not None and shape_vars_of(tensors) else tensors)
            return EagerKernel(group, sinks)
        if table is not None and shape_vars_of(tensors):
            with warnings.catch_warnings():
                # its advice (split a loop over a size variable) is for a schedule's author;
                # these are einloop's own, replayed from a size where the loop was short
                warnings.simplefilter("ignore", VectorizeWarning)
                kernel = build(_dispatch(tensors, log, table.hints_of(tensors)), tensors,
                               name=_name(sinks[-1]))
            return SymbolicKernel(sinks, reads, tensors, where, kernel, table)
        return Kernel(sinks, reads, tensors, where, log, prepack)
    except UnboundSize:
        raise
    except Exception as exc:                           # noqa: BLE001 - the model must run
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if table is not None:
            raise NotSymbolic(f"the kernel of {describe_node(sinks[-1])} ({reason})") from exc
        if reason not in _noticed:
            _noticed.add(reason)
            warnings.warn(f"einloop backend: {describe_node(sinks[-1])} runs in PyTorch: its "
                          f"kernel could not be built ({reason})", BackendWarning, stacklevel=2)
        return EagerKernel(group, sinks)


def _needed(sinks, members) -> list:
    """The members the *sinks* depend on, in graph order."""
    seen, stack = set(), list(sinks)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(a for a in n.all_input_nodes if a in members)
    order = {n: i for i, n in enumerate(sinks[0].graph.nodes)}
    return sorted(seen, key=order.__getitem__)


def describe_node(node) -> str:
    """*node* as a user reads it in a notice: its operator and the graph's name for it
    (``aten.add.Tensor (node add_9)``), not FX's dump of its arguments."""
    return f"{node.target} (node {node.name})" if node.op == "call_function" else node.name


def _name(node) -> str:
    return "".join(c if c.isalnum() else "_" for c in node.name)


_noticed = set()


def _notice_untuned(log):
    """One notice per process for a log that lacks some of a model's kernels."""
    if log not in _noticed:
        _noticed.add(log)
        warnings.warn(f"einloop backend: {log} has no schedule for some of this model's "
                      "kernels; they run with the auto-scheduler's first guesses (tune the "
                      "model with einloop.torch.tune_model)", BackendWarning, stacklevel=4)


#: the tuning logs read, kept while their files stay as they were: {(path, strict): ((mtime,
#: size), context)}; a model's every kernel asks the log for its schedule, and reading a log of
#: thousands of records takes a second
_histories: dict = {}
#: logs kept at once
HISTORIES_KEPT = 4


def _history(log, strict=False):
    """``apply_history_best(log, strict=)``, read once while the file does not change (a
    TuningLogError where it does not parse)."""
    stat = os.stat(log)
    key, stamp = (os.path.realpath(log), strict), (stat.st_mtime_ns, stat.st_size)
    kept = _histories.get(key)
    if kept is None or kept[0] != stamp:
        if len(_histories) >= HISTORIES_KEPT:
            _histories.pop(next(iter(_histories)))
        kept = _histories[key] = (stamp, apply_history_best(log, strict=strict))
    return kept[1]


def _dispatch(tensors, log, hints):
    """The size dispatch of kernel *tensors* over size variables: the log's schedules tuned
    at several sizes, else the default schedule at *hints* (``{variable: [size]}``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UntunedScheduleWarning)
        ctx = _history(log) if log is not None else contextlib.nullcontext()
        with ctx:
            s, _ = auto_schedule(tensors, shape_hints=hints or None)
    if log is not None and any(issubclass(w.category, UntunedScheduleWarning) for w in caught):
        _notice_untuned(log)
    return s


def _build(tensors, log, name, prepack=True):
    """``(kernel, Prepack or None)``: the kernel of *tensors* built with the first of
    :func:`_schedules` that builds; with *prepack*, its work on constant inputs alone split
    off into a :class:`~.prepack.Prepack`."""
    schedules = _schedules(tensors, log)
    for k, s in enumerate(schedules):
        try:
            return _compiled(s, tensors, name, prepack)
        except Error:
            if k == len(schedules) - 1:
                raise
    raise InternalError("einloop backend: no schedule to build")     # _schedules gives one


def _compiled(s, tensors, name, prepack):
    """Schedule *s* of *tensors* compiled: ``(kernel, Prepack or None)`` (see :func:`_build`)."""
    if not prepack:
        return build(s, tensors, name=name), None
    split = build_split(s, tensors, name=name)
    return split.main, Prepack.of_split(split, tensors)


def _schedules(tensors, log) -> list:
    """The log's best schedule of *tensors*; else (untuned: one notice per process for a log
    that lacks kernels) their first seed schedule (:func:`seed_schedule`), then their
    default schedule."""
    if log is not None:
        try:
            with _history(log, strict=True):
                return [auto_schedule(tensors)[0]]
        except TuningError:                            # the log has no schedule for it
            _notice_untuned(log)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedScheduleWarning)
        default, _ = auto_schedule(tensors)
    seed = seed_schedule(tensors)
    return [default] if seed is None else [seed, default]


def seed_schedule(tensors):
    """The schedule of the auto-scheduler's first heuristic config of *tensors* (the one the
    tuner measures first: register tiles, a parallel outer loop, packed operands), or None
    where its space has none or it does not replay.  An untuned kernel runs it rather than
    the default schedule, which tiles nothing: a task whose every trial failed (builds timed
    out on a loaded machine) left the encoder's 2048 x 512 x 1536 projection at its default,
    hundreds of times slower than its first seed."""
    try:
        task = AutoTask.of_tensors(tensors)
        seeds = task.seed_configs(1)
        if not seeds:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return replay(task.candidate(seeds[0]).steps, outputs_of(tensors))
    except Error:
        return None


class PartitionModule(torch.nn.Module):
    """A partition of the graph run as einloop kernels, in place of its FX submodule."""

    def __init__(self, sub: torch.fx.GraphModule, log, declared=None, table=None,
                 prepack=True):
        super().__init__()
        graph = sub.graph
        sink_views(graph)
        self.inputs = [n for n in graph.nodes if n.op == "placeholder"]
        out = next(n for n in graph.nodes if n.op == "output")
        self.output = out.args[0]
        sinks = set()
        torch.fx.node.map_arg(self.output, sinks.add)
        groups = leading_views(trailing_views(group_nodes(graph.nodes)))
        member_of = {n: i for i, g in enumerate(groups) for n in g}
        for g in groups:
            for n in g:
                if any(member_of.get(u) != member_of[n] for u in n.users):
                    sinks.add(n)
        outs = {}
        for n in graph.nodes:
            if n in sinks and n.op == "call_function":
                outs.setdefault(member_of[n], []).append(n)
        steps = [_view_step(groups[g][0], table) if is_view_group(groups[g])
                 else _kernel(groups[g], outs[g], log, declared, table, prepack)
                 for g in _run_order(groups, member_of) if g in outs]
        self.kernels = _runs(steps, self.output)
        self.n_groups = len(groups)
        # with symbolic sizes: each call's sizes, read from the inputs, for the kernels
        self.bind = table.binder(self.inputs, graph) if table is not None else None

    @property
    def steps(self) -> list:
        """What the partition runs, in order, with a KernelRun's kernels and views one by
        one (for tests and diagnostics; ``kernels`` is what runs)."""
        return [st for k in self.kernels for st in (k.steps if isinstance(k, KernelRun) else (k,))]

    def forward(self, *args):
        env = dict(zip(self.inputs, args))
        if self.bind is not None:
            env[SIZES] = self.bind(args)
        for k in self.kernels:
            k.run(env)
        return torch.fx.node.map_arg(self.output, env.__getitem__)

    # only the graph it sits in calls it, and nothing hooks it: the call goes straight to
    # forward, without nn.Module.__call__'s checks for hooks (every call of the model)
    __call__ = forward


def _view_step(node, table):
    """The step that runs reshape *node* as a torch view (at the call's sizes, with a
    *table*)."""
    return SymbolicViewStep(node, table) if table is not None else ViewStep(node)


def _reads(step) -> set:
    """The nodes *step* (a Kernel, SymbolicKernel, ViewStep or EagerKernel) reads from the
    environment."""
    if isinstance(step, (Kernel, SymbolicKernel)):
        return set(step.reads)
    if isinstance(step, ViewStep):
        return {step.src}
    own = set(step.nodes)
    return {a for n in step.nodes for a in n.all_input_nodes if a not in own}


def _runs(steps, output) -> list:
    """*steps* with each run of two or more consecutive einloop kernels replaced by one
    :class:`~.kernel_run.KernelRun` (one native call per forward pass).  A reshape (a
    ViewStep) joins the run: of a kernel's output, the next kernel reads the same bytes; of a
    tensor from before the run (the partition's input, reshaped ahead of its first kernel),
    the kernels read that tensor.  Where a run cannot be made (it should always be), its
    steps run one by one."""
    read_after, later = [set() for _ in steps], set()
    torch.fx.node.map_arg(output, later.add)
    for i in range(len(steps) - 1, -1, -1):
        read_after[i] = set(later)
        later |= _reads(steps[i])
    out, run, produced, last = [], [], set(), 0

    def flush():
        if sum(isinstance(st, Kernel) for st in run) > 1:
            try:
                out.append(KernelRun(run, read_after[last]))
            except Exception as exc:                  # noqa: BLE001 - the model must run
                _notice(f"{len(run)} kernels run one by one: their sequence could not be "
                        f"built ({type(exc).__name__}: {exc})")
                out.extend(run)
        else:
            out.extend(run)
        run.clear(), produced.clear()

    for i, st in enumerate(steps):
        if isinstance(st, Kernel):
            run.append(st)
            produced.update(st.sinks)
            last = i
        elif isinstance(st, ViewStep):
            run.append(st)
            produced.add(st.node)
            last = i
        else:
            flush()
            out.append(st)
    flush()
    return out


def _notice(message):
    """Warn once per process with *message* (a :class:`BackendWarning`)."""
    if message not in _noticed:
        _noticed.add(message)
        warnings.warn(f"einloop backend: {message}", BackendWarning, stacklevel=3)


def _run_order(groups, member_of) -> list:
    """The groups' indices in an order where each runs after the groups it reads (they form
    a DAG: :func:`group_nodes` merges nothing that would make a cycle), ties in graph order."""
    deps = {g: {member_of[a] for n in nodes for a in n.all_input_nodes
                if a in member_of and member_of[a] != g} for g, nodes in enumerate(groups)}
    done, order = set(), []
    while len(order) < len(groups):
        ready = [g for g in range(len(groups)) if g not in done and deps[g] <= done]
        if not ready:
            raise InternalError("einloop backend: the kernels of a partition read each other "
                                "in a cycle")
        done.add(ready[0])
        order.append(ready[0])
    return order


def compile_graph(gm: torch.fx.GraphModule, example_inputs, log=None, declared=None,
                  table=None, prepack=True):
    """*gm* (an ATen graph) with its supported partitions replaced by :class:`PartitionModule`\\
    s; returns the module's callable.  *declared*: see :func:`_kernel`.  With a
    :class:`~.symbolic.SizeTable` *table*, symbolic sizes are size variables, and what cannot
    be built so raises NotSymbolic (see :func:`compile_symbolic`).  *prepack*: see
    :class:`Kernel`; the graph inputs it concerns are marked :data:`CONSTANT`."""
    gm.graph.eliminate_dead_code()         # a tuple's unused parts, left by some tracers
    guard_indices(gm.graph)
    gm.recompile()
    partitioner = CapabilityBasedPartitioner(gm, EinloopSupport(table is not None),
                                             allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    if not partitions:
        _notice_fallbacks(gm)                  # all of it in PyTorch: that too is said once
        return compiled_forward(gm)
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op == "call_module" and node.target.startswith("fused_"):
            sub = getattr(fused, node.target)
            inputs = [n for n in sub.graph.nodes if n.op == "placeholder"]
            for p, a in zip(inputs, node.args):
                if isinstance(a, torch.fx.Node) and a.meta.get(CONSTANT):
                    p.meta[CONSTANT] = True
            try:
                setattr(fused, node.target, PartitionModule(sub, log, declared, table,
                                                            prepack))
            except NotSymbolic:
                raise
            except Exception as exc:                   # noqa: BLE001 - the model must run
                if table is not None:
                    raise NotSymbolic(f"a part of the graph ({type(exc).__name__}: "
                                      f"{exc})") from exc
                warnings.warn(f"einloop backend: a part of the graph runs in PyTorch: "
                              f"{type(exc).__name__}: {exc}", BackendWarning, stacklevel=2)
    fused.recompile()
    _notice_fallbacks(fused)
    return compiled_forward(fused)


def compiled_forward(gm: torch.fx.GraphModule):
    """*gm*'s generated ``forward``, generated now.  A lazily recompiled GraphModule's
    ``forward`` is a trampoline until its first call, and a caller that kept that bound method
    would go through it, and through ``nn.Module.__call__``, on every call."""
    if hasattr(gm, "real_recompile"):
        gm.real_recompile()
    return gm.forward


def _notice_fallbacks(gm):
    left = sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                   and n.target not in (operator.getitem, check_indices) and not _is_size(n)})
    if left and ("fallback", tuple(left)) not in _noticed:
        _noticed.add(("fallback", tuple(left)))
        warnings.warn(f"einloop backend: {len(left)} kind(s) of operators run in PyTorch: "
                      f"{', '.join(left[:8])}{' ...' if len(left) > 8 else ''}",
                      BackendWarning, stacklevel=3)


#: the keys of ``torch.compile(..., backend="einloop", options={...})``
OPTIONS = ("log", "symbolic", "prepack")


def einloop_backend(gm, example_inputs, options=None, **_):
    """The ``torch.compile`` backend (``backend="einloop"``); *options*: ``{"log": PATH}``
    to run the log's tuned schedules; ``{"symbolic": False}`` to compile a graph with
    dynamic sizes again at each new size (kernels specialised to it) rather than once;
    ``{"prepack": False}`` to pack the weights on every call (see :mod:`.prepack`)."""
    if options is not None and not isinstance(options, dict):
        raise ArgumentError(f"torch.compile(backend='einloop', options={options!r}): options "
                            f"is a dict, e.g. {{'log': 'tuning_logs/model.jsonl'}}; the keys are "
                            f"{', '.join(map(repr, OPTIONS))}")
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ArgumentError(f"torch.compile(backend='einloop'): unknown option(s) "
                            f"{', '.join(map(repr, unknown))}; the options are "
                            f"{', '.join(map(repr, OPTIONS))}")
    log = _log_option(options.get("log"))
    symbolic = _flag(options, "symbolic", "a graph with dynamic sizes compiled once, its "
                     "kernels over size variables", "compiled again at each new size")
    prepack = _flag(options, "prepack", "a weight's packed copy made once, again when the "
                    "weight changes", "made on every call: for a model whose weights are "
                    "written through param.data")
    return aten_backend(gm, example_inputs, log, symbolic=symbolic, prepack=prepack)


def _log_option(log):
    """The ``log`` option checked: None, or the path of a readable tuning log whose every
    record parses (a file that is not one is an error here, not a model left untuned with a
    notice that the log lacks its kernels)."""
    if log is None:
        return None
    if not isinstance(log, (str, os.PathLike)):
        raise ArgumentError(f"torch.compile(backend='einloop', options={{'log': {log!r}}}): the "
                            f"log is the path of a tuning log (a str), got "
                            f"{type(log).__name__} {log!r}")
    if not os.path.isfile(log):
        raise ArgumentError(f"torch.compile(backend='einloop', options={{'log': {log!r}}}): no "
                            "tuning log there; write one with einloop.torch.tune_model(model, "
                            "example_inputs, n_trial=, log=)")
    _history(log, strict=True)          # a TuningLogError naming the line that does not parse
    return log


def _flag(options, name, when_true, when_false) -> bool:
    """``options[name]`` (True by default), an ArgumentError saying what each value does
    unless it is a bool."""
    value = options.get(name, True)
    if not isinstance(value, bool):
        raise ArgumentError(f"torch.compile(backend='einloop', options={{{name!r}: {value!r}}}): "
                            f"give True ({when_true}) or False ({when_false})")
    return value


def _symbolic(graph) -> bool:
    """Does the ATen *graph* have a symbolic size (dynamo's dynamic shapes)?"""
    for n in graph.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor)
                                           and not all(isinstance(d, int) for d in v.shape)):
            return True
    return False


class PerSizeGraph:
    """An ATen graph with symbolic sizes, run with kernels specialised to each call's sizes:
    on the first call at new sizes the graph is traced again with them (its size arguments
    become constants), compiled by :func:`compile_graph`, and kept.  So one compiled model
    serves every batch size, each size with kernels of its own (tuned if the log has them at
    that size).  The fallback of :func:`compile_symbolic` (and, with ``options={"symbolic":
    False}``, the path of every graph with symbolic sizes): each new size costs a compilation."""

    def __init__(self, graph, log, declared):
        self.graph, self.log, self.declared = graph, log, declared
        self.compiled = {}

    def __call__(self, *args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else int(a)
                    for a in args)
        fn = self.compiled.get(key)
        if fn is None:
            from torch.fx.experimental.proxy_tensor import make_fx
            static = make_fx(self.graph, tracing_mode="fake")(*args)
            fn = self.compiled[key] = compile_graph(static, args, self.log, self.declared)
        return fn(*args)


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of *gm* to compile, whose graph may be rewritten (the nodes' fake values are
    shared with *gm*'s, which stays as it is for the per-size fallback)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def _compile_folded(gm, example_inputs, log, declared, table):
    """:func:`compile_graph` of a copy of *gm* with its batched products folded
    (:func:`~.symbolic.fold_batched_products`), its linear layers too where a kernel would
    otherwise have a size no call can bind."""
    before = len(declared) if declared is not None else 0
    for linear in (False, True):
        with warnings.catch_warnings():     # sizes in the reshapes views.sink_views makes
            warnings.filterwarnings("ignore", message="Raw SymInt value", category=UserWarning)
            work = _copy(gm)
            fold_batched_products(work.graph, linear)
            try:
                return compile_graph(work, example_inputs, log, declared, table)
            except UnboundSize:
                if linear:
                    raise
                if declared is not None:
                    del declared[before:]       # the first attempt's declarations
    raise InternalError("einloop backend: unreachable")


def compile_symbolic(gm, example_inputs, log=None, declared=None):
    """The ATen graph *gm*, which has symbolic sizes, compiled once with them as size
    variables (:mod:`.symbolic`): its kernels serve every size.  Where that cannot be done
    (what :class:`~.symbolic.NotSymbolic` says), the graph is compiled per call size
    (:class:`PerSizeGraph`), with one notice saying why."""
    try:
        table = SizeTable.of_graph(gm)
        fn = _compile_folded(gm, example_inputs, log, declared, table)
    except NotSymbolic as exc:
        _log.debug("einloop backend: a graph with symbolic sizes is compiled per call size "
                   "(%s)", exc)
        _notice(f"a graph with symbolic sizes is compiled again at each new size: {exc}")
        return PerSizeGraph(gm, log, declared)
    _log.debug("einloop backend: a graph with symbolic sizes (%s) is compiled once, its "
               "kernels over size variables", ", ".join(sorted(map(str, table.symbols))))
    if declared is not None:            # extraction: the graph itself runs, in PyTorch
        return gm.forward
    return fn


def aten_backend(gm, example_inputs, log=None, declared=None, symbolic=True, prepack=True):
    """*gm* through ``aot_autograd`` with the backend's decompositions, each ATen graph
    (forward and backward) compiled by :func:`compile_graph`, or, when it has symbolic
    sizes, by :func:`compile_symbolic` (with *symbolic*; else per call size,
    :class:`PerSizeGraph`).  A static forward graph's parameters and buffers are its
    constant inputs (:func:`mark_constants`), their packs made once with *prepack*."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(graph, inputs, forward=False):
        if _symbolic(graph):
            return make_boxed_func(compile_symbolic(graph, inputs, log, declared) if symbolic
                                   else PerSizeGraph(graph, log, declared))
        if forward:
            mark_constants(graph)
        return make_boxed_func(compile_graph(graph, inputs, log, declared, prepack=prepack))
    return aot_autograd(fw_compiler=functools.partial(compiler, forward=True),
                        bw_compiler=compiler, decompositions=decompositions())(gm, example_inputs)


def mark_constants(graph):
    """Mark :data:`CONSTANT` the inputs of forward *graph* that dynamo calls static: the
    model's parameters and buffers, the same tensors on every call (their values change only
    in place, which their version counters show: see :mod:`.prepack`).  A backward graph's
    inputs are the forward's saved tensors, new on every step: it has none."""
    context = torch._guards.TracingContext.try_get()
    static = getattr(getattr(context, "fw_metadata", None), "static_input_indices", None) or ()
    inputs = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for i in static:
        if 0 <= i < len(inputs):
            inputs[i].meta[CONSTANT] = True
