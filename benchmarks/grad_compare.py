"""Gradients of one image loss by jaxrender and by Mitsuba 3, seed by seed:
the runners and the comparison row ``bench_grad.py`` and
``bench_volume.py`` share.

The loss is ``mean((render(params, seed) - target) ** 2)`` against one
fixed ``target`` image for both renderers (so that both estimate the same
gradient), at parameter values scaled away from the scene's own by
``scales`` (key -> factor). Runners map a seed to a computed result, to be
timed by ``efficiency.alternate``:

* "ours primal" / "mitsuba primal": the loss;
* "ours grad" / "mitsuba grad": (loss, the gradient of ``keys`` flattened
  into one vector in ``keys`` order) -- jaxrender's
  ``jax.jit(jax.value_and_grad(loss))``, Mitsuba's render + loss +
  ``dr.backward``.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from efficiency import (Comparison, alternate, gradient_scale, mean_difference_z, median, relative_seed_variance,
                        table)


def grad_vector(grads: Mapping, keys: Sequence[str]) -> np.ndarray:
    """The gradients of ``keys`` flattened into one vector, in ``keys`` order."""
    return np.concatenate([np.asarray(grads[k], np.float64).reshape(-1) for k in keys])


def jaxrender_runners(jaxrender, scene, scales: Mapping[str, float], target: np.ndarray, spp: int) -> dict:
    """jaxrender's primal-loss and value_and_grad runners (seed -> result)."""
    import jax
    import jax.numpy as jnp

    keys = list(scales)
    params = {k: jnp.asarray(np.asarray(scene.params[k]) * scales[k], jnp.float32) for k in keys}

    def loss(p, seed):
        return jnp.mean((jaxrender.render(scene, p, spp=spp, seed=seed) - target) ** 2)
    primal = jax.jit(loss)
    vg = jax.jit(jax.value_and_grad(loss))

    def run_grad(seed: int):
        value, grads = jax.block_until_ready(vg(params, np.uint32(seed)))
        return float(value), grad_vector(grads, keys)
    return {"ours primal": lambda seed: float(primal(params, np.uint32(seed))), "ours grad": run_grad}


def mitsuba_runners(mi, scene, scales: Mapping[str, float], target: np.ndarray, spp: int) -> dict:
    """Mitsuba's primal-loss and render + dr.backward runners (seed ->
    result) for a scene loaded with a differentiable integrator (prb,
    prbvolpath)."""
    import drjit as dr
    keys = list(scales)
    params = mi.traverse(scene)
    missing = [k for k in keys if k not in params]
    if missing:
        raise KeyError(f"mi.traverse lacks {missing}")
    for k in keys:
        params[k] = params[k] * scales[k]
    params.update()
    ref = mi.TensorXf(np.ascontiguousarray(target, np.float32))

    def primal(seed: int) -> float:
        img = mi.render(scene, params, spp=spp, seed=seed)
        loss = float(np.asarray(dr.mean(dr.square(img - ref), axis=None)).reshape(-1)[0])
        dr.sync_thread()
        return loss

    def grad(seed: int):
        for k in keys:
            dr.enable_grad(params[k])
        params.update()
        img = mi.render(scene, params, spp=spp, seed=seed)
        loss = dr.mean(dr.square(img - ref), axis=None)
        dr.backward(loss)
        g = grad_vector({k: np.asarray(dr.grad(params[k])) for k in keys}, keys)
        for k in keys:
            dr.disable_grad(params[k])
        params.update()
        value = float(np.asarray(loss).reshape(-1)[0])
        dr.sync_thread()
        return value, g
    return {"mitsuba grad": grad, "mitsuba primal": primal}


def run_all(runners: Mapping, seeds: Sequence[int]) -> tuple[dict, dict, dict]:
    """``alternate`` over all the runners, then, where Mitsuba's are among
    them, jaxrender's two alone: (times, results, jaxrender's own times).
    Our value_and_grad / primal ratio is taken from the second loop: right
    after Mitsuba's render + backward our primal ran ~10% slower (Cornell
    box, 128x128: 0.056-0.058 s against 0.051-0.052 s alone, the
    value_and_grad unchanged), which flattered the ratio (2.42x against
    2.65-2.72x)."""
    times, results = alternate(runners, seeds)
    own = times
    if "mitsuba grad" in runners:
        own, _ = alternate({k: runners[k] for k in ("ours primal", "ours grad")}, seeds)
    return times, results, own


