"""The run half of measurement: one persistent child process that checks and times candidates.

The runner is a child process started from einloop alone (:mod:`.child`, never from the user's
main module) and talks to its parent over a pipe of pickled messages.
At setup it receives the reference :class:`ShippedKernel` (the task's fallback config) and the
measurement options, makes the input arrays (fixed seed: uniform [0.1, 1) for floats, integers
in [1, 8) for ints, random booleans) and computes the reference outputs once.  For each candidate
it loads the kernel's object code (made by the builder as ``einloop.build`` makes it: nothing is
compiled here), fills the outputs with values that differ from the reference (NaN for
floats), runs it once and compares (``WRONG_ANSWER`` with the largest error), then times it with
:meth:`Kernel.time`.

Just before its timed repetitions the runner sends ``TIMING`` and waits for ``GO``: the parent
quiets the build workers first (see :class:`RunHooks`), so no build shares the CPU with a timed
call, while loading and the correctness check overlap with builds.  The answer to a RUN
also carries the seconds spent loading, checking and timing (:class:`Phases`).

The parent stores the object code of each candidate that measures correct and faster than every
one before it in the persistent compile cache (:func:`~einloop.codegen.shipped.seed_cache`), so
that ``einloop.build`` of the job's winner loads it instead of compiling it again.  Only these
improvements are stored, not every candidate: a job's other candidates are never built again,
and each would take the place of a kernel in use in a cache that evicts what was used longest
ago (:mod:`einloop.codegen.cache`).

The parent (:class:`Runner`) waits at most ``timeout`` seconds per candidate (not counting the
time it takes to quiet the builds); on a timeout it kills the runner (SIGKILL) and starts a new
one (which is set up again) before the next candidate.  A runner that dies (segfault, abort,
OOM kill) is reported with its signal or exit code and restarted in the same way.

Test hook: ``EINLOOP_RUNNER_FAULT="kind:index[,kind:index...]"`` makes the *runner process*
misbehave when it is sent config *index* (a candidate's ``fault_index``), before it loads it.
Kinds: ``segfault`` (a real SIGSEGV: ctypes reads address 0), ``abort`` (``os.abort()``), ``exit``
(``os._exit(3)``), ``hang`` (sleeps forever), ``raise`` (raises RuntimeError inside the
measurement).  It is read from the runner's environment when it starts and is inert when the
variable is unset.
"""
from __future__ import annotations

import ctypes
import enum
import os
import signal
import time
import traceback
from typing import NamedTuple

import numpy as np

from ...codegen.evict import evict
from ...codegen.shipped import load, seed_cache
from ...errors import TuningError
from ...runtime.signature import numpy_dtype
from .child import Child
from .status import MeasureErrorNo as Status

FAULT_ENV = "EINLOOP_RUNNER_FAULT"
ENTRY = "einloop.autotune.measure.runner:runner_main"     # what the runner process runs (see .child)


class Msg(enum.Enum):
    """The pipe protocol: requests (SETUP, RUN, STOP) and the answers to SETUP (READY, ERROR);
    a RUN is answered with ``(MeasureErrorNo, payload, Phases)``, after at most one TIMING from
    the runner (about to time the candidate), which the parent answers with ``(GO, rewarm)``."""
    SETUP = "setup"
    RUN = "run"
    STOP = "stop"
    READY = "ready"
    ERROR = "error"
    TIMING = "timing"
    GO = "go"


class Phases(NamedTuple):
    """Seconds the runner spent on one candidate: loading its code into a JIT engine
    (``jit``), correctness check, timing."""
    jit: float = 0.0
    check: float = 0.0
    timing: float = 0.0


SEED = 0
FAULT_KINDS = ("segfault", "abort", "exit", "hang", "raise")


# runner process ---------------------------------------------------------------------------------

def parse_faults(text):
    """``"segfault:3,hang:5"`` -> {3: "segfault", 5: "hang"}."""
    faults = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        kind, _, index = item.partition(":")
        if kind not in FAULT_KINDS or not index.strip().lstrip("-").isdigit():
            raise ValueError(f"{FAULT_ENV}: bad entry {item!r}; expected kind:index with kind "
                             f"one of {', '.join(FAULT_KINDS)}")
        faults[int(index)] = kind
    return faults


