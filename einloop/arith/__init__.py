"""Integer and expression analysis shared by declaration checks, bound inference and lowering."""
from ..ir.visit import substitute, transform, walk, free_vars, reads_of
from .bounds import const_bounds, region_of, prove
from .refine import holds_on, negate, refine
from .simplify import simplify

__all__ = ["substitute", "transform", "walk", "free_vars", "reads_of", "const_bounds",
           "region_of", "prove", "holds_on", "negate", "refine", "simplify"]
