"""Schedule primitives of TVM and Halide that einloop does not have, each with what to do instead.

``Stage`` and ``Schedule`` look a missing attribute up here, so ``s[C].bind(...)`` raises
:class:`~einloop.errors.UnsupportedPrimitiveError` with advice (an ``AttributeError`` too, so
``hasattr`` stays False), while a name that is no primitive at all stays a plain AttributeError.
"""
from ..errors import UnsupportedPrimitiveError

_CPU_ONLY = ("einloop compiles for the CPU only, so there are no GPU threads or blocks; use "
             "parallel() on an outer loop and vectorize() on the innermost one")
_STORED_WHERE_COMPUTED = ("a stage is stored where it is computed; use compute_at (or "
                          "compute_root) to choose that place")
_LAYOUT = ("inputs and outputs keep the row-major layout of their declared shape; a stage's "
           "own buffer takes its dimensions in another order with s[T].storage_order(*axes) "
           "(outermost first), a tensor is read in blocks along one dimension with "
           "s.pack(T, axis, factor); otherwise declare a copy in the layout you want with "
           "te.compute")

STAGE_PRIMITIVES = {
    "bind": _CPU_ONLY,
    "env_threads": _CPU_ONLY,
    "gpu_threads": _CPU_ONLY,
    "gpu_blocks": _CPU_ONLY,
    "gpu_tile": _CPU_ONLY,
    "rfactor": "as in TVM, rfactor is a method of the schedule, not of a stage: "
               "RF = s.rfactor(C, k_inner)",
    "set_store_predicate": "a stage stores every element of its region; put the condition in the "
                           "compute (te.if_then_else) or in the reduction's where=",
    "set_scope": "einloop chooses storage itself: a stage computed at a loop gets a local buffer, "
                 "a root stage a whole-kernel one; use cache_read/cache_write with compute_at to "
                 "stage data",
    "storage_align": "buffers are dense; to pad rows, declare the tensor with a padded shape",
    "double_buffer": "there are no asynchronous copies on the CPU; cache_read with compute_at "
                     "already stages each tile",
    "pragma": "there are no pragmas; use unroll(), vectorize() and parallel()",
    "rolling_buffer": "there are no sliding-window buffers; compute_at computes the region each "
                      "iteration of its loop needs",
    "transform_layout": _LAYOUT,
    "reorder_storage": "einloop's s[T].storage_order(*axes) does this, with the dimensions "
                       "outermost first (as reorder), where Halide lists them innermost first",
    "store_at": _STORED_WHERE_COMPUTED,
    "store_root": _STORED_WHERE_COMPUTED,
    "hoist_storage": _STORED_WHERE_COMPUTED,
    "compute_with": "stages do not share loop nests; compute one at a loop of the other with "
                    "compute_at",
    "bound": "loop extents come from the declared shape; declare the shape you want",
}

SCHEDULE_PRIMITIVES = {
    "create_group": "there are no stage groups; compute each stage at the loop you want with "
                    "compute_at",
    "normalize": "nothing to do: einloop's loops always start at 0 with unit stride",
}


def missing_attribute(owner, where, name, primitives):
    """Raise for attribute *name* that *owner* lacks: advice for a known primitive, else the usual
    AttributeError.  ``where`` is how the user reaches *owner* (``s[C]``, ``s``)."""
    advice = primitives.get(name)
    if advice is None:
        raise AttributeError(f"{type(owner).__name__!r} object has no attribute {name!r}")
    raise UnsupportedPrimitiveError(f"{where}.{name}: {name} is a TVM/Halide schedule primitive "
                                    f"that einloop does not support; {advice}")
