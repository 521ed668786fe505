"""Geometry gradients: a mesh and a sphere under the direct integrator
against Mitsuba 3's ``direct_projective``, and the camera's gradient.

    apt-get install -y libllvm19     # Mitsuba's LLVM backend needs LLVM >= 19
    python benchmarks/bench_geometry.py [--res 128] [--spp 16] [--repeats 7] [--seeds 64]
        [--parts mesh,sphere,camera,clutter] [--filters gaussian,box] [--spp-boundary N] [--json out.json]

mesh    A floor lit by a small area light, with a box between them (an OBJ
   of 24 vertices, split at its edges as Mitsuba's ``cube`` is) casting a
   shadow; the same scene dict for both renderers, the box moved along x by
   adding t to its ``vertex_positions``. Times, median of --repeats:
   jaxrender's primal and ``jax.value_and_grad`` of the loss
   ``mean((render - target) ** 2)`` (target: the box moved by 0.05),
   alternating; then Mitsuba's ``direct_projective`` render and its render
   + ``dr.backward`` of the same loss, alternating. Then the derivative of
   a linear loss ``sum(render * W)`` along t, 32^2 pixels, --seeds seeds: jaxrender's reverse mode, Mitsuba's
   forward mode (``dr.forward``), beside central finite differences of
   jaxrender's images (common random numbers, step 0.01). Targets:
   gradient <= 5x primal, faster than Mitsuba.
sphere  The same with a sphere (radius 0.3) in the box's place, moved along
   x through its ``to_world``.
clutter The sphere part's scene beside a static UV sphere of 4096
   triangles: the sphere's derivative of ``sum(render * W)`` over --seeds
   seeds and value_and_grad's time, as rendered (the boundary samples
   favour the geometry that moves) and with every piece of geometry
   treated as moving (as before that change), and the ratio of their
   efficiencies (1 / (time x variance)).
camera  The camera's gradient (``sensor.to_world``) on the Cornell box (path
   tracer, max_depth 8): its time against the primal (the same loss, the
   camera moved by 0.05), its value beside finite differences, for each
   --filters; and what Mitsuba 3 ``prb_projective`` does when asked (3.9.1
   raises: its differential phase is not attached to the sensor).

--spp-boundary N renders every gradient with N samples per pixel for the
film's boundary term (``render(spp_boundary=N)``; default: render's, a
quarter of the other terms' along its curves), to weigh its time against
the variance it adds.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

import jax
import jax.numpy as jnp

import jaxrender
from efficiency import alternate

# Options of every differentiated render (main sets spp_boundary from --spp-boundary).
GRAD_OPTIONS: dict = {}


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
        lambda v, s: jnp.mean((jaxrender.render(scene, {key: v}, spp=spp, seed=s, **GRAD_OPTIONS) - target) ** 2)))
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
        jaxrender.render(scene, {key: x}, spp=spp, seed=s, seed_grad=s, **GRAD_OPTIONS) * w))(v) * direction))
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


BOX_OBJ = "".join(
    # a box of 24 vertices: four per face, split at every edge (as Mitsuba's cube)
    f"v {x} {y} {z}\n" for x, y, z in
    [(-1, -1, 1), (1, -1, 1), (1, 1, 1), (-1, 1, 1), (1, -1, -1), (-1, -1, -1), (-1, 1, -1), (1, 1, -1),
     (1, -1, 1), (1, -1, -1), (1, 1, -1), (1, 1, 1), (-1, -1, -1), (-1, -1, 1), (-1, 1, 1), (-1, 1, -1),
     (-1, 1, 1), (1, 1, 1), (1, 1, -1), (-1, 1, -1), (-1, -1, -1), (1, -1, -1), (1, -1, 1), (-1, -1, 1)]) + "".join(
    f"f {4 * k + 1} {4 * k + 2} {4 * k + 3}\nf {4 * k + 1} {4 * k + 3} {4 * k + 4}\n" for k in range(6))


def _placed(sx, sy, sz, t, facing=None):
    m = np.diag([sx, sy, sz, 1.0])
    turn = {"up": [[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]],
            "down": [[1, 0, 0, 0], [0, 0, -1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]}
    if facing:
        m = m @ np.array(turn[facing], float)
    m[:3, 3] = t
    return m


def _look_at(origin, target, up=(0.0, 1.0, 0.0)):
    o, t, u = (np.asarray(v, float) for v in (origin, target, up))
    d = (t - o) / np.linalg.norm(t - o)
    left = np.cross(u, d)
    left /= np.linalg.norm(left)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = left, np.cross(d, left), d, o
    return m


def mesh_scene_dict(res: int, box_file: str, integrator: str, to_matrix=lambda m: m.astype(np.float32)) -> dict:
    """The shadow scene of the mesh part (``to_matrix``: how a renderer takes
    a 4x4); of the sphere part where ``box_file`` is None."""
    return {"type": "scene", "integrator": {"type": integrator},
            "floor": {"type": "rectangle", "to_world": to_matrix(_placed(2, 2, 1, (0, 0, 0), "up")),
                      "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.7, 0.7, 0.7]}}},
            "light": {"type": "rectangle", "to_world": to_matrix(_placed(0.4, 0.4, 1, (0.2, 2.0, 0), "down")),
                      "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [10.0, 10.0, 10.0]}}},
            "occluder": {**({"type": "obj", "filename": box_file, "face_normals": True} if box_file else
                            {"type": "sphere"}),
                         "to_world": to_matrix(_placed(0.3, 0.3, 0.3, (0.0, 0.8, 0.0))),
                         "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.5, 0.4, 0.3]}}},
            "sensor": {"type": "perspective", "fov": 50.0, "to_world": to_matrix(_look_at((0.0, 3.0, 3.0), (0, 0, 0))),
                       "film": {"type": "hdrfilm", "width": res, "height": res, "rfilter": {"type": "gaussian"}},
                       "sampler": {"type": "independent"}}}


MESH_KEY = "occluder.vertex_positions"
SPHERE_KEY = "occluder.to_world"


def mesh_part(res: int, spp: int, repeats: int, seeds: int, box_file: str | None) -> dict:
    """The mesh part (``box_file``), or the sphere part (None)."""
    out = {}
    key = MESH_KEY if box_file else SPHERE_KEY
    scene = jaxrender.load_dict(mesh_scene_dict(res, box_file, "direct"))
    v0 = jnp.asarray(scene.params[key])
    if box_file:
        shift = jnp.zeros_like(v0).reshape(-1, 3).at[:, 0].set(1.0).reshape(-1)
    else:
        shift = jnp.zeros_like(v0).at[0, 3].set(1.0)
    target = jaxrender.render(scene, {key: v0 + 0.05 * shift}, spp=4 * spp, seed=12345)
    primal = jax.jit(lambda t, s: jaxrender.render(scene, {key: v0 + t * shift}, spp=spp, seed=s))
    grad = jax.jit(jax.value_and_grad(lambda t, s: jnp.mean(
        (jaxrender.render(scene, {key: v0 + t * shift}, spp=spp, seed=s, **GRAD_OPTIONS) - target) ** 2)))
    t0 = jnp.float32(0.0)
    jax.block_until_ready(primal(t0, jnp.uint32(0)))
    jax.block_until_ready(grad(t0, jnp.uint32(0)))
    mi_fns = _mitsuba_mesh(res, spp, box_file, np.asarray(target), key)
    # Ours alternate with each other, and Mitsuba's calls run after them:
    # right after Mitsuba's gradient (seconds of work on every core) our
    # 12 ms primal ran ~35% slower, which flattered the gradient / primal
    # ratio (sphere: 5.7x interleaved, 8.4x alone). (Both warmed up above.)
    timed = range(1, repeats + 1)
    times, _ = alternate({"primal": lambda s: jax.block_until_ready(primal(t0, jnp.uint32(s))),
                          "value_and_grad": lambda s: jax.block_until_ready(grad(t0, jnp.uint32(s)))},
                         timed, warmup=0)
    if isinstance(mi_fns, dict):
        times.update(alternate({k: mi_fns[k] for k in ("mitsuba_primal", "mitsuba_grad")}, timed, warmup=0)[0])
    out["time"] = {k: float(np.median(v)) for k, v in times.items()}
    out["mitsuba"] = "ok" if isinstance(mi_fns, dict) else mi_fns

    small = jaxrender.load_dict(mesh_scene_dict(32, box_file, "direct"))
    w = jnp.asarray(np.random.default_rng(3).uniform(0.0, 1.0, (32, 32, 3)).astype(np.float32))
    lin = jax.jit(lambda t, s: jnp.sum(jaxrender.render(small, {key: v0 + t * shift}, spp=spp, seed=s,
                                                        seed_grad=s, **GRAD_OPTIONS) * w))
    dlin = jax.jit(jax.grad(lin))
    ours = np.array([float(dlin(t0, jnp.uint32(s))) for s in range(seeds)])
    h = 0.01
    fd = np.array([(float(lin(jnp.float32(h), jnp.uint32(s))) - float(lin(jnp.float32(-h), jnp.uint32(s)))) / (2 * h)
                   for s in range(10_000, 10_000 + 2 * seeds)])
    out["ours"], out["ours_se"] = float(ours.mean()), float(ours.std(ddof=1) / np.sqrt(len(ours)))
    out["fd"], out["fd_se"] = float(fd.mean()), float(fd.std(ddof=1) / np.sqrt(len(fd)))
    if isinstance(mi_fns, dict):
        theirs = np.array([mi_fns["forward_linear"](s, np.asarray(w)) for s in range(seeds)])
        out["mitsuba_grad"], out["mitsuba_grad_se"] = float(theirs.mean()), float(theirs.std(ddof=1) / np.sqrt(seeds))
    return out


def _mitsuba_mesh(res: int, spp: int, box_file: str | None, target: np.ndarray, key: str):
    """Mitsuba's direct_projective on the mesh (sphere) part's scene: its
    timed primal and gradient calls, and its forward derivative of the
    linear loss at 32^2 (a dict), or why it is unavailable (a str)."""
    try:
        os.environ.setdefault("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM-19.so")
        import drjit as dr
        import mitsuba as mi
        mi.set_variant("llvm_ad_rgb")
    except Exception as exc:  # noqa: BLE001 - report whatever stops it
        return f"Mitsuba unavailable: {exc}"
    to_matrix = lambda m: mi.ScalarTransform4f(m.tolist())   # noqa: E731

    def load(r):
        scene = mi.load_dict(mesh_scene_dict(r, box_file, "direct_projective", to_matrix))
        params = mi.traverse(scene)
        return scene, params, (mi.Float(params[key]) if box_file else mi.Transform4f(params[key]))

    scene, params, v0 = load(res)
    ref = mi.TensorXf(target)

    def set_shift(p, base, t):
        if box_file:
            p[key] = base + dr.ravel(mi.Vector3f(t, 0.0, 0.0) + dr.zeros(mi.Vector3f, dr.width(base) // 3))
        else:
            p[key] = mi.Transform4f().translate(mi.Vector3f(t, 0.0, 0.0)) @ base
        p.update()

    def primal(seed):
        set_shift(params, v0, mi.Float(0.0))
        img = mi.render(scene, params, spp=spp, seed=seed)
        dr.eval(dr.mean(dr.square(img - ref), axis=None))
        # (Dr.Jit's LLVM backend returns from eval before its kernels finish:
        # without the wait, their tail runs into jaxrender's timed calls)
        dr.sync_thread()

    def gradient(seed):
        t = mi.Float(0.0)
        dr.enable_grad(t)
        set_shift(params, v0, t)
        img = mi.render(scene, params, spp=spp, seed=seed)
        loss = dr.mean(dr.square(img - ref), axis=None)
        dr.backward(loss)
        dr.eval(dr.grad(t))
        dr.sync_thread()

    small_scene, small_params, small_v0 = load(32)

    def forward_linear(seed, w):
        t = mi.Float(0.0)
        dr.enable_grad(t)
        set_shift(small_params, small_v0, t)
        img = mi.render(small_scene, small_params, spp=spp, seed=seed)
        dr.forward(t)
        return float(np.asarray(dr.grad(img)).astype(np.float64).ravel() @ w.astype(np.float64).ravel())

    primal(0)
    gradient(0)
    return {"mitsuba_primal": primal, "mitsuba_grad": gradient, "forward_linear": forward_linear}


def clutter_part(res: int, spp: int, repeats: int, seeds: int) -> dict:
    """The sphere part's scene beside a static UV sphere of 4096 triangles
    (``scene.bvh.sphere_mesh``, its poles' triangles degenerate):
    the derivative of ``sum(render * W)`` (``res``^2) over ``seeds`` seeds
    and value_and_grad's time, as rendered (the samples favour what moves)
    and with every piece of geometry treated as moving (the estimator
    before: the film boundary over the whole film, edge samples uniform
    over all edges)."""
    from jaxrender.primitives import render_rules
    from jaxrender.scene.bvh import sphere_mesh
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "clutter.obj")
        with open(obj, "w") as f:
            v, faces = sphere_mesh(32, 64, 0.24, (-1.0, 0.4, -0.8))
            f.write("".join(f"v {x} {y} {z}\n" for x, y, z in v) + "".join(f"f {a + 1} {b + 1} {c + 1}\n"
                                                                          for a, b, c in faces))
        d = mesh_scene_dict(res, None, "direct")
        d["clutter"] = {"type": "obj", "filename": obj, "face_normals": True, "bsdf": {"type": "diffuse"}}
        scene = jaxrender.load_dict(d)
    key = SPHERE_KEY
    v0 = jnp.asarray(scene.params[key])
    shift = jnp.zeros_like(v0).at[0, 3].set(1.0)
    w = jnp.asarray(np.random.default_rng(3).uniform(0.0, 1.0, (res, res, 3)).astype(np.float32))
    out, moved = {}, render_rules._moved
    for name in ("favoured", "all moving"):
        if name == "all moving":
            render_rules._moved = lambda *a: None
        try:
            grad = jax.jit(jax.value_and_grad(lambda t, s: jnp.sum(jaxrender.render(
                scene, {key: v0 + t * shift}, spp=spp, seed=s, seed_grad=s, **GRAD_OPTIONS) * w)))
            t0 = jnp.float32(0.0)
            jax.block_until_ready(grad(t0, jnp.uint32(0)))
            values, times = [], []
            for s in range(1, seeds + 1):
                start = time.perf_counter()
                values.append(float(jax.block_until_ready(grad(t0, jnp.uint32(s)))[1]))
                if s <= repeats:
                    times.append(time.perf_counter() - start)
        finally:
            render_rules._moved = moved
        values = np.array(values)
        out[name] = {"mean": float(values.mean()), "se": float(values.std(ddof=1) / np.sqrt(seeds)),
                     "var": float(values.var(ddof=1)), "value_and_grad_s": float(np.median(times))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--parts", default="mesh,sphere,camera,clutter")
    ap.add_argument("--filters", default="gaussian,box")
    ap.add_argument("--spp-boundary", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    GRAD_OPTIONS["spp_boundary"] = args.spp_boundary
    report = {"spp_boundary": args.spp_boundary}
    for part in ("mesh", "sphere"):
        if part not in args.parts.split(","):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            box = os.path.join(tmp, "box.obj")
            with open(box, "w") as f:
                f.write(BOX_OBJ)
            m = mesh_part(args.res, args.spp, args.repeats, args.seeds, box if part == "mesh" else None)
        t = m["time"]
        line = (f"[{part}] {args.res}^2, {args.spp} spp, direct: primal {t['primal'] * 1e3:.0f} ms, value_and_grad "
                f"{t['value_and_grad'] * 1e3:.0f} ms: ratio {t['value_and_grad'] / t['primal']:.2f} (target <= 5)")
        if "mitsuba_grad" in t:
            line += (f"; Mitsuba direct_projective primal {t['mitsuba_primal'] * 1e3:.0f} ms, gradient "
                     f"{t['mitsuba_grad'] * 1e3:.0f} ms: ours {t['mitsuba_grad'] / t['value_and_grad']:.2f}x faster")
        print(line)
        print(f"[{part}] d/dt of sum(render * W), 32^2, {'box' if part == 'mesh' else part} moved along x: ours {m['ours']:.3f} +- {m['ours_se']:.3f}, "
              f"finite differences {m['fd']:.3f} +- {m['fd_se']:.3f}"
              + (f", Mitsuba direct_projective {m['mitsuba_grad']:.3f} +- {m['mitsuba_grad_se']:.3f}"
                 if "mitsuba_grad" in m else f"; Mitsuba: {m['mitsuba']}"), flush=True)
        report[part] = m
    if "clutter" in args.parts.split(","):
        c = clutter_part(args.res, args.spp, args.repeats, args.seeds)
        f, a = c["favoured"], c["all moving"]
        print(f"[clutter] {args.res}^2, {args.spp} spp, the sphere beside a static 4096-triangle mesh, d/dt of "
              f"sum(render * W): favouring what moves {f['mean']:.3f} +- {f['se']:.3f} in "
              f"{f['value_and_grad_s'] * 1e3:.0f} ms; all geometry as moving {a['mean']:.3f} +- {a['se']:.3f} in "
              f"{a['value_and_grad_s'] * 1e3:.0f} ms: {a['var'] / f['var']:.1f}x less variance, "
              f"{(a['var'] * a['value_and_grad_s']) / (f['var'] * f['value_and_grad_s']):.1f}x as efficient",
              flush=True)
        report["clutter"] = c
    if "camera" in args.parts.split(","):
        for rfilter in args.filters.split(","):
            scene = scene_for(args.res, rfilter)
            t = timing(scene, args.spp, args.repeats)
            print(f"[camera, {rfilter}] {args.res}^2, {args.spp} spp: primal {t['primal_s'] * 1e3:.0f} ms, "
                  f"value_and_grad {t['value_and_grad_s'] * 1e3:.0f} ms: ratio {t['ratio']:.2f} (target <= 5); "
                  f"first calls {t['first_primal_s']:.1f} s / {t['first_grad_s']:.1f} s", flush=True)
            a = accuracy(scene_for(32, rfilter), 16, args.seeds)
            print(f"[camera, {rfilter}] d/dx of sum(render * W), 32^2: ours {a['ours']:.3f} +- {a['ours_se']:.3f}; "
                  f"finite differences {a['fd_0.02']:.3f} +- {a['fd_0.02_se']:.3f} (step 0.02, z {a['z_0.02']:.2f}), "
                  f"{a['fd_0.01']:.3f} +- {a['fd_0.01_se']:.3f} (step 0.01, z {a['z_0.01']:.2f})", flush=True)
            report[rfilter] = {"time": t, "accuracy": a}
        report["mitsuba_camera"] = mitsuba_attempt(args.res, args.spp)
        print("[camera] Mitsuba 3:", report["mitsuba_camera"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
