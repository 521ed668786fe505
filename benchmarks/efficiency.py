"""Efficiency at equal error, jaxrender against Mitsuba 3 in the same run:
the helpers ``bench_primal.py``, ``bench_grad.py`` and ``bench_volume.py``
share.

What a user waits for is an estimate of a given noise, not a given number
of samples, so the figure of merit is efficiency = 1 / (time x variance).
Variance is measured over seeds: the same estimate (an image, a gradient)
computed K times with different seeds, the unbiased variance of each
element across the K results, averaged over the elements. The reported
ratio is ``(t_mitsuba * var_mitsuba) / (t_ours * var_ours)``: above 1,
jaxrender reaches a given noise level sooner.

Example::

    images = np.stack([render(seed=k) for k in range(8)])    # (K, H, W, 3)
    var = seed_variance(images)                               # mean per-pixel variance
    row = Comparison("cornell box", "gaussian", t_ours=0.3, t_mitsuba=0.4,
                     var_ours=var, var_mitsuba=2 * var)
    row.efficiency_ratio                                      # (0.4 * 2) / 0.3 = 2.67
"""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

LIBLLVM = "/usr/lib/x86_64-linux-gnu/libLLVM-19.so"
FILTERS = ("box", "tent", "gaussian")   # Mitsuba's film default is gaussian
WARMUP_SEED = 1_000_003


def seed_variance(samples: Any) -> float:
    """Mean over elements of the unbiased variance across axis 0 (the
    seeds) of ``samples``, shape (K, ...) with K >= 2."""
    x = np.asarray(samples, np.float64)
    if x.ndim < 1 or x.shape[0] < 2:
        raise ValueError(f"need at least 2 seeds along axis 0, got shape {x.shape}")
    return float(x.reshape(x.shape[0], -1).var(axis=0, ddof=1).mean())


def variance_ratio_interval(ours: Any, theirs: Any, level: float = 0.9, resamples: int = 400,
                            seed: int = 0) -> tuple[float, float]:
    """A bootstrap interval (``level``, two-sided percentiles) of
    ``seed_variance(theirs) / seed_variance(ours)``, each renderer's seeds
    resampled on their own. Per-pixel variances over a few seeds move with
    the few seeds that caught a bright path: on the Cornell box, runs with 8
    and 16 seeds read 1.03x and 0.89x for two renderers whose variances
    agree within 2% over 96 seeds, so a ratio is quoted with its interval."""
    a, b = (np.asarray(x, np.float64).reshape(len(x), -1) for x in (ours, theirs))
    rng = np.random.default_rng(seed)

    def resample(x):
        # a draw of one seed K times has no spread (a zero variance): with
        # 4 seeds that is 1 draw in 64, so such draws are drawn again
        while True:
            pick = rng.integers(0, len(x), len(x))
            if np.any(pick != pick[0]):
                return x[pick]

    ratios = [seed_variance(resample(b)) / seed_variance(resample(a)) for _ in range(resamples)]
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(ratios, [tail, 100.0 - tail])
    return float(lo), float(hi)


def gradient_scale(*gradient_sets: Any) -> np.ndarray:
    """Per-parameter scale shared by several renderers' gradients: the mean
    of g**2 over all their seeds, each set shaped (K_i, P). The mean square
    (rather than the squared mean) stays away from zero where a parameter's
    gradient is small, and one shared scale weighs every parameter alike
    for all renderers, so ratios of :func:`relative_seed_variance` compare
    like with like."""
    g = np.concatenate([np.asarray(s, np.float64).reshape(len(s), -1) for s in gradient_sets])
    return (g * g).mean(axis=0)


def relative_seed_variance(gradients: Any, scale: np.ndarray) -> float:
    """Mean over parameters of (variance across seeds / scale) of gradients
    shaped (K, P); parameters whose scale is 0 (always-zero gradients) are
    left out."""
    g = np.asarray(gradients, np.float64)
    g = g.reshape(g.shape[0], -1)
    if g.shape[0] < 2:
        raise ValueError(f"need at least 2 seeds, got {g.shape[0]}")
    keep = np.asarray(scale) > 0
    if not keep.any():
        raise ValueError("every gradient is zero: no relative variance")
    return float((g.var(axis=0, ddof=1)[keep] / np.asarray(scale)[keep]).mean())


def mean_difference_z(a: Any, b: Any) -> np.ndarray:
    """Per-element z-score of mean(a) - mean(b) over seeds (axis 0), with the
    standard error of each mean from its own seed spread: |z| of a few at
    most when the two estimate the same thing. Elements where both spreads
    are 0 give z = 0 if the means agree, inf otherwise."""
    a, b = (np.asarray(s, np.float64).reshape(len(s), -1) for s in (a, b))
    se2 = a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b)
    diff = a.mean(0) - b.mean(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se2 > 0, diff / np.sqrt(se2), np.where(diff == 0, 0.0, np.inf))


