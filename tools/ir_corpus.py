"""A fingerprint of what einloop compiles: the lowered loop IR and the LLVM IR of a fixed corpus of
schedules, written to one text file, so that a refactor can be checked to change none of it.

    PYTHONPATH=$PWD .venv/bin/python tools/ir_corpus.py --out /tmp/corpus-before.txt
    (refactor)
    PYTHONPATH=$PWD .venv/bin/python tools/ir_corpus.py --out /tmp/corpus-after.txt
    cmp /tmp/corpus-before.txt /tmp/corpus-after.txt      # or diff, to see where

The corpus, for each of two fixed targets (AVX-512 and AVX2, named CPUs and an explicit triple,
so that nothing depends on the host) and auto-scheduling tasks made with ``cores=2``:

- ``hand/``: every schedule examples/ builds by hand or by default (the hand schedules of
  gemm, conv2d and softmax and the default schedules of every plain declaration, at the sizes
  tests/test_examples.py and the benchmarks use, and the symbolic dense layer);
- ``auto/``: the operators of benchmarks/bench_auto.py as auto-scheduling tasks: the task (its
  record fields, its space's size and description), the generated default schedule and the
  seed configs; ``template/``: the gemm and conv2d templates at the benchmarks' sizes and their
  fallback config; ``dynamic/``: benchmarks/bench_dynamic.py's symbolic dense layer at its hint
  sizes (default schedule and seeds, bound and replayed on the symbolic declaration);
- ``.../config/INDEX``: ``--configs`` configs drawn with ``random.Random(--seed)`` from the
  spaces of those auto and template tasks, spread evenly over them.

An entry is its name, then the candidate (step list or config), the warnings raised while it
was instantiated, lowered and emitted, the loop IR (``str(lower(...))``, named as the build
workers name it), the unoptimised LLVM IR with what ``emit`` decided (symbol, parallel, loop
vectorizer), and, for every entry but the random configs, the O3-optimised IR (``--no-opt``
leaves it out).  A candidate that raises is recorded as the stage, the exception's class and
its message instead.  Entries are sorted by name; stdout gets the entry count, the errors and
the file's sha256.

``--records FILE``: two seeded RandomTuner jobs (24 trials each, on the AVX2 target, so any
x86-64 machine with AVX2 runs them) on a 128^3 matmul with bias and ReLU, declared by an
importable function and as tensors, each logged to a temporary file; FILE gets their records
in log order, one JSON object a line, without what differs from run to run: the timestamp, the
measured costs and wall time (``all_cost``), the cluster machine, a traceback's frames (its last
line stays) and the module file's absolute folder (it is made relative to the repository).

Every import of einloop's internal modules is in :func:`internals` (the public names are
imported where they are used), so that the tool can follow files that move.
"""
import argparse
import functools
import hashlib
import importlib
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# before einloop reads it: the thread count of any code path that asks this process (the
# symbolic path's bound tasks take no cores=), so no output depends on the host's CPUs
os.environ["EINLOOP_NUM_THREADS"] = "2"
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

#: label -> target string: named CPUs and the triple spelled out, so the host does not matter
TARGETS = {
    "avx512": "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512",
    "avx2": "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell",
}
CORES = 2                   # create_task(..., cores=CORES) for every auto-scheduling task
N_SEEDS = 8                 # seed configs per auto task (the tuners' n_seeds)
RECORDS_TARGET = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell"   # runs on any AVX2 CPU
RECORDS_TRIALS = 24


@functools.cache
def internals():
    """The internal einloop names the tool needs, imported in one place (adapt the paths here
    when modules move; each tries the current path first, then the planned one).

    ``emit(func, target)``: unoptimised LLVM IR as ``(text, symbol, parallel, loop_vectorize)``;
    ``emit_optimised(func, target)``: ``(module, text, symbol, parallel, target)``;
    ``Target``: codegen's target (``Target.parse``); ``replay(steps, outputs)``: a step list
    replayed as a schedule of *outputs*; ``bound_task(tensors, sizes, target)``:
    the auto task of a symbolic operator bound at *sizes* (None if not found)."""
    from einloop.codegen.jit import emit, emit_optimised
    from einloop.codegen.target import Target
    from einloop import Schedule

    def replay(steps, outputs):             # what replay() does, through the public Schedule
        return Schedule(outputs).apply_steps(steps)
    bound_task = None
    for path in ("einloop.autotune.symbolic.points", "einloop.autotune.dynamic"):
        try:
            bound_task = importlib.import_module(path).bound_task
            break
        except (ImportError, AttributeError):
            continue
    return {"emit": emit, "emit_optimised": emit_optimised, "Target": Target,
            "replay": replay, "bound_task": bound_task}


