"""Tuning curves: each workload's best time so far against its trials, drawn to an image.

A model's log holds one workload per kernel structure; looking at the curves tells at a glance
which tasks are still improving (more trials would pay) and which flattened early.  Needs
matplotlib (``pip install einloop[plot]``), imported only here.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict

from ...errors import TuningLogError
from . import record as rec

#: workloads drawn at most (the slowest first: they weigh most in a model)
MAX_PANELS = 16


def best_so_far(path) -> dict:
    """``{(workload name, workload key): [best seconds after each trial]}`` of the log at
    *path*, in the order the trials were written (failed trials keep the best before them;
    trials before the first success are not drawn)."""
    curves = defaultdict(list)
    names = {}
    for r in rec.load(path):
        key = (r.workload, r.target)
        names[key] = r.name
        seen = curves[key]
        best = seen[-1] if seen else math.inf
        if r.ok:
            best = min(best, r.mean_cost)
        seen.append(best)
    return {(names[k], k[0]): [v for v in c if v != math.inf] for k, c in curves.items()}


def plot_curves(path, out) -> int:
    """Draw :func:`best_so_far` of the log at *path* to the image *out* (its format from its
    extension), one panel per workload; returns the number of panels."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TuningLogError("drawing tuning curves needs matplotlib: pip install "
                             "'einloop[plot]'") from None
    curves = {k: c for k, c in best_so_far(path).items() if c}
    if not curves:
        raise TuningLogError(f"{path}: no successful trial to draw")
    ranked = sorted(curves.items(), key=lambda kv: -kv[1][-1])[:MAX_PANELS]
    cols = min(4, len(ranked))
    rows = -(-len(ranked) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax in axes.flat[len(ranked):]:
        ax.axis("off")
    for ax, ((name, key), c) in zip(axes.flat, ranked):
        ax.plot(range(len(c)), [v * 1e3 for v in c], drawstyle="steps-post")
        tag = re.findall(r"[0-9a-f]{6,}", key)
        ax.set_title(f"{name} ({tag[-1][:6] if tag else key[:12]}): {len(c)} trials",
                     fontsize=8)
        ax.set_xlabel("trial", fontsize=7)
        ax.set_ylabel("best ms", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"{path}: best time so far per workload", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return len(ranked)