def alternate(runners: Mapping[str, Callable[[int], Any]], seeds: Sequence[int], warmup: int = 1
              ) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """Call each runner(seed) for every seed, the runners taking turns seed
    by seed so that a change in the machine's load affects all alike,
    after ``warmup`` untimed calls each (seeds WARMUP_SEED, WARMUP_SEED + 1,
    ..., away from the timed ones). Returns (wall
    times, results), each a list per runner in seed order. A runner must
    return a computed value (not a lazy one) for its time to count."""
    for w in range(warmup):
        for run in runners.values():
            run(WARMUP_SEED + w)
    times: dict[str, list[float]] = {name: [] for name in runners}
    results: dict[str, list[Any]] = {name: [] for name in runners}
    for seed in seeds:
        for name, run in runners.items():
            t0 = time.perf_counter()
            out = run(seed)
            times[name].append(time.perf_counter() - t0)
            results[name].append(out)
    return times, results


@dataclass
class Comparison:
    """One row: jaxrender against Mitsuba on one scene with one filter.
    Times in seconds (median over the timed calls); variances as measured
    by :func:`seed_variance` or :func:`relative_seed_variance`."""
    scene: str
    filter: str
    t_ours: float
    t_mitsuba: float
    var_ours: float
    var_mitsuba: float

    @property
    def time_ratio(self) -> float:
        """t_mitsuba / t_ours: above 1, jaxrender is faster per sample."""
        return self.t_mitsuba / self.t_ours

    @property
    def variance_ratio(self) -> float:
        """var_mitsuba / var_ours: above 1, jaxrender is less noisy per sample."""
        return self.var_mitsuba / self.var_ours

    @property
    def efficiency_ratio(self) -> float:
        """(t_mitsuba * var_mitsuba) / (t_ours * var_ours)."""
        return self.time_ratio * self.variance_ratio

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> "Comparison":
        """The Comparison among a benchmark's row of measurements (a dict
        holding at least this class's fields, as ``as_dict`` writes them)."""
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    def as_dict(self) -> dict:
        return dict(asdict(self), time_ratio=self.time_ratio, variance_ratio=self.variance_ratio,
                    efficiency_ratio=self.efficiency_ratio)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def table(rows: Sequence[Comparison], var_label: str = "var") -> str:
    """The rows as an aligned text table, one line per row."""
    head = (f"{'scene':<20} {'filter':<8} {'t_ours s':>9} {'t_mitsuba s':>11} {var_label + '_ours':>12} "
            f"{var_label + '_mitsuba':>15} {'time ratio':>10} {'var ratio':>9} {'efficiency':>10}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.scene:<20} {r.filter:<8} {r.t_ours:9.4f} {r.t_mitsuba:11.4f} {r.var_ours:12.4e} "
                     f"{r.var_mitsuba:15.4e} {r.time_ratio:10.2f} {r.variance_ratio:9.2f} {r.efficiency_ratio:10.2f}")
    return "\n".join(lines)


def import_mitsuba(variant: str = "llvm_ad_rgb"):
    """Mitsuba set to ``variant``, or a string saying why it cannot be had.
    Its LLVM backend needs libLLVM >= 19; DRJIT_LIBLLVM_PATH is pointed at
    it when unset."""
    if variant.startswith("llvm") and "DRJIT_LIBLLVM_PATH" not in os.environ:
        if not os.path.exists(LIBLLVM):
            return f"Mitsuba {variant} needs {LIBLLVM} (apt-get install -y libllvm19) or DRJIT_LIBLLVM_PATH"
        os.environ["DRJIT_LIBLLVM_PATH"] = LIBLLVM
    try:
        import mitsuba as mi
        mi.set_variant(variant)
    except Exception as exc:  # missing package or backend: the benchmark reports it and goes on
        return f"Mitsuba {variant} unavailable: {type(exc).__name__}: {exc}"
    return mi


def parse_filters(text: str) -> list[str]:
    names = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in names if f not in FILTERS]
    if bad or not names:
        raise SystemExit(f"--filters: {bad or text!r} not among {', '.join(FILTERS)}")
    return names


def set_filter(scene_dict: dict, rfilter: str) -> dict:
    """scene_dict with every sensor's film using the reconstruction filter
    ``rfilter`` (at Mitsuba's default size), changed in place."""
    for value in scene_dict.values():
        if isinstance(value, dict) and "film" in value:
            value["film"]["rfilter"] = {"type": rfilter}
    return scene_dict


def note_load() -> float:
    """The load average at the start of a run, with a note when other
    processes are busy (timings are then noisy); returns the start time,
    for ``finish``."""
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"note: load average {load:.2f} at start on {os.cpu_count()} cores: other processes may skew times")
    return time.perf_counter()


def finish(results: dict, t_start: float, json_path: str | None) -> None:
    """Record and print the run's total time and the load at its end, and
    write ``results`` to ``json_path`` when given."""
    results["total_s"] = time.perf_counter() - t_start
    results["loadavg_end"] = os.getloadavg()[0]
    print(f"total {results['total_s']:.0f} s (load average at the end {results['loadavg_end']:.2f})")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
