"""Dynamo's dynamic sizes as einloop size variables: one kernel per group, at every size.

With ``torch.compile(..., dynamic=True)`` (or ``torch._dynamo.mark_dynamic``) the ATen graph
the backend gets has symbolic sizes: a placeholder ``s77`` (the batch), fake tensors of shape
``(s77, 512)``, and sizes that are expressions of them (``s27*s77``: batch and sequence viewed as
the rows of a linear layer).  A :class:`SizeTable` gives each of them a te extent while the
graph's kernels are declared (:func:`declaring`): an int stays an int, a symbol becomes a
``te.size_var`` of its own name, and an expression of symbols becomes a size variable of its own
(te extents are variables, not expressions), which the kernel binds from the argument that has
that size, like any other.  Only a reshape relates them (:func:`reshape`): its runs of
dimensions are matched on the symbolic expressions PyTorch gives, and its index map reads the
variables' values.  A size that only a kernel's intermediate stages would have cannot be bound
by a call: :func:`fold_batched_products` first rewrites the products ATen computes over
flattened leading dimensions (a linear layer's ``s27*s77`` rows, attention's ``4*s77`` batch
of heads) into products over those dimensions.

At run time the table computes every size's value from the partition's inputs
(:meth:`SizeTable.binder`): a :class:`SymbolicKernel` allocates its outputs with them and runs
its kernel (one build, every size), a :class:`SymbolicViewStep` reshapes with them.

What cannot be made symbolic raises :class:`NotSymbolic` while the graph compiles; the backend
then compiles the graph per call size instead (``backend.PerSizeGraph``): never an error a user
sees.
"""
from __future__ import annotations

import contextlib
import contextvars

import sympy
import torch

from .. import te
from ..autotune.symbolic.points import extent_names
from ..nn.elementwise import shape_of as te_shape
from ..nn.layout import regroup
from ..ir.expr import ShapeVar
from .signature import TORCH_DTYPES, as_array
from .tensor_call import at_least_1d
from .views import ViewStep

#: the key under which a partition's environment holds the call's size values
SIZES = object()


class NotSymbolic(Exception):
    """A graph (or a part of it) that cannot be compiled with symbolic sizes; caught by the
    backend, which compiles such a graph per call size.  Never reaches a user."""


class UnboundSize(NotSymbolic):
    """A kernel with a size variable that only its intermediate stages have (no call could
    bind it): the backend folds the graph's linear layers too and tries again."""


def check_bound(tensors, name):
    """UnboundSize if a size variable of the kernel *tensors* is in no argument's shape."""
    from ..te.bind import shape_vars_of
    in_args = {id(d) for t in tensors for d in t.shape}
    unbound = [v.name for v in shape_vars_of(tensors) if id(v) not in in_args]
    if unbound:
        raise UnboundSize(f"the kernel {name} has the size(s) {', '.join(unbound)} inside it "
                          "only, which no call can bind")


#: the SizeTable of the kernel being declared (in this thread or task), or None
_active = contextvars.ContextVar("einloop_torch_size_table", default=None)


@contextlib.contextmanager
def declaring(table):
    """Declarations inside map PyTorch's symbolic sizes onto *table*'s extents."""
    token = _active.set(table)
    try:
        yield table
    finally:
        _active.reset(token)


def active():
    """The :class:`SizeTable` of the declaration under way, or None (static sizes)."""
    return _active.get()


def _floordiv(a, b):
    return a // b