# the corpus: what is built -----------------------------------------------------------------------

def hand_schedules():
    """``(name, thunk)``: the schedules examples/ builds without tuning; a thunk returns
    ``(schedule, args)``."""
    import attention
    import batch_matmul
    import conv2d
    import dense
    import dense_dynamic
    import depthwise_conv2d
    import gemm
    import layer_norm
    import softmax
    from einloop import create_schedule

    def plain(fn, *args):
        def make():
            tensors = fn(*args)
            return create_schedule(tensors[-1]), tensors
        return make

    def call(fn, *args, **kwargs):
        return lambda: fn(*args, **kwargs)

    conv = (1, 64, 56, 56, 64, 3, 3)
    out = {
        # benchmarks/bench_core.py
        "gemm.default(1024,1024,1024)": call(gemm.default, 1024, 1024, 1024),
        "gemm.schedule(1024,1024,1024)": call(gemm.schedule, 1024, 1024, 1024),
        "conv2d.default(1,64,56,56,64,3,3)": call(conv2d.default, *conv),
        "conv2d.schedule(1,64,56,56,64,3,3)": call(conv2d.schedule, *conv),
        "softmax.default(4096,1024)": call(softmax.default, 4096, 1024),
        "softmax.schedule(4096,1024)": call(softmax.schedule, 4096, 1024),
        # the hand schedules at other sizes: tails, no lanes, stride 2
        "gemm.schedule(19,24,13)": call(gemm.schedule, 19, 24, 13),
        "conv2d.schedule(2,3,9,11,5,3,3,pad=1,stride=2)":
            call(conv2d.schedule, 2, 3, 9, 11, 5, 3, 3, pad=1, stride=2),
        "softmax.schedule(7,33)": call(softmax.schedule, 7, 33),
        # tests/test_examples.py: the default schedules of the plain declarations
        "gemm.default(8,6,5)": call(gemm.default, 8, 6, 5),
        "softmax.default(4,16)": call(softmax.default, 4, 16),
        "gemm.gemm(19,24,13)": plain(gemm.gemm, 19, 24, 13),
        "batch_matmul(3,7,16,9)": plain(batch_matmul.batch_matmul, 3, 7, 16, 9),
        "conv2d.conv2d(2,3,9,11,5,3,3,pad=1,stride=2)":
            plain(lambda *a: conv2d.conv2d(*a, pad=1, stride=2), 2, 3, 9, 11, 5, 3, 3),
        "depthwise_conv2d(2,5,8,10,3,3,1)": plain(depthwise_conv2d.depthwise_conv2d,
                                                  2, 5, 8, 10, 3, 3, 1),
        "softmax.softmax(7,33)": plain(softmax.softmax, 7, 33),
        "layer_norm(6,40)": plain(layer_norm.layer_norm, 6, 40),
        "dense_bias_gelu(10,24,17)": plain(dense.dense_bias_gelu, 10, 24, 17),
        "attention(12,8)": plain(attention.attention, 12, 8),
        # the symbolic dense layer (examples/dense_dynamic.py, benchmarks/bench_dynamic.py)
        "dense_dynamic.dense(256,256)": plain(dense_dynamic.dense, 256, 256),
        "dense_dynamic.dense(1024,1024)": plain(dense_dynamic.dense, 1024, 1024),
    }
    for op in bench_auto_ops():             # the untuned defaults of benchmarks/bench_auto.py
        out[f"{op.name}{_args(op.args)}"] = plain(op.fn, *op.args)
    return out


def bench_auto_ops():
    """The operators of benchmarks/bench_auto.py (its OPS list: name, function, arguments)."""
    import bench_auto
    return bench_auto.OPS


def _args(args) -> str:
    return "(" + ",".join(map(str, args)) + ")"


_TASKS = {}             # task key -> task, made before the workers fork
_TASK_WARNINGS = {}     # task key -> the warnings raised while it and its space were made


def task_keys():
    """Every task of the corpus as ``(key, kind)``, in a fixed order."""
    keys = []
    for label in TARGETS:
        for op in bench_auto_ops():
            keys.append((f"auto/{label}/{op.name}{_args(op.args)}", "auto"))
        for name, args in template_workloads():
            keys.append((f"template/{label}/{name}{_args(args)}", "template"))
    return keys


def template_workloads():
    import bench_auto
    return [("gemm", bench_auto.GEMM), ("conv2d", bench_auto.CONV)]


