"""Compilation targets: which CPU and features LLVM generates code for.

A :class:`Target` is a small value (usable as a cache key, printed into tuning logs); the LLVM
``TargetMachine`` for it is created once per target and shared, because creating one is slow and
every kernel of a process normally uses the same host target.
"""
from __future__ import annotations

from dataclasses import dataclass
import re
import threading

import llvmlite.binding as llvm

from ..errors import BuildError
from ..runtime.cpu import normal_arch
from . import isa
from .llvm import init_all_targets, init_llvm

_machines_lock = threading.Lock()
_machines: dict = {}

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_FEATURE = re.compile(r"^[+\-][A-Za-z0-9_.\-]+$")


def _arch_and_os(triple: str) -> tuple:
    """``(architecture, operating system)`` of a triple, enough to say whether code for it runs
    in this process: ``x86_64-pc-linux-gnu`` and ``x86_64-linux-gnu`` are the same machine."""
    parts = triple.lower().split("-")
    arch = normal_arch(parts[0])
    system = next((s for s in ("linux", "darwin", "macos", "ios", "windows", "freebsd")
                   for p in parts[1:] if p.startswith(s)), "")
    return arch, "darwin" if system in ("macos", "ios") else system


def is_native_triple(triple: str) -> bool:
    """Can this process run code generated for *triple* (same architecture and system)?"""
    return _arch_and_os(triple) == _arch_and_os(llvm.get_process_triple())


def llvm_target(triple: str):
    """LLVM's ``Target`` for *triple*, initialising the other backends first if it is not the
    process's own; BuildError when this LLVM has no backend for it."""
    if is_native_triple(triple):
        init_llvm()
    else:
        init_all_targets()
    try:
        return llvm.Target.from_triple(triple)
    except RuntimeError as exc:
        raise BuildError(f"LLVM does not know triple {triple!r} (this llvmlite has no backend "
                         f"for it): {exc}") from None


def _host_features() -> str:
    return llvm.get_host_cpu_features().flatten()


def _merge_features(base: str, overrides: list) -> str:
    """Apply ``+x``/``-x`` overrides to a feature string.

    Overrides go last: LLVM applies features in order, and a later ``+avx512bw`` would turn a
    removed ``avx512f`` (which it implies) back on.
    """
    names = {f[1:] for f in overrides}
    kept = [f for f in base.split(",") if f and f[1:] not in names]
    last = {f[1:]: f for f in overrides}          # the last override of a name wins
    return ",".join(kept + list(last.values()))


