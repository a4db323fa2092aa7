"""PyTorch custom operators from einloop declarations (needs ``pip install einloop[torch]``).

    import einloop.torch as et

    @et.custom_op("mylib::rmsnorm")
    def rmsnorm(x, w):            # te placeholders shaped and typed like the call's tensors
        ...
        return te.compute(...)

    y = rmsnorm(x, w)             # torch tensors in and out; one kernel per signature, kept

The operator is a real ``torch.library`` custom op (``torch.ops.mylib.rmsnorm``): a fake
implementation derived from the declaration lets ``torch.compile(fullgraph=True)`` trace
through it, and ``torch.library.opcheck`` passes.  This layer sits above every other: nothing
in einloop imports it, and importing einloop never imports torch.
"""
from .op import custom_op, CustomOp
from .signature import Signature

__all__ = ["custom_op", "CustomOp", "Signature"]
