"""Symbolic sizes in torch.compile(backend="einloop", dynamic=True): the graph compiled once with
size variables (einloop/torch/symbolic.py) against the per-size fallback (PerSizeGraph: the graph
traced and compiled again at each new size).

For an MLP (256 -> 512 -> 256, GELU) and an attention block (d 64, 4 heads, residual, layer
norm), both untuned (default schedules), in inference:

(``options={"symbolic": False}`` selects the per-size path.)

* **first call at a new size**: the wall time of the first call at a size not met before (after
  a first call at another size), with the compile cache off (``EINLOOP_CACHE=0``: LLVM runs);
* **steady calls**: the time per call at one size, once compiled, of both paths in interleaved
  rounds (median; the symbolic kernels take their sizes at run time and run one by one, the
  per-size ones are specialised and run as one native call).

    EINLOOP_CACHE=0 .venv/bin/python benchmarks/bench_symbolic.py [--rounds 20]
"""
import argparse
import os
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import interleaved  # noqa: E402
from common import cpu_description  # noqa: E402



class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(256, 512), torch.nn.Linear(512, 256)

    def forward(self, x):
        return self.b(F.gelu(self.a(x)))


class Attention(torch.nn.Module):
    """Self-attention over (batch, sequence, d) with *heads* heads, the scores scaled by the
    square root of the head size, a residual and a layer norm (also the symbolic backend's
    test model, at a small d)."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.norm, self.heads = torch.nn.LayerNorm(d), heads
        self.scale = (d // heads) ** 0.5

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, -1))
        a = torch.softmax(q @ k.transpose(-1, -2) / self.scale, -1) @ v
        return self.norm(x + self.out(a.transpose(1, 2).reshape(b, s, d)))


#: (model, the first size, a new size, the size of the steady calls)
CASES = {"mlp": (MLP, (7, 256), (33, 256), (16, 256)),
         "attention": (Attention, (3, 20, 64), (5, 37, 64), (4, 64, 64))}


def run(fn, x):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(cpu_description(), f"torch {torch.__version__}, "
          f"EINLOOP_CACHE={os.environ.get('EINLOOP_CACHE', '1')}")
    for name, (make, first, new, steady) in CASES.items():
        torch.manual_seed(0)
        model = make().eval()
        torch._dynamo.reset()
        fns, firsts = {}, {}
        for symbolic in (True, False):
            label = "symbolic" if symbolic else "per size"
            fn = torch.compile(model, backend="einloop", dynamic=True,
                               options={"symbolic": symbolic})
            t0 = time.perf_counter()
            run(fn, torch.randn(*first))
            t1 = time.perf_counter()
            run(fn, torch.randn(*new))
            t2 = time.perf_counter()
            x = torch.randn(*steady)
            got = run(fn, x)
            with torch.no_grad():
                torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
            firsts[label] = (t1 - t0, t2 - t1)
            fns[label] = (lambda f=fn: run(f, x))
        for label, (t_first, t_new) in firsts.items():
            print(f"{name:9s} {label:9s}: first call {t_first:7.2f} s, first call at a new size "
                  f"{t_new:7.3f} s")
        times = interleaved(fns, args.rounds)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name:9s} steady at {steady}: symbolic {med['symbolic'] * 1e6:8.1f} us, "
              f"per size {med['per size'] * 1e6:8.1f} us "
              f"(symbolic / per size = {med['symbolic'] / med['per size']:.2f})")


if __name__ == "__main__":
    main()