@dataclass(frozen=True)
class Target:
    """An LLVM CPU target: ``cpu`` name, ``features`` (``+avx2,-avx512f,...``) and ``triple``."""
    cpu: str
    features: str
    triple: str

    @staticmethod
    def parse(spec="llvm") -> "Target":
        """Parse ``"llvm [-mcpu=NAME] [-mattr=+a,-b] [-mtriple=T]"``; plain ``"llvm"`` is the host.

        Without ``-mcpu`` the host CPU and its features are used and ``-mattr`` edits them; with
        ``-mcpu`` the features are exactly those given by ``-mattr`` (on top of the CPU's own,
        which :meth:`full_features` adds).  A ``-mtriple`` of another machine
        (``aarch64-linux-gnu``) cross-compiles: the CPU is ``generic`` unless ``-mcpu`` names
        one, and the kernels can be exported, not called.
        """
        if isinstance(spec, Target):
            return spec
        if not isinstance(spec, str):
            raise BuildError(f"target must be a string like 'llvm -mcpu=skylake-avx512' or a "
                             f"Target, got {spec!r} ({type(spec).__name__})")
        words = spec.split()
        if not words or words[0] != "llvm":
            raise BuildError(f"unknown target {spec!r}: only 'llvm' targets are supported, "
                             "e.g. 'llvm' (the host) or 'llvm -mcpu=NAME -mattr=+avx2'")
        opts = {}
        for w in words[1:]:
            key, eq, value = w.partition("=")
            if key not in ("-mcpu", "-mattr", "-mtriple") or not eq or not value:
                raise BuildError(f"bad option {w!r} in target {spec!r}: expected -mcpu=NAME, "
                                 "-mattr=+feat,-feat or -mtriple=TRIPLE")
            if key in opts:
                raise BuildError(f"option {key} given twice in target {spec!r}")
            opts[key] = value
        return _resolve(spec, opts)

    def __str__(self):
        mattr = f" -mattr={self.features}" if self.features else ""    # parse() needs a value
        return f"llvm -mtriple={self.triple} -mcpu={self.cpu}{mattr}"

    @property
    def arch(self) -> str:
        """The triple's architecture (``x86_64``, ``aarch64``, ...)."""
        return _arch_and_os(self.triple)[0]

    @property
    def is_x86(self) -> bool:
        """Is the triple's architecture x86 (64- or 32-bit)?"""
        return self.arch in ("x86_64", "i386", "i686")

    @property
    def system(self) -> str:
        """The triple's operating system (``linux``, ``darwin``, ``windows``, ...), or ``""``."""
        return _arch_and_os(self.triple)[1]

    @property
    def is_native(self) -> bool:
        """Does code for this target run in this process?  (Else it can only be exported.)"""
        return is_native_triple(self.triple)

    def full_features(self) -> str:
        """:attr:`features` and, for a named CPU (which lists only ``-mattr``), what the CPU
        name implies of the features :mod:`.isa` probes (asked of LLVM, cached): what the
        machine model reads and what an exported library records."""
        init_llvm()
        return isa.complete(self.triple, self.cpu, self.features)

    def has_feature(self, name: str) -> bool:
        """Is *name* known to be on (listed, or implied by the CPU name, see full_features)?"""
        return f"+{name}" in self.full_features().split(",")

    def lacks_feature(self, name: str) -> bool:
        """Is *name* known to be off?  (A named CPU's features outside :mod:`.isa`'s probes
        are unknown, neither on nor off.)"""
        return f"-{name}" in self.full_features().split(",")

    def without(self, names) -> "Target":
        """This target with features *names* turned off (and those that imply them)."""
        return Target(self.cpu, _merge_features(self.features, [f"-{n}" for n in names]),
                      self.triple)

    def target_machine(self):
        """The shared, lazily created ``TargetMachine`` (opt level 3, JIT code model).

        Never hand it to an execution engine: MCJIT takes ownership of its target machine and
        frees it with the engine; use :meth:`new_target_machine` for that.
        """
        init_llvm()
        with _machines_lock:
            tm = _machines.get(self)
            if tm is None:
                tm = _machines[self] = self._create_target_machine()
            return tm

    def new_target_machine(self):
        """A fresh ``TargetMachine`` for this target (opt level 3, JIT code model)."""
        init_llvm()
        return self._create_target_machine()

    def _create_target_machine(self):
        return llvm_target(self.triple).create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, jit=True, reloc="default",
            codemodel="jitdefault")


def _resolve(spec, opts) -> Target:
    init_llvm()
    triple = opts.get("-mtriple") or llvm.get_process_triple()
    native = is_native_triple(triple)
    if not native:
        llvm_target(triple)                 # an unknown triple fails here, not at build time
    overrides = []
    if "-mattr" in opts:
        overrides = [f for f in opts["-mattr"].split(",") if f]
        bad = [f for f in overrides if not _FEATURE.match(f)]
        if bad or not overrides:
            raise BuildError(f"bad -mattr in target {spec!r}: features must look like +avx2 or "
                             f"-avx512f, separated by commas; got {opts['-mattr']!r}")
    if "-mcpu" in opts:
        cpu = opts["-mcpu"]
        if not _NAME.match(cpu):
            raise BuildError(f"bad -mcpu name {cpu!r} in target {spec!r}")
        features = _merge_features("", overrides)
    elif not native:
        # the host's CPU name and features mean nothing for another architecture
        cpu, features = "generic", _merge_features("", overrides)
    else:
        cpu = llvm.get_host_cpu_name()
        features = _merge_features(_host_features(), overrides)
    return Target(cpu, features, triple)


def host_engine(ir_text: str):
    """An MCJIT engine holding *ir_text* (a small module of einloop's own: runtime helpers, the
    OpenBLAS bridge, the spin probe) compiled for this machine, its code ready to call.  The
    caller holds the JIT lock, and keeps the engine as long as its code may run."""
    mod = llvm.parse_assembly(ir_text)
    target = Target.parse("llvm")
    mod.triple = target.triple
    engine = llvm.create_mcjit_compiler(mod, target.new_target_machine())
    engine.finalize_object()
    return engine