def get_task(key):
    """The task named *key* (``auto/LABEL/OP(ARGS)``, ``template/LABEL/NAME(ARGS)`` or
    ``dynamic/LABEL/dense(K,N)/n=SIZE``), made once per process."""
    task = _TASKS.get(key)
    if task is not None:
        return task
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = _make_task(key)
        len(task.config_space)              # a generated space is made on first use
        if hasattr(task, "seed_configs"):
            task.seed_configs(N_SEEDS)
    _TASKS[key] = task
    _TASK_WARNINGS[key] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return task


def _make_task(key):
    from einloop import autotune
    kind, label, what = key.split("/", 2)
    target = TARGETS[label]
    if kind == "auto":
        op = next(o for o in bench_auto_ops() if f"{o.name}{_args(o.args)}" == what)
        task = autotune.create_task(op.fn, op.args, target, cores=CORES)
    elif kind == "template":
        import conv2d
        import gemm
        fn = {"gemm": gemm.gemm_template, "conv2d": conv2d.conv2d_template}[what.split("(")[0]]
        args = dict(template_workloads())[what.split("(")[0]]
        task = autotune.create_task(fn, args, target)
    else:                                   # dynamic/LABEL/dense(K,N)/n=SIZE
        import dense_dynamic
        decl, size = what.split("/")
        k, n = (int(x) for x in decl[len("dense("):-1].split(","))
        task = internals()["bound_task"](dense_dynamic.dense(k, n), {"n": int(size[2:])},
                                         target)
    return task


DYNAMIC_HINTS = (1, 16, 256, 2048)          # benchmarks/bench_dynamic.py's HINTS


def dynamic_keys():
    if internals()["bound_task"] is None:
        return []
    return [f"dynamic/{label}/dense(1024,1024)/n={n}" for label in TARGETS
            for n in DYNAMIC_HINTS]


