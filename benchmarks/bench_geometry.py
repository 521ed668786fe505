"""Geometry gradients: what exists today is the camera's (``sensor.to_world``).

    python benchmarks/bench_geometry.py [--res 128] [--spp 16] [--repeats 7] [--seeds 64]
        [--filters gaussian,box] [--json out.json]

On the Cornell box (``jaxrender.cornell_box()``, path tracer, max_depth 8):

time      ``jax.jit`` of the primal image and of ``jax.value_and_grad`` of
   the loss ``mean((render(sensor.to_world) - target) ** 2)`` (target: the
   image at a camera moved by 0.05 along x), run alternately, median of
   --repeats: the gradient / primal ratio (target <= 5).
accuracy  The derivative of a linear loss ``sum(render * W)`` (W fixed
   random weights) along a camera translation in x: jaxrender's reverse
   mode (--seeds seeds, mean and standard error) beside central finite
   differences with common random numbers (--seeds x 2 seeds, steps 0.02
   and 0.01: they converge slowly, see tests/test_camera_gradients.py),
   and the z-score between them.
mitsuba   Mitsuba 3 ``prb_projective`` (llvm_ad_rgb) asked for the same
   derivative: printed is what it does (3.9.1 raises: its differential
   phase is not attached to the sensor's transform).

Mesh vertex and shape-transform gradients are not implemented yet (the
reparameterized / projective megakernel); their part of this benchmark is
to come with them.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import jax
import jax.numpy as jnp

import jaxrender


def scene_for(res: int, rfilter: str):
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = res
    d["sensor"]["film"]["rfilter"] = {"type": rfilter}
    d["integrator"] = {"type": "path", "max_depth": 8}
    return jaxrender.load_dict(d)


def timing(scene, spp: int, repeats: int) -> dict:
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    moved = m.at[0, 3].add(0.05)
    target = jaxrender.render(scene, {key: moved}, spp=4 * spp, seed=12345)
    primal = jax.jit(lambda v, s: jaxrender.render(scene, {key: v}, spp=spp, seed=s))
    grad = jax.jit(jax.value_and_grad(
        lambda v, s: jnp.mean((jaxrender.render(scene, {key: v}, spp=spp, seed=s) - target) ** 2)))
    t0 = time.perf_counter()
    jax.block_until_ready(primal(m, jnp.uint32(0)))
    t1 = time.perf_counter()
    jax.block_until_ready(grad(m, jnp.uint32(0)))
    t2 = time.perf_counter()
    times = {"primal": [], "value_and_grad": []}
    for i in range(repeats):
        for name, f in (("primal", primal), ("value_and_grad", grad)):
            t = time.perf_counter()
            jax.block_until_ready(f(m, jnp.uint32(i + 1)))
            times[name].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"first_primal_s": t1 - t0, "first_grad_s": t2 - t1, **{k + "_s": v for k, v in med.items()},
            "ratio": med["value_and_grad"] / med["primal"]}


def accuracy(scene, spp: int, seeds: int) -> dict:
    key = scene.camera_key
    m = jnp.asarray(scene.params[key])
    res = scene.sensor(0)[1].height, scene.sensor(0)[1].width
    w = jnp.asarray(np.random.default_rng(3).uniform(0.0, 1.0, res + (3,)).astype(np.float32))
    direction = jnp.zeros((4, 4), jnp.float32).at[0, 3].set(1.0)
    loss = jax.jit(lambda v, s: jnp.sum(jaxrender.render(scene, {key: v}, spp=spp, seed=s) * w))
    grad = jax.jit(lambda v, s: jnp.sum(jax.grad(lambda x: jnp.sum(
        jaxrender.render(scene, {key: x}, spp=spp, seed=s, seed_grad=s) * w))(v) * direction))
    ours = np.array([float(grad(m, jnp.uint32(s))) for s in range(seeds)])
    out = {"ours": float(ours.mean()), "ours_se": float(ours.std(ddof=1) / np.sqrt(seeds))}
    for h in (0.02, 0.01):
        fd = np.array([(float(loss(m + h * direction, jnp.uint32(s))) - float(loss(m - h * direction, jnp.uint32(s))))
                       / (2 * h) for s in range(10_000, 10_000 + 2 * seeds)])
        se = float(fd.std(ddof=1) / np.sqrt(len(fd)))
        out[f"fd_{h}"], out[f"fd_{h}_se"] = float(fd.mean()), se
        out[f"z_{h}"] = (out["ours"] - out[f"fd_{h}"]) / np.hypot(se, out["ours_se"])
    return out


def mitsuba_attempt(res: int, spp: int) -> str:
    try:
        os.environ.setdefault("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM-19.so")
        import drjit as dr
        import mitsuba as mi
        mi.set_variant("llvm_ad_rgb")
    except Exception as exc:  # noqa: BLE001 - report whatever stops it
        return f"Mitsuba unavailable: {exc}"
    d = mi.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = res
    d["integrator"] = {"type": "prb_projective", "max_depth": 8}
    scene = mi.load_dict(d)
    params = mi.traverse(scene)
    t = mi.Float(0.0)
    dr.enable_grad(t)
    params["sensor.to_world"] = mi.Transform4f().translate(mi.Point3f(t, 0.0, 0.0)) @ mi.Transform4f(
        params["sensor.to_world"])
    params.update()
    try:
        image = mi.render(scene, params, spp=spp, seed=1)
        dr.forward(t)
        return f"prb_projective forward derivative sum: {float(dr.sum(dr.ravel(dr.grad(image)))[0]):.4g}"
    except Exception as exc:  # noqa: BLE001
        cause = exc.__cause__ or exc
        return "prb_projective raises: " + str(cause).strip().splitlines()[0][:160]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--filters", default="gaussian,box")
    ap.add_argument("--json")
    args = ap.parse_args()
    report = {}
    for rfilter in args.filters.split(","):
        scene = scene_for(args.res, rfilter)
        t = timing(scene, args.spp, args.repeats)
        print(f"[{rfilter}] {args.res}^2, {args.spp} spp: primal {t['primal_s'] * 1e3:.0f} ms, value_and_grad "
              f"{t['value_and_grad_s'] * 1e3:.0f} ms: ratio {t['ratio']:.2f} (target <= 5); first calls "
              f"{t['first_primal_s']:.1f} s / {t['first_grad_s']:.1f} s", flush=True)
        a = accuracy(scene_for(32, rfilter), 16, args.seeds)
        print(f"[{rfilter}] d/dx of sum(render * W), 32^2: ours {a['ours']:.3f} +- {a['ours_se']:.3f}; finite "
              f"differences {a['fd_0.02']:.3f} +- {a['fd_0.02_se']:.3f} (step 0.02, z {a['z_0.02']:.2f}), "
              f"{a['fd_0.01']:.3f} +- {a['fd_0.01_se']:.3f} (step 0.01, z {a['z_0.01']:.2f})", flush=True)
        report[rfilter] = {"time": t, "accuracy": a}
    report["mitsuba"] = mitsuba_attempt(args.res, args.spp)
    print("Mitsuba 3:", report["mitsuba"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