def _inject(kind):
    if kind == "segfault":
        ctypes.string_at(0)
    elif kind == "abort":
        os.abort()
    elif kind == "exit":
        os._exit(3)
    elif kind == "hang":
        while True:
            time.sleep(3600)
    elif kind == "raise":
        raise RuntimeError(f"{FAULT_ENV}: injected failure")


def floating(dt) -> bool:
    """Is NumPy dtype *dt* a float type (ml_dtypes' bfloat16, of kind "V", included)?"""
    return dt.kind == "f" or dt.name == "bfloat16"


def make_inputs(specs, seed=SEED):
    rng = np.random.default_rng(seed)
    out = []
    for s in specs:
        dt = numpy_dtype(s.dtype)
        if floating(dt):
            a = rng.uniform(0.1, 1.0, size=s.shape).astype(dt)
        elif dt.kind == "b":
            a = rng.random(size=s.shape) < 0.5
        else:
            a = rng.integers(1, 8, size=s.shape).astype(dt)
        out.append(np.ascontiguousarray(a))
    return out


def fits(signature, concrete) -> bool:
    """Do arguments of the shapes *concrete* fit a kernel of *signature* (``[(dtype, shape)]``,
    a dimension an int or the name of a symbolic extent, one value per name)?  A symbolic
    kernel is measured on the arrays of the reference, which is built for concrete sizes."""
    if len(signature) != len(concrete):
        return False
    bound = {}
    for (dtype, shape), (want_dtype, want_shape) in zip(signature, concrete):
        if dtype != want_dtype or len(shape) != len(want_shape):
            return False
        for d, w in zip(shape, want_shape):
            if isinstance(d, str):
                if bound.setdefault(d, w) != w:
                    return False
            elif d != w:
                return False
    return True


def _poison(out, ref):
    """Fill *out* with values no correct kernel leaves there: NaN, or anything but *ref*."""
    if floating(out.dtype):
        out.fill(np.nan)
    elif out.dtype.kind == "b":
        np.logical_not(ref, out=out)
    else:
        np.add(ref, 1, out=out, casting="unsafe")


def _errors(got, expect):
    """``|got - expect|`` elementwise (float64 arrays), 0 where both are NaN, inf where one is."""
    err = np.where(np.isnan(expect) & np.isnan(got), 0.0, np.abs(got - expect))
    return np.where(np.isnan(err), np.inf, err)


def compare(name, got, ref, rtol, atol):
    """None if *got* matches *ref*; else a message naming the largest error.

    Floats pass when ``|got - ref| <= atol + rtol * max|ref|`` everywhere (NaN matches NaN);
    other dtypes must be equal.
    """
    if not floating(got.dtype):
        bad = got != ref
        if not bad.any():
            return None
        at = np.unravel_index(int(np.argmax(bad)), got.shape)
        return (f"output {name}: {int(bad.sum())} of {got.size} elements differ; first at index "
                f"{tuple(int(i) for i in at)}: got {got[at]!r}, expected {ref[at]!r}")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r)
    scale = float(np.max(np.abs(r[finite]), initial=0.0))
    tol = atol + rtol * scale
    nan_ref = np.isnan(r)
    err = _errors(g, r)
    bad = err > tol
    if not bad.any():
        return None
    at = np.unravel_index(int(np.argmax(err)), got.shape)
    unwritten = int((np.isnan(g) & ~nan_ref).sum())
    extra = f"; {unwritten} elements were not written (still NaN)" if unwritten else ""
    return (f"output {name}: {int(bad.sum())} of {got.size} elements differ; max abs error "
            f"{float(err[at]):.6g} at index {tuple(int(i) for i in at)} (got {float(g[at]):.6g}, "
            f"expected {float(r[at]):.6g}); tolerance atol + rtol*max|ref| = {atol:g} + "
            f"{rtol:g}*{scale:.6g} = {tol:.6g}{extra}")


#: how much longer than the reference the float64 one is assumed to run (wider vectors hold
#: half the lanes; the unscheduled loops are the same)
EXACT_SLOWER = 2.0