def config_quotas(keys, n_configs):
    """``(key, how many configs)`` in the order of *keys*: *n_configs* spread evenly, a task
    whose space is smaller than its share giving the rest to the others."""
    sizes = {key: len(get_task(key).config_space) for key, _ in keys}
    quota, left = {}, n_configs
    for i, key in enumerate(sorted(sizes, key=lambda k: (sizes[k], k))):
        quota[key] = min(sizes[key], left // (len(sizes) - i))
        left -= quota[key]
    return [(key, quota[key]) for key, _ in keys]


def jobs(n_configs, seed):
    """Every entry to build, as ``(name, spec)``; specs are small tuples a worker turns into a
    schedule (see :func:`instantiate`)."""
    out = []
    for label in TARGETS:
        for name in hand_schedules():
            out.append((f"hand/{label}/{name}", ("hand", label, name)))
    keys = task_keys()
    for key, kind in keys:
        task = get_task(key)
        out.append((f"{key}/task", ("task", key)))
        if kind == "auto":
            out.append((f"{key}/default", ("default", key)))
            for i in range(len(task.seed_configs(N_SEEDS))):
                out.append((f"{key}/seed/{i}", ("seed", key, i)))
        else:
            out.append((f"{key}/fallback", ("fallback", key)))
    for key in dynamic_keys():
        task = get_task(key)
        out.append((f"{key}/task", ("task", key)))
        out.append((f"{key}/default", ("default", key)))
        out.append((f"{key}/default/symbolic", ("symbolic", key)))
        for i in range(len(task.seed_configs(N_SEEDS))):
            out.append((f"{key}/seed/{i}", ("seed", key, i)))
    # the random configs: one Random, drawn task by task in a fixed order, spread evenly
    rng = random.Random(seed)
    for key, want in config_quotas(keys, n_configs):
        size = len(get_task(key).config_space)
        picked = set()
        while len(picked) < want:
            picked.add(rng.randrange(size))
        for index in sorted(picked):
            out.append((f"{key}/config/{index:020d}", ("config", key, index)))
    names = [n for n, _ in out]
    assert len(set(names)) == len(names), "entry names must be unique"
    return out


# building one entry -------------------------------------------------------------------------------

def instantiate(spec):
    """``(schedule, args, kernel name or None, target string, candidate text)`` of *spec*."""
    kind = spec[0]
    if kind == "hand":
        _, label, name = spec
        s, args = hand_schedules()[name]()
        return s, args, None, TARGETS[label], ""
    task = get_task(spec[1])
    target = TARGETS[spec[1].split("/")[1]]
    if kind == "default":
        cand = task.reference_candidate()
        s, args = task.instantiate_reference()
    elif kind == "symbolic":                # the default steps replayed on the declaration
        import dense_dynamic
        k, n = (int(x) for x in spec[1].split("/")[2][len("dense("):-1].split(","))
        args = dense_dynamic.dense(k, n)
        cand = task.reference_candidate()
        s = internals()["replay"](cand.steps, args[-1:])     # as a size dispatch deploys it
        return s, args, None, target, candidate_text(cand)
    elif kind == "seed":
        cand = task.seed_configs(N_SEEDS)[spec[2]]
        s, args = task.instantiate(cand)
    elif kind == "fallback":
        cand = task.fallback_config()
        s, args = task.instantiate(cand)
    else:                                   # config
        cand = task.candidate(spec[2])
        s, args = task.instantiate(cand)
    return s, args, task.name, target, candidate_text(cand)


def candidate_text(cand) -> str:
    """The candidate as its record holds it (a step list, or a config's index and entities)."""
    steps = getattr(cand, "steps", None)
    if steps is not None:
        text = json.dumps(cand.to_record() if hasattr(cand, "to_record") else
                          {"steps": [str(st) for st in steps]}, sort_keys=True, default=str)
        error = getattr(cand, "error", "")
        return text + (f"\nerror: {error}" if error else "")
    return json.dumps(cand.to_json(), sort_keys=True)


def task_text(task) -> str:
    """What a task is: its record's task field (the module's file relative to the repository),
    its space's size and, for a generated space, the space's description."""
    d = task.to_json()
    if d.get("module_file"):
        d["module_file"] = os.path.relpath(d["module_file"], ROOT)
    lines = [json.dumps(d, sort_keys=True, indent=1), f"space: {len(task.config_space)} configs",
             f"repr: {task!r}"]
    sketch = getattr(task, "sketch", None)
    if sketch is not None and hasattr(sketch, "describe"):
        lines.append(sketch.describe())
    else:
        lines += [f"knob {name}: {len(knob)} entities" for name, knob in
                  task.config_space.knobs.items()]
    return "\n".join(lines)


def build_entry(job, with_opt=True) -> tuple:
    """``(name, text, error?)`` of one job: the candidate, warnings, loop IR, LLVM IR."""
    from einloop import Error, lower
    name, spec = job
    inner = internals()
    parts, error = [f"=== {name}"], False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stage = "instantiate"
        try:
            if spec[0] == "task":
                parts += ["--- task", task_text(get_task(spec[1]))]
                if _TASK_WARNINGS[spec[1]]:
                    parts += ["--- warnings while making the task"] + _TASK_WARNINGS[spec[1]]
                return name, "\n".join(parts) + "\n", False
            s, args, kname, target, cand = instantiate(spec)
            if cand:
                parts += ["--- candidate", cand]
            stage = "lower"
            func = lower(s, args, name=kname)
            parts += ["--- loop ir", str(func)]
            stage = "emit"
            tgt = inner["Target"].parse(target)
            text, symbol, parallel, loop_vectorize = inner["emit"](func, tgt)
            head = (f"--- llvm ir (symbol {symbol}, parallel {bool(parallel)}, "
                    f"loop vectorizer {bool(loop_vectorize)})")
            parts += [head, text]
            if with_opt and spec[0] != "config":
                stage = "optimise"
                mod, _, _, _, used = inner["emit_optimised"](func, tgt)
                parts += [f"--- optimised llvm ir (target {used})", str(mod)]
        except Exception as exc:            # noqa: BLE001 -- recorded: it must not change either
            error = True
            what = "einloop.Error" if isinstance(exc, Error) else "NOT an einloop.Error"
            parts += [f"--- error at {stage} ({what})", f"{type(exc).__name__}: {exc}"]
        finally:
            if caught:
                parts += ["--- warnings"] + [f"{w.category.__name__}: {w.message}"
                                             for w in caught]
    return name, "\n".join(parts) + "\n", error


#: the jobs are dealt into this many fixed chunks, each built in order in a fresh fork of the
#: process that listed them: what one entry leaves behind in a process (a warning given once
#: per process, a cache) reaches the same later entries whatever ``--jobs`` is
CHUNKS = 16


def _work(args):
    chunk, with_opt = args
    return [build_entry(job, with_opt) for job in chunk]


def digest(entry) -> str:
    """*entry* with the body of each section replaced by its sha256 and line count."""
    out, body = [], []

    def flush():
        if body:
            text = "\n".join(body).encode()
            out.append(f"sha256 {hashlib.sha256(text).hexdigest()} ({len(body)} lines)")
            body.clear()
    for line in entry.rstrip("\n").split("\n"):
        if line.startswith(("=== ", "--- ")):
            flush()
            out.append(line)
        else:
            body.append(line)
    flush()
    return "\n".join(out) + "\n"


def write_corpus(path, n_configs, seed, workers, with_opt, digests=False):
    t0 = time.time()
    for spec in TARGETS.values():           # LLVM set up once, before the workers fork
        internals()["Target"].parse(spec).target_machine()
    todo = jobs(n_configs, seed)
    if internals()["bound_task"] is None:
        print("note: no bound_task found (see internals()): the dynamic/ entries are left out")
    chunks = [(todo[i::CHUNKS], with_opt) for i in range(CHUNKS)]
    # fork: the workers inherit the tasks made while listing the jobs; one chunk per worker
    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=1) as pool:
        done = [entry for chunk in pool.map(_work, chunks, chunksize=1) for entry in chunk]
    done.sort(key=lambda e: e[0])
    data = "".join(digest(text) if digests else text for _, text, _ in done).encode()
    with open(path, "wb") as f:
        f.write(data)
    errors = sum(1 for _, _, err in done if err)
    configs = sum(1 for n, _, _ in done if "/config/" in n)
    print(f"{path}: {len(done)} entries ({configs} random configs), {errors} recorded errors, "
          f"{len(data)} bytes, {time.time() - t0:.1f} s")
    print(f"sha256 {hashlib.sha256(data).hexdigest()}")


