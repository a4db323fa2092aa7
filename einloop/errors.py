"""The one exception hierarchy of einloop.

User errors (a bad declaration, schedule, argument or log) derive from :class:`Error`, with one
subclass per layer, so callers can catch exactly what they can fix.  :class:`InternalError` marks
a broken invariant inside einloop itself: a bug to report, never a user mistake.
"""


class Error(Exception):
    """Base class of every error a user of einloop can cause."""


class TEError(Error):
    """A tensor-expression declaration is malformed (shapes, indices, dtypes, reductions)."""


class ScheduleError(Error):
    """A schedule primitive was asked for something illegal on a stage."""


class BuildError(Error):
    """Lowering or compiling a schedule failed for a reason the user can act on."""


class ToolchainError(BuildError):
    """Exporting a shared library needs a tool this system lacks (a C compiler to link it)."""


class LibraryError(Error):
    """An exported kernel library cannot be loaded: missing, damaged, without einloop metadata,
    from an incompatible einloop version, or needing CPU features this machine lacks."""


class UnsupportedPrimitiveError(ScheduleError, AttributeError):
    """A TVM/Halide schedule primitive einloop does not have (an AttributeError, so ``hasattr``
    still answers False)."""


class ArgumentError(Error):
    """A compiled kernel was called with arrays of the wrong number, shape, dtype or layout."""


class CustomOpError(Error):
    """A PyTorch custom operator (``einloop.torch.custom_op``) is declared or used in a way it
    cannot serve: a function it cannot register, a declaration that returns no tensor, a
    gradient einloop cannot generate yet."""


class KernelRuntimeError(Error):
    """A kernel call could not run: memory for its temporary or local buffers was refused."""


class IndexRangeError(KernelRuntimeError, IndexError):
    """An index read from data (an embedding's id, an ``index_add`` index) lies outside the
    dimension it indexes.  Also an IndexError, which PyTorch raises there."""


class TuningError(Error):
    """An auto-tuning job, template or configuration was used incorrectly."""


class NoValidTrialError(TuningError):
    """Every trial of a tuning job failed to build or run (each failure is in its log)."""


class TuningLogError(TuningError):
    """A tuning log is unreadable, of an unknown version, or inconsistent."""


class InternalError(Exception):
    """An invariant inside einloop broke: a bug in einloop, not in the user's program."""


class EinloopWarning(UserWarning):
    """Base class of einloop's warnings: the program is correct, but probably not what you want.
    Silence one kind with ``warnings.simplefilter("ignore", einloop.errors.<Kind>)``."""


class RegionFallbackWarning(EinloopWarning):
    """Bound inference could not bound a compute_at region and computes the whole axis instead."""


class VectorizeWarning(EinloopWarning):
    """A loop marked ``vectorize`` cannot become SIMD lanes and runs serially (the message says
    why and what to vectorize instead)."""


class ParallelWarning(EinloopWarning):
    """A loop marked ``parallel`` is nested in another parallel loop and runs serially."""


class RuleFailureWarning(EinloopWarning):
    """An auto-scheduling rule raised on an operator, and its space was generated without that
    rule: still correct, but possibly slower (a bug in einloop: please report the message).
    ``EINLOOP_STRICT_RULES=1`` (set by einloop's test suite) raises it as an InternalError."""


class ThreadPoolWarning(EinloopWarning):
    """einloop's parallel kernels and another library's (PyTorch's) run on two OpenMP runtimes,
    whose thread pools compete for the cores (the message says how to get one)."""


class CacheWarning(EinloopWarning):
    """A compile-cache entry was corrupt (it is deleted and the kernel rebuilt), or the cache
    directory cannot be written (kernels are then compiled anew in each process)."""