class Reference(NamedTuple):
    """What candidates are checked against: the reference candidate's kernel, and the same
    operator computing in float64 (``exact``; None when it has no narrow float or could not be
    built), the yardstick of :func:`compare_to_exact`; and the positions of the operator's
    constant inputs (``constants``), which ``CacheFlush.CONSTANTS`` evicts."""
    kernel: object          # ShippedKernel
    exact: object = None    # ShippedKernel or None
    constants: tuple = ()


def compare_to_exact(name, got, ref, exact, rtol, atol):
    """None if *got* is as close to the exact (float64) outputs *exact* as the reference *ref*
    is, twice over, plus the tolerance of :func:`compare`; else a message.

    A float32 reduction of millions of elements, summed one after another by the reference, is
    off by about 1e-3 of its value; a candidate summing in another order (lanes, parallel
    chunks) is off elsewhere, usually by less, and differs from the reference by more than
    ``rtol``.  Against the exact value both errors show for what they are: a candidate that
    drops a chunk is off by far more than the reference's rounding."""
    g, r, x = (a.astype(np.float64) for a in (got, ref, exact))
    finite = np.isfinite(x)
    scale = float(np.max(np.abs(x[finite]), initial=0.0))
    rounding = float(np.max(np.where(finite, np.abs(r - x), 0.0), initial=0.0))
    tol = atol + rtol * scale + 2.0 * rounding
    err = _errors(g, x)
    if not (err > tol).any():
        return None
    at = np.unravel_index(int(np.argmax(err)), got.shape)
    return (f"output {name}: max abs error {float(err[at]):.6g} from the exact (float64) value at "
            f"index {tuple(int(i) for i in at)} (got {float(g[at]):.6g}, exact "
            f"{float(x[at]):.6g}); allowed: atol + rtol*max|exact| + twice the reference's own "
            f"rounding {rounding:.6g} = {tol:.6g}")


class CacheFlush(enum.Enum):
    """What a measurement evicts from the CPU caches before each timed call (each call is then
    timed on its own; :mod:`einloop.codegen.evict`)."""
    #: nothing: calls back to back find their arguments in cache
    NONE = "none"
    #: every argument (TVM's ``enable_cpu_cache_flush``)
    ALL = "all"
    #: the constant inputs (``te.placeholder(..., constant=True)``) and their packed copies:
    #: a model's weights, which its other layers evict between two calls of a kernel, while
    #: the activations arrive in cache from the layer that wrote them
    CONSTANTS = "constants"


def arrays_to_evict(flush, arrays, n_args, constants) -> list:
    """What a measurement with cache flush *flush* (a :class:`CacheFlush`) evicts before each
    timed call of a candidate called on *arrays*: none, all, or the constant inputs (positions
    *constants*) and the packed copies of them that a split candidate takes after the *n_args*
    arguments of the operator."""
    if flush is CacheFlush.ALL:
        return list(arrays)
    if flush is CacheFlush.CONSTANTS:
        return [arrays[p] for p in constants] + list(arrays[n_args:])
    return []


