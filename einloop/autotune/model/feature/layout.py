"""The layout of the tuner's feature vector: slot counts, field names, the schema hash.

See :mod:`einloop.autotune.model.feature.extract` for what the values mean.
"""
import hashlib

from ....errors import InternalError

N_LOOPS_MAIN = 6
N_ACCESSES_MAIN = 5
N_LOOPS_SECOND = 3
N_ACCESSES_SECOND = 3
CACHE_LINE = 64
_INTRINSIC_COST = 8.0
_VIRTUAL = "virtual"          # kind of the loop recovered from unroll replicas
_MAX_MERGED = 4096            # real unrolled loops merged into one virtual loop, at most

# ------------------------------------------------------------------------------------------------
# the schema
# ------------------------------------------------------------------------------------------------

_GLOBAL = [
    "extract_failed",            # 1 if extraction failed: the rest of the row is zero
    "flops",                     # float ops x trip counts, whole kernel
    "flops_vectorized_frac",     # fraction of flops in stores inside a vectorized loop
    "flops_parallel_frac",       # fraction of flops in stores inside a parallel loop
    "stores_vectorized_frac",    # trip-weighted fraction of stores inside a vectorized loop
    "stores_parallel_frac",
    "stores_guarded_frac",       # trip-weighted fraction of stores under an if
    "n_store_stmts",
    "n_groups",
    "n_loops",
    "max_depth",
    "n_parallel_loops",
    "has_parallel",
    "max_parallel_extent",       # largest product of nested parallel extents around a store
    "n_vectorized_loops",
    "max_vector_lanes",
    "n_unrolled_groups",         # store groups inside an unrolled loop (expanded or not)
    "max_replicas",              # largest unroll-expanded replica group
    "n_stages",                  # distinct buffers written
    "n_allocates",
    "local_bytes",               # sum of allocated local buffers (per thread)
    "local_bytes_max",
    "n_temps",
    "temp_bytes",
    "arg_bytes",
    "bytes_stored",              # trip-weighted element bytes of all stores
    "bytes_loaded",              # trip-weighted element bytes of all loads
    "arith_intensity",           # flops / arg bytes
    "intrinsic_calls",           # trip-weighted
    "selects",                   # trip-weighted
    "n_ifs",
    "n_lets",
    "main_cost_frac",            # cost of the main group / total cost
    "main_flops_frac",
]

_BLOCK_SCALARS = [
    "present",
    "trip",                      # iterations of one replica
    "trip_total",                # x replicas
    "replicas",
    "chain_len",                 # loops around it (virtual unroll loop included)
    "flops_per_iter",
    "intrinsics_per_iter",
    "loads_per_iter",
    "selects_per_iter",
    "is_update",                 # reads the element it writes (a reduction update)
    "store_is_local",
    "elem_bytes",
    "vector_lanes",
    "vector_bytes",
    "n_accumulators",            # distinct local-buffer stores across the replicas
    "accumulator_lanes",
    "accumulator_bytes",
    "n_ifs",
    "parallel_extent",
    "loops_inside_parallel",
    "outer_extent",              # product of extents of loops beyond the loop slots
    "cost_frac",
    "flops",
    "working_set_all",           # bytes touched by all accesses over the whole chain
]

_LOOP_FIELDS = ["present", "extent", "serial", "parallel", "vectorized", "unrolled", "depth",
                "inner_work", "store_stride", "n_invariant", "ws_bytes", "ws_lines"]

_WINDOWS = (1, 2, 3, None)       # innermost 1, 2, 3 loops and the whole chain
_WIN_NAMES = ("w1", "w2", "w3", "all")

_ACCESS_FIELDS = (["present", "is_store", "is_update", "arg", "temp", "local", "elem_bytes",
                   "exact", "multiplicity", "stride_inner", "stride_vec", "stride_serial",
                   "vec_contig", "vec_broadcast", "vec_gather"]
                  + [f"bytes_{w}" for w in _WIN_NAMES]
                  + [f"reuse_{w}" for w in _WIN_NAMES]
                  + [f"lines_{w}" for w in ("w2", "all")])


def _block_names(prefix, n_loops, n_acc):
    names = [f"{prefix}_{f}" for f in _BLOCK_SCALARS]
    for i in range(n_loops):
        names += [f"{prefix}_loop{i}_{f}" for f in _LOOP_FIELDS]
    for i in range(n_acc):
        names += [f"{prefix}_acc{i}_{f}" for f in _ACCESS_FIELDS]
    return names


NAMES = tuple(["g_" + n for n in _GLOBAL]
               + _block_names("m", N_LOOPS_MAIN, N_ACCESSES_MAIN)
               + _block_names("s", N_LOOPS_SECOND, N_ACCESSES_SECOND))
FEATURE_LENGTH = len(NAMES)
INDEX = {n: i for i, n in enumerate(NAMES)}
FAILED_SLOT = INDEX["g_extract_failed"]
SCHEMA_HASH = hashlib.sha256("\n".join(NAMES).encode()).hexdigest()[:16]


class FeatureNameError(InternalError):
    """A feature was written under a name the layout does not have: the extractor and the layout
    disagree (a bug, never a property of the function being described)."""


class FeatureValues(dict):
    """Feature values by name.  Writing a name the layout does not have raises
    :class:`FeatureNameError` where it is written, instead of a failed row later."""

    def __setitem__(self, name, value):
        if name not in INDEX:
            raise FeatureNameError(f"feature {name!r} is not in the layout "
                                   f"(einloop.autotune.model.feature.layout)")
        super().__setitem__(name, value)

    def update(self, *args, **kw):
        for name, value in dict(*args, **kw).items():
            self[name] = value

    def setdefault(self, name, value=None):
        if name not in self:
            self[name] = value
        return self[name]


def feature_names() -> list:
    """The names of the features, in order (``len == FEATURE_LENGTH``)."""
    return list(NAMES)


def schema() -> dict:
    """What a cost model must agree on: the length and a hash of the names."""
    return {"length": FEATURE_LENGTH, "names_hash": SCHEMA_HASH}