def gradient_row(scene: str, rfilter: str, times: Mapping[str, list], results: Mapping[str, list],
                 own: Mapping[str, list] | None = None) -> dict:
    """The measurements of one scene and filter from ``run_all``'s times,
    results and jaxrender's own times (``own``, default ``times``): median
    times, jaxrender's value_and_grad / primal time (from ``own``) and,
    when Mitsuba ran, the Comparison (relative gradient variance, one scale
    pooled over both renderers), Mitsuba's ratio and the z-scores of the
    difference of the mean gradients."""
    t = {name: median(ts) for name, ts in times.items()}
    own = times if own is None else own
    t_own = {k: median(own[k]) for k in ("ours primal", "ours grad")}
    g_ours = np.stack([g for _, g in results["ours grad"]])
    row = {"scene": scene, "filter": rfilter, "times": t, "times_all": dict(times),
           "times_own": t_own,
           "grads_ours": g_ours.tolist(), "grad_over_primal_ours": t_own["ours grad"] / t_own["ours primal"]}
    if "mitsuba grad" in results:
        g_mi = np.stack([g for _, g in results["mitsuba grad"]])
        scale = gradient_scale(g_ours, g_mi)
        cmp = Comparison(scene, rfilter, t["ours grad"], t["mitsuba grad"],
                         relative_seed_variance(g_ours, scale), relative_seed_variance(g_mi, scale))
        row.update(cmp.as_dict(), grads_mitsuba=g_mi.tolist(), scale=scale.tolist(),
                   grad_over_primal_mitsuba=t["mitsuba grad"] / t["mitsuba primal"],
                   mean_z=mean_difference_z(g_ours, g_mi).tolist())
    return row


def timing_line(row: dict) -> str:
    """Both renderers' gradient and primal times and their ratio, one line
    (jaxrender's timed by themselves: ``run_all``)."""
    t, own = row["times"], row["times_own"]
    line = (f"jaxrender value_and_grad {own['ours grad']:.3f} s, primal {own['ours primal']:.3f} s, "
            f"ratio {row['grad_over_primal_ours']:.2f}x (target <= 2.5x)")
    if "mitsuba grad" in t:
        line += (f"; Mitsuba render + backward {t['mitsuba grad']:.3f} s, primal {t['mitsuba primal']:.3f} s, "
                 f"ratio {row['grad_over_primal_mitsuba']:.2f}x")
    return line


def print_means(row: dict, sizes: Mapping[str, int], indent: str = "      ") -> None:
    """Both renderers' mean gradients over seeds, parameter by parameter
    (``sizes``: key -> number of components, in the gradient vector's
    order), with the largest |z| of their difference: a sanity check only,
    Mitsuba being a peer estimate, not ground truth. A parameter of more
    than 3 components (a grid) is summarised: the sum of its mean
    gradient with the z-score of the sums' difference (the sum over a
    grid's voxels is far less noisy than one voxel), the correlation of
    the two renderers' means and the share of components with |z| > 3
    (about 0.3% when the two agree)."""
    g_ours, g_mi, z = (np.asarray(row[k], np.float64) for k in ("grads_ours", "grads_mitsuba", "mean_z"))
    fmt = lambda v: "[" + ", ".join(f"{x:+.3e}" for x in v) + "]"  # noqa: E731
    start = 0
    width = max(len(k) for k in sizes)
    for k, n in sizes.items():
        part = slice(start, start + n)
        start += n
        a, b, zk = g_ours[:, part].mean(0), g_mi[:, part].mean(0), np.abs(z[part])
        if n <= 3:
            print(f"{indent}mean d loss / d {k:<{width}} jaxrender {fmt(a)}  mitsuba {fmt(b)}  max |z| {zk.max():.1f}")
        else:
            corr = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
            z_sum = mean_difference_z(g_ours[:, part].sum(1), g_mi[:, part].sum(1))[0]
            print(f"{indent}mean d loss / d {k:<{width}} ({n} components) sum: jaxrender {a.sum():+.3e}, "
                  f"mitsuba {b.sum():+.3e} (z {z_sum:+.1f}); correlation {corr:.3f}; |z| > 3: {(zk > 3).mean():.1%}, "
                  f"max {zk.max():.1f}")


def print_table(rows: Sequence[dict], indent: str = "   ") -> None:
    """The Comparison table of gradient_row's rows, with what its columns mean."""
    print(f"\n{indent}t: one value_and_grad (Mitsuba: render + loss + dr.backward), median over the seeds. relvar:\n"
          f"{indent}the variance of each gradient component over seeds / its mean square (pooled over both renderers'\n"
          f"{indent}seeds), averaged over the components. Ratios Mitsuba over jaxrender; efficiency > 1: jaxrender\n"
          f"{indent}reaches a given gradient noise sooner (target >= 1.5)\n")
    print(indent + table([Comparison.of(r) for r in rows], "relvar").replace("\n", "\n" + indent))