class _State:
    """What the runner keeps between candidates."""

    def __init__(self, reference, opts):
        if not isinstance(reference, Reference):
            reference = Reference(reference)
        ref_sk, self.exact_sk, self.exact = reference.kernel, reference.exact, None
        self.constants = tuple(reference.constants)
        self.opts = opts
        self.signature = [(a.dtype, tuple(a.shape)) for a in ref_sk.args]
        self.out_pos = [n for n, a in enumerate(ref_sk.args) if a.name in ref_sk.outputs]
        self.arrays = make_inputs(ref_sk.args)
        for n in self.out_pos:
            self.arrays[n].fill(np.nan if floating(self.arrays[n].dtype) else 0)
        ref = load(ref_sk)
        t0 = time.perf_counter()
        ref(*self.arrays)
        self.ref_seconds = time.perf_counter() - t0
        self.refs = {n: self.arrays[n].copy() for n in self.out_pos}
        self.names = {n: ref_sk.args[n].name for n in self.out_pos}

    def measure(self, sk, before_timing=lambda: False):
        """``(status, payload, Phases)``; *before_timing* is called right before the timed
        repetitions (it waits until the parent has quieted the build workers, and says whether
        builds were running).  A split kernel's prologue (its work on constant inputs) runs
        once first, untimed: a deployed kernel runs it only when those inputs change."""
        clock, t0 = time.perf_counter, time.perf_counter()
        phases = Phases()
        n = len(self.signature)
        sig = [(a.dtype, tuple(a.shape)) for a in sk.args]
        extra = len(sk.prologue.outputs) if sk.prologue is not None else 0
        if len(sig) != n + extra or not fits(sig[:n], self.signature):
            return Status.RUNTIME_ERROR, (f"the candidate's signature {sig} does not fit the "
                                          f"reference kernel's {self.signature}"), phases
        try:
            kernel = load(sk)
            prologue = load(sk.prologue) if extra else None
        except Exception:
            return Status.COMPILE_ERROR, ("loading the object code in the runner failed:\n"
                                          + traceback.format_exc()), phases
        t1 = clock()
        phases = Phases(jit=t1 - t0)
        o = self.opts
        arrays = self.arrays
        try:
            if prologue is not None:
                made = [np.empty(a.shape, numpy_dtype(a.dtype)) for a in sk.args[n:]]
                prologue(*[self.arrays[p] for p in sk.sources], *made)
                arrays = self.arrays + made
            warmup = 1
            if o["check_correctness"]:
                for k in self.out_pos:
                    _poison(self.arrays[k], self.refs[k])
                kernel(*arrays)
                msgs = [self._check(k, o["rtol"], o["atol"]) for k in self.out_pos]
                msgs = [m for m in msgs if m]
                if msgs:
                    return Status.WRONG_ANSWER, "\n".join(msgs), Phases(t1 - t0, clock() - t1)
                warmup = 0                      # the checked call warmed it up
            if before_timing():                 # builds ran meanwhile: warm the caches again
                warmup = 1
            t2 = clock()
            phases = Phases(t1 - t0, t2 - t1)
            cold = arrays_to_evict(o.get("cache_flush"), arrays, len(self.signature),
                                   self.constants)
            t = kernel.time(*arrays, number=o["number"], repeat=o["repeat"],
                            min_repeat_ms=o["min_repeat_ms"], warmup=warmup,
                            before=(lambda: evict(cold)) if cold else None)
            phases = Phases(t1 - t0, t2 - t1, clock() - t2)
        except Exception:
            return Status.RUNTIME_ERROR, traceback.format_exc(), phases
        return Status.NO_ERROR, tuple(float(x) for x in t.results), phases

    def _check(self, n, rtol, atol):
        """None if output *n* of the candidate just run is right; else what is wrong."""
        msg = compare(self.names[n], self.arrays[n], self.refs[n], rtol, atol)
        if msg is None or not floating(self.arrays[n].dtype) or self.exact_sk is None:
            return msg
        exact = self._exact_outputs()
        if exact is None:
            return msg
        return compare_to_exact(self.names[n], self.arrays[n], self.refs[n], exact[n], rtol,
                                atol)

    def _exact_outputs(self):
        """{output position: float64 outputs of the exact reference} on the inputs, computed
        on first need (most tasks never need it); None if it cannot run, or would take more
        than a quarter of a candidate's timeout (about as long as the reference took: the same
        unscheduled loops, in float64)."""
        if self.exact is None:
            timeout = self.opts.get("timeout")
            if timeout and EXACT_SLOWER * self.ref_seconds > timeout / 4:
                self.exact = {}
                return None
            try:
                kernel = load(self.exact_sk)
                arrays = [a.astype(numpy_dtype(spec.dtype)) for a, spec in
                          zip(self.arrays, self.exact_sk.args)]
                kernel(*arrays)
                self.exact = {n: arrays[n] for n in self.out_pos}
            except Exception:                   # noqa: BLE001 -- the plain check stands
                self.exact = {}
        return self.exact or None


class _Stop(BaseException):
    """The parent asked the runner to stop (or went away) while it waited for GO."""