# --records: a seeded tuning job --------------------------------------------------------------------

#: record fields that differ between runs of one job: measured times, when, where
VOLATILE = {"timestamp": None, "result": ("costs", "all_cost", "machine")}


def stable_record(line) -> dict:
    """A log line without its run-dependent fields; an error message keeps its last line (a
    traceback's file paths and line numbers move with the code)."""
    d = json.loads(line)
    d.pop("timestamp", None)
    result = d.get("result", {})
    for key in VOLATILE["result"]:
        result.pop(key, None)
    if result.get("error_msg"):
        result["error_msg"] = result["error_msg"].strip().splitlines()[-1]
    task = d.get("task", {})
    if task.get("module_file"):
        task["module_file"] = os.path.relpath(task["module_file"], ROOT)
    return d


def records_tasks():
    """``(label, task)`` of the seeded jobs on the demo's ``relu(X @ W + bias)``: as an importable
    function (records name its module and file; build workers import it) and as tensors (the
    DAG is pickled)."""
    from einloop import autotune
    from einloop.demo import dense_relu
    args = (128, 128, 128)
    return [("function", autotune.create_task(dense_relu, args, RECORDS_TARGET, cores=CORES)),
            ("tensors", autotune.AutoTask.of_tensors(dense_relu(*args), RECORDS_TARGET,
                                                     cores=CORES))]


def write_records(path, seed):
    from einloop import autotune
    t0 = time.time()
    out, ok, total = [], 0, 0
    option = autotune.measure_option(number=2, repeat=2, n_parallel=2, timeout=60)
    for label, task in records_tasks():
        tuner = autotune.RandomTuner(task, seed=seed)
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "job.jsonl")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tuner.tune(RECORDS_TRIALS, measure_option=option,
                           callbacks=[autotune.log_to_file(log)], quiet=True)
            with open(log) as f:
                records = [stable_record(line) for line in f if line.strip()]
        out.append(f"# job: {label}, {task!r}, RandomTuner(seed={seed}), "
                   f"{RECORDS_TRIALS} trials")
        out += [json.dumps(r, sort_keys=True) for r in records]
        total += len(records)
        ok += sum(1 for r in records if r["result"]["error_no"] == 0)
    data = ("\n".join(out) + "\n").encode()
    with open(path, "wb") as f:
        f.write(data)
    print(f"{path}: {total} records ({ok} measured without error), {time.time() - t0:.1f} s")
    print(f"sha256 {hashlib.sha256(data).hexdigest()}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="ir_corpus.txt", help="the corpus file (default %(default)s)")
    p.add_argument("--configs", type=int, default=1000,
                   help="random configs, spread over the tasks (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="of the random configs and of --records")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default %(default)s)")
    p.add_argument("--no-opt", action="store_true",
                   help="leave the O3-optimised LLVM IR out (faster)")
    p.add_argument("--digest", action="store_true",
                   help="write each section's sha256 instead of its text (a small file; the "
                   "full one shows what differs)")
    p.add_argument("--records", metavar="FILE",
                   help="instead: run the seeded tuning job, write its records without timings")
    a = p.parse_args(argv)
    if a.records:
        write_records(a.records, a.seed)
    else:
        write_corpus(a.out, a.configs, a.seed, a.jobs, not a.no_opt, a.digest)


if __name__ == "__main__":
    main()