#: the functions of torch's sympy expressions, as Python evaluates them on ints
_FUNCTIONS = {"FloorDiv": _floordiv, "CleanDiv": _floordiv, "IntTrueDiv": _floordiv,
              "Mod": lambda a, b: a % b, "PythonMod": lambda a, b: a % b,
              "ModularIndexing": lambda x, d, m: (x // d) % m,
              "CeilDiv": lambda a, b: -(-a // b), "Max": max, "Min": min}


class SizeTable:
    """The te extents of one graph's sizes, and their values at a call (module docstring)."""

    def __init__(self):
        self.vars = {}          # sympy expression -> ShapeVar
        self.exprs = {}         # ShapeVar name -> sympy expression
        self.hints = {}         # ShapeVar name -> its size in the traced example
        self.symbols = {}       # sympy Symbol -> its hint
        self._compiled = {}     # sympy expression -> fn(values by symbol name) -> int

    @classmethod
    def of_graph(cls, gm):
        """The table of the ATen graph *gm*: each symbol a size of its has, with its example
        value.  NotSymbolic for what the symbolic path does not run: a data-dependent size
        (no example value), a tensor einloop's symbolic call cannot hand to NumPy
        (bfloat16)."""
        table = cls()
        for node in gm.graph.nodes:
            for v in _vals(node):
                if isinstance(v, torch.Tensor):
                    if v.dtype is torch.bfloat16:
                        raise NotSymbolic("a bfloat16 tensor")
                    sizes = v.shape
                else:
                    sizes = (v,) if isinstance(v, torch.SymInt) else ()
                for d in sizes:
                    if isinstance(d, torch.SymInt):
                        table._learn(d)
        if not table.symbols:
            raise NotSymbolic("no symbolic size")
        return table

    # -- declaring ---------------------------------------------------------------------------

    def expr(self, d):
        """The sympy expression of a size: an int, or a SymInt's expression."""
        if isinstance(d, torch.SymInt):
            return d.node.expr
        if isinstance(d, (int, sympy.Expr)):
            return sympy.sympify(d)
        raise NotSymbolic(f"a size of type {type(d).__name__}")

    def extent(self, d):
        """The te extent of size *d* (int or SymInt)."""
        e = self.expr(d)
        if e.is_Integer:
            return int(e)
        unknown = e.free_symbols - set(self.symbols)
        if unknown:
            raise NotSymbolic(f"the size {e} has a symbol no size of the graph is")
        found = self.vars.get(e)
        if found is None:
            name = _identifier(e)
            found = self.vars[e] = te.size_var(name)
            self.exprs[name] = e
            self.hints[name] = self.value(e, {str(s): h for s, h in self.symbols.items()})
        return found

    def _learn(self, d):
        """Record the example value (hint) of SymInt *d* if it is a symbol of its own."""
        e = d.node.expr
        if not e.free_symbols:
            return
        hint = d.node.hint
        if hint is None:
            raise NotSymbolic(f"the size {e} has no example value (a data-dependent size)")
        if e.is_Symbol:
            self.symbols[e] = int(hint)

    def shape(self, t) -> tuple:
        """A fake tensor's shape as te extents (a 0-d tensor: (1,), as the backend views it)."""
        return tuple(self.extent(d) for d in t.shape) or (1,)

    def expr_of(self, extent):
        """The sympy expression of a te extent this table gave (an int: itself)."""
        if isinstance(extent, ShapeVar):
            return self.exprs[extent.name]
        return sympy.Integer(int(extent))

    def hints_of(self, tensors) -> dict:
        """``{size variable: [its example size]}`` for those of *tensors*' kernel: where its
        untuned default schedule is made."""
        return {n: [self.hints[n]] for n in extent_names(tensors) if n in self.hints}

    # -- values at a call --------------------------------------------------------------------

    def value(self, e, values) -> int:
        """The int value of expression *e* given the symbols' *values* (by name)."""
        return self._compile(e)(values)

    def _compile(self, e):
        """``fn(values by symbol name) -> int`` for expression *e* (made once)."""
        fn = self._compiled.get(e)
        if fn is None:
            names = sorted(e.free_symbols, key=str)
            try:
                code = sympy.lambdify(names, e, modules=[_FUNCTIONS, "math"])
            except Exception as exc:                  # noqa: BLE001 - an unknown function
                raise NotSymbolic(f"the size {e} cannot be evaluated ({exc})") from None
            keys = [str(s) for s in names]
            fn = self._compiled[e] = lambda v: int(code(*[v[k] for k in keys]))
        return fn

    def evaluator(self, shape):
        """``fn(values) -> tuple of ints``: the fake *shape* at a call's symbol *values*."""
        exprs = [self.expr(d) for d in shape]
        if all(e.is_Integer for e in exprs):
            fixed = tuple(int(e) for e in exprs)
            return lambda values: fixed
        fns = [self._compile(e) for e in exprs]
        return lambda values: tuple(fn(values) for fn in fns)

    def binder(self, inputs, graph):
        """``fn(args) -> {symbol name: int}`` for a partition *graph* whose inputs are the
        nodes *inputs*: each symbol read from the first input that has it as a size (a SymInt
        input, or a tensor's dimension).  NotSymbolic where a symbol the partition's sizes
        use has none."""
        sources = {}
        for k, node in enumerate(inputs):
            v = node.meta.get("val")
            if isinstance(v, torch.SymInt) and v.node.expr.is_Symbol:
                sources.setdefault(str(v.node.expr), (k, None))
            elif isinstance(v, torch.Tensor):
                for dim, d in enumerate(v.shape):
                    if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                        sources.setdefault(str(d.node.expr), (k, dim))
        used = set()
        for node in graph.nodes:
            for v in _vals(node):
                for d in (v.shape if isinstance(v, torch.Tensor) else (v,)):
                    if isinstance(d, torch.SymInt):
                        used |= d.node.expr.free_symbols
        missing = sorted(str(s) for s in used if str(s) not in sources)
        if missing:
            raise NotSymbolic(f"no input of the partition has the size(s) {', '.join(missing)}")
        plan = tuple((name, k, dim) for name, (k, dim) in sources.items())

        def bind(args):
            return {name: int(args[k]) if dim is None else args[k].shape[dim]
                    for name, k, dim in plan}
        return bind


def _vals(node) -> tuple:
    """The fake values of *node* (a tuple's parts one by one)."""
    v = node.meta.get("val")
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _identifier(e) -> str:
    """A size variable's name for expression *e*: its symbol's (``s77``), or the expression
    spelt as an identifier (``s27*s77`` -> ``s27_x_s77``)."""
    if e.is_Symbol:
        return str(e)
    text = str(e).replace(" ", "").replace("**", "_pow_").replace("*", "_x_")
    return "e_" + "".join(c if c.isalnum() else "_" for c in text)


# -- reshape over symbolic sizes -----------------------------------------------------------------

def reshape(x, out, table):
    """*x* (te tensor) reshaped to the fake tensor *out*'s shape, whose sizes may be symbolic:
    the dimensions are matched in runs of equal products (PyTorch's expressions compared by
    sympy), each run's flat index computed from the target's extents and unravelled with the
    source's."""
    src = [table.expr_of(d) for d in te_shape(x)]
    dst = [table.expr(d) for d in out.shape] or [sympy.Integer(1)]
    return regroup(x, _runs(src, dst), te_shape(x), table.shape(out))


def _runs(src, dst) -> list:
    """``[(source dims, target dims)]``: consecutive runs of the two shapes (sympy sizes) with
    equal products, trailing dimensions of size 1 joining the last run.  NotSymbolic where the
    products cannot be matched."""
    runs, i, j = [], 0, 0
    while i < len(src) and j < len(dst):
        a, b, pa, pb = [i], [j], src[i], dst[j]
        i, j = i + 1, j + 1
        while sympy.expand(pa - pb) != 0:
            if i < len(src) and _divides(pa, pb):
                a.append(i)
                pa, i = pa * src[i], i + 1
            elif j < len(dst) and _divides(pb, pa):
                b.append(j)
                pb, j = pb * dst[j], j + 1
            else:
                raise NotSymbolic(f"a reshape of {src} into {dst}: the sizes do not match")
        runs.append((a, b))
    rest_a, rest_b = list(range(i, len(src))), list(range(j, len(dst)))
    if any(src[k] != 1 for k in rest_a) or any(dst[k] != 1 for k in rest_b) or not runs:
        raise NotSymbolic(f"a reshape of {src} into {dst}: the sizes do not match")
    runs[-1] = (runs[-1][0] + rest_a, runs[-1][1] + rest_b)
    return runs


def _divides(p, q) -> bool:
    """Does *p* divide *q* as polynomials in the sizes (``q / p`` has no denominator)?"""
    return sympy.fraction(sympy.cancel(q / p))[1] == 1


# -- batched products over several batch dimensions ---------------------------------------------

_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
          torch.ops.aten.reshape.default)


def fold_batched_products(graph, linear=True) -> int:
    """Rewrite (in place) the products of *graph* that ATen computes over flattened leading
    dimensions into products over those dimensions; returns how many:

    * ``view(bmm(view(A, [b, m, k]), view(B, [b, k, n])), [*lead, m, n])``, where ``A`` and
      ``B`` have the leading dimensions *lead* (whose product is ``b``: batch and heads of
      attention), becomes ``matmul(A, B)``;
    * with *linear*, ``view(mm(view(X, [r, k]), W), [*lead, n])`` and its ``addmm`` with a
      bias, where ``X`` has the leading dimensions *lead* (whose product is ``r``: batch and
      sequence of a linear layer), becomes ``matmul(X, W)`` (plus the bias).  Only where
      needed: a linear layer over rows is a plain GEMM, which the auto-scheduler tiles better
      than a product broadcast over leading dimensions.

    With symbolic sizes the flattened size (``4*s77``, ``s27*s77``) is an extent of a
    kernel's intermediate stages, which no argument may have, so no call could bind it; over
    the leading dimensions themselves the kernel has only the sizes its arguments have."""
    count = 0
    for n in list(graph.nodes):
        if n.op != "call_function":
            continue
        folded = _folded(n, linear)
        if folded is None:
            continue
        operands, bias = folded
        users = list(n.users)
        with graph.inserting_before(n):
            product = graph.call_function(torch.ops.aten.matmul.default, operands)
            product.meta["val"] = users[0].meta["val"]
            if bias is not None:
                product = graph.call_function(torch.ops.aten.add.Tensor, (product, bias))
                product.meta["val"] = users[0].meta["val"]
        for u in users:
            u.replace_all_uses_with(product)
            graph.erase_node(u)
        graph.erase_node(n)
        count += 1
    return count


def _folded(n, linear=True):
    """``((A, B), bias or None)``: the operands over the leading dimensions of a product *n*
    that :func:`fold_batched_products` folds, else None."""
    aten = torch.ops.aten
    if n.target is aten.bmm.default:
        (a, b), bias = n.args[:2], None
    elif n.target is aten.mm.default and linear:
        (a, b), bias = n.args[:2], None
    elif n.target is aten.addmm.default and linear and len(n.args) == 3 and not n.kwargs:
        bias, a, b = n.args
    else:
        return None
    users = list(n.users)
    if not users or not all(_is_view_node(u, _VIEWS) and u.args[0] is n for u in users):
        return None
    out = tuple(users[0].meta["val"].shape)
    if not all(_same(tuple(u.meta["val"].shape), out) for u in users) or len(out) < 3:
        return None
    lead = out[:-2] if n.target is aten.bmm.default else out[:-1]
    if not _is_view_node(a, _VIEWS):
        return None
    sa = _fake_shape_of(a.args[0])
    if sa is None or len(sa) != len(out) or not _same(sa[:len(lead)], lead):
        return None
    if n.target is aten.bmm.default:
        if not _is_view_node(b, _VIEWS):
            return None
        sb = _fake_shape_of(b.args[0])
        if sb is None or len(sb) != len(out) or not _same(sb[:-2], lead):
            return None
        return (a.args[0], b.args[0]), None
    if _fake_shape_of(b) is None or len(_fake_shape_of(b)) != 2:
        return None
    return (a.args[0], b), bias


def _is_view_node(x, views) -> bool:
    return isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target in views \
        and "val" in x.meta


def _fake_shape_of(x):
    v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def _same(a, b) -> bool:
    """Are the fake shapes *a* and *b* the same (their sizes' expressions equal)?"""
    def e(d):
        return d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(d)
    return len(a) == len(b) and all(sympy.expand(e(x) - e(y)) == 0 for x, y in zip(a, b))


# -- running ----------------------------------------------------------------------------------

class SymbolicKernel:
    """A group's kernel with size variables: ``run(env)`` reads its tensors and the call's
    sizes (``env[SIZES]``) from *env*, allocates its outputs at those sizes and runs the one
    kernel, which binds its variables from the arguments' shapes (and checks they agree)."""

    def __init__(self, sinks, reads, tensors, where, kernel, table):
        self.sinks, self.reads, self.where, self.kernel = sinks, reads, where, kernel
        self.name = kernel.name
        written = tensors[len(reads):]
        self.shapes = [table.evaluator(_fake_shape(t, sinks, where, k))
                       for k, t in enumerate(written)]
        self.dtypes = [TORCH_DTYPES[t.dtype] for t in written]
        self.scalar = [s.meta["val"].dim() == 0 for s in sinks]

    def run(self, env):
        values = env[SIZES]
        reads = [as_array(at_least_1d(env[a]).detach().contiguous()) for a in self.reads]
        outs = [torch.empty(shape(values) or (1,), dtype=dtype)
                for shape, dtype in zip(self.shapes, self.dtypes)]
        self.kernel(*reads, *[as_array(o) for o in outs])
        for sink, k, scalar in zip(self.sinks, self.where, self.scalar):
            env[sink] = outs[k].reshape(()) if scalar else outs[k]


def _fake_shape(t, sinks, where, k):
    """The fake shape of the *k*-th output of a kernel (the first sink written there)."""
    sink = next(s for s, w in zip(sinks, where) if w == k)
    return tuple(sink.meta["val"].shape)


class SymbolicViewStep(ViewStep):
    """A reshape of a kernel's output to a shape with symbolic sizes, made at the call's."""

    def __init__(self, node, table):
        super().__init__(node)
        self.shape_at = table.evaluator(tuple(node.meta["val"].shape))

    def run(self, env):
        env[self.node] = env[self.src].reshape(self.shape_at(env[SIZES]))


__all__ = ["NotSymbolic", "SIZES", "SizeTable", "SymbolicKernel", "SymbolicViewStep",
           "UnboundSize", "active", "check_bound", "declaring", "fold_batched_products", "reshape"]