def _wait_for_go(conn):
    """Tell the parent that timing starts; return once it answers GO (builds are quiet), with
    whether builds were running until then."""
    conn.send((Msg.TIMING,))
    try:
        msg = conn.recv()
    except (EOFError, OSError):
        raise _Stop() from None
    if msg[0] is not Msg.GO:
        raise _Stop()
    return bool(msg[1])


def _serve(conn, msg, state):
    """Answer one request; returns the (possibly new) state.  Whatever a candidate raises,
    SystemExit, MemoryError and RecursionError included, is its failure, sent back as data."""
    op = msg[0]
    if op is Msg.SETUP:
        try:
            state = (parse_faults(os.environ.get(FAULT_ENV)), _State(msg[1], msg[2]))
            reply = (Msg.READY, os.getpid())
        except BaseException:              # noqa: BLE001 -- see the docstring
            reply = (Msg.ERROR, traceback.format_exc(limit=50))
    elif op is Msg.RUN:
        _, index, sk = msg
        try:
            faults, st = state
            if index in faults:
                _inject(faults[index])
            reply = st.measure(sk, lambda: _wait_for_go(conn))
        except _Stop:
            raise
        except BaseException:              # noqa: BLE001
            reply = (Status.RUNTIME_ERROR, traceback.format_exc(limit=50), Phases())
    else:
        reply = (Msg.ERROR, f"runner: unknown request {op!r}")
    conn.send(reply)
    return state


def runner_main(conn):
    """Entry point of the runner process (a :class:`~.child.Child` entry, which has tied it to
    the parent and made it ignore SIGINT): serve requests until STOP or the pipe closes."""
    state = None
    while True:
        try:
            msg = conn.recv()
            if msg[0] is Msg.STOP:
                return
            state = _serve(conn, msg, state)
        except (EOFError, OSError, _Stop):  # the parent closed the pipe or is gone: quietly end
            return


# parent side ------------------------------------------------------------------------------------

def describe_exit(code):
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class RunnerDied(Exception):
    """The runner process exited while measuring a candidate (``args[0]``: how)."""


class RunnerTimeout(Exception):
    """The runner did not answer in time and was killed."""


class RunHooks:
    """What the parent does while the runner works on one candidate; the base does nothing.

    The Measurer uses it to keep its build workers busy during loading and check and quiet during
    timing.  ``timing_ends`` is always called after ``timing_starts``, whatever happens.
    """
    poll_s = 0.02               # how often ``waiting`` is called while the runner works

    def waiting(self):
        """Called about every ``poll_s`` seconds while the runner works but does not time."""

    def timing_starts(self) -> bool:
        """The runner is about to time the candidate: return once no build is running, with
        whether builds were running (the runner then warms its caches again)."""
        return False

    def timing_ends(self):
        """The timed repetitions are over (or the runner failed or was killed)."""


class Runner:
    """Parent-side handle of the runner process; (re)started on demand.  It seeds the compile
    cache with each candidate faster than all it measured before (see the module docstring)."""

    def __init__(self, ref_sk, opts, setup_timeout):
        self.ref_sk, self.opts, self.setup_timeout = ref_sk, opts, setup_timeout
        self.proc = self.conn = None
        self.starts = 0
        self._busy = False              # a request was sent and not answered yet
        self.last_phases = Phases()     # of the last candidate measured
        self.best_cost = float("inf")   # mean seconds of the fastest candidate measured
        self.seeded = 0                 # candidates stored in the compile cache

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def alive(self):
        return self.proc is not None and self.proc.exitcode is None and self.proc.is_alive()

    def start(self):
        """Start a runner and set it up; raise TuningError if that fails."""
        self.stop(grace=0)
        proc = Child(ENTRY, name="runner")
        self.proc, self.conn = proc, proc.conn
        self.starts += 1
        self._setup()

    def retarget(self, ref_sk):
        """Measure another task's candidates from now on: set the live runner up with the
        reference *ref_sk* (its inputs and reference outputs replace the old task's), or start
        one; the compile cache is seeded by the new task's own improvements."""
        self.ref_sk, self.best_cost = ref_sk, float("inf")
        if self.alive():
            self._setup()
        else:
            self.start()

    def _setup(self):
        """Send SETUP with the reference; raise TuningError (the runner stopped) if it fails."""
        try:
            self._busy = True
            self.conn.send((Msg.SETUP, self.ref_sk, self.opts))
            reply = self._recv(self.setup_timeout)
        except (RunnerDied, RunnerTimeout, OSError) as exc:
            self.kill()
            raise TuningError(f"the runner process could not compute the reference outputs of "
                              f"the fallback config: {exc}") from None
        if reply[0] is not Msg.READY:
            self.stop(grace=0)
            raise TuningError("the runner process could not set up the reference kernel (the "
                              f"task's fallback config):\n{reply[1]}")

    def _recv(self, timeout, kill=True):
        """The next message; ``None`` if none came within *timeout* and not *kill*."""
        try:
            ready = self.conn.poll(max(0.0, timeout))
        except (EOFError, OSError):
            ready = True
        if not ready:
            if not kill:
                return None
            self.kill()
            raise RunnerTimeout(f"no answer within {timeout:g} s; the runner was killed")
        try:
            reply = self.conn.recv()
            self._busy = False
            return reply
        except (EOFError, OSError):
            self.proc.join(timeout=10)
            how = describe_exit(self.proc.exitcode)
            self.stop(grace=0)
            raise RunnerDied(how) from None

    def run(self, index, sk, timeout, hooks=None):
        """Measure one candidate (*index*: its ``fault_index``, for the test hook):
        ``(MeasureErrorNo, payload)``; raises RunnerDied or RunnerTimeout.  *hooks*
        (:class:`RunHooks`) are told when the timed repetitions start and end."""
        hooks = hooks or RunHooks()
        if not self.alive():
            self.start()
        try:
            self._busy = True
            self.conn.send((Msg.RUN, index, sk))
        except (BrokenPipeError, OSError):      # died while idle: start again, send again
            self.start()
            self._busy = True
            self.conn.send((Msg.RUN, index, sk))
        self.last_phases = Phases()
        deadline, timing = time.monotonic() + timeout, False
        try:
            while True:
                left = deadline - time.monotonic()
                reply = self._recv(left if timing else min(left, hooks.poll_s),
                                   kill=timing or left <= hooks.poll_s)
                if reply is None:               # still working: let the builds go on
                    hooks.waiting()
                    continue
                if reply[0] is Msg.TIMING and not timing:
                    t0 = time.monotonic()
                    timing = True
                    rewarm = hooks.timing_starts()
                    deadline += time.monotonic() - t0       # quieting builds is not its time
                    self._busy = True
                    try:
                        self.conn.send((Msg.GO, rewarm))
                    except OSError:             # it died: the next receive says how
                        pass
                    continue
                break
        finally:
            if timing:
                hooks.timing_ends()
        if len(reply) == 3:
            self.last_phases = reply[2]
        if reply[0] == Status.NO_ERROR:
            self._seed(sk, reply[1])
        return reply[0], reply[1]

    def _seed(self, sk, costs):
        """Store *sk* in the compile cache if its mean cost beats every candidate before."""
        mean = sum(costs) / len(costs) if costs else float("inf")
        if mean < self.best_cost:
            self.best_cost = mean
            self.seeded += seed_cache(sk)

    def kill(self):
        if self.proc is not None and self.proc.exitcode is None:
            try:
                self.proc.kill()
            except (ProcessLookupError, OSError):
                pass
        self.stop(grace=0)

    def stop(self, grace=2.0):
        """Ask the runner to exit; kill it after *grace* seconds; reap it (idempotent).

        A runner that is busy with a request (interrupted mid-measurement) is killed at once.
        """
        proc, conn = self.proc, self.conn
        self.proc = self.conn = None
        if self._busy:
            grace, self._busy = 0, False
        if conn is not None:
            if proc is not None and grace > 0:
                try:
                    conn.send((Msg.STOP,))
                except (BrokenPipeError, OSError):
                    pass
            conn.close()
        if proc is not None:
            proc.join(timeout=grace)
            if proc.exitcode is None:
                proc.kill()
                proc.join(timeout=10)
