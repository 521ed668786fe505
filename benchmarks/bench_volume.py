"""Participating media: jaxrender vs Mitsuba 3 volpath / prbvolpath at equal error; gradient memory over path length.

    apt-get install -y libllvm19     # Mitsuba's LLVM backend needs LLVM >= 19
    python benchmarks/bench_volume.py [--res 64] [--spp 16] [--seeds 8] [--max-depth 8] [--grid 16]
        [--scenes smoke,fog] [--filters gaussian] [--parts primal,grad,memory] [--json out.json]

Scenes (--scenes), both the Cornell box (``cornell_box()`` of each
renderer, its two boxes taken out, lit by its area light) holding a medium
behind a null boundary:

smoke  a null cube holding a heterogeneous medium: a --grid^3 smoke puff
   (``gridvolume`` extinction read from one ``.vol`` file by both
   renderers, trilinear), constant rgb albedo, isotropic phase;
fog    a null sphere holding a homogeneous medium (rgb sigma_t and albedo,
   hg phase, g = 0.5).

Parts (--parts, comma list; default all three):

primal  Each scene rendered --seeds times by jaxrender ``volpath`` and by
   Mitsuba ``volpath`` at the same spp and max_depth, alternating seed by
   seed (``bench_primal.compare``): median times, per-pixel variance over
   seeds, the efficiency ratio (t_mitsuba * var_mitsuba) / (t_ours *
   var_ours) (target >= 1.5) and the check that the mean images agree
   within noise.
grad    Loss ``mean((render(params, seed) - target) ** 2)`` with
   ``prbvolpath`` in both renderers, at perturbed parameters (smoke: the
   density grid ``medium.interior_medium.sigma_t.data`` x0.5 and the albedo
   x0.9; fog: sigma_t x0.8, albedo x0.9), against one target image
   (jaxrender's, unperturbed, 4x the spp): jaxrender's
   ``jax.jit(jax.value_and_grad(loss))`` and primal loss, Mitsuba's render
   + loss + ``dr.backward`` and primal loss, alternating (as
   ``bench_grad.py``): times, value_and_grad / primal, the relative
   gradient variance over seeds, the efficiency ratio (target >= 1.5) and
   both mean gradients compared (z-scores).
memory  jaxrender's gradient peak memory for paths of few and of many
   scattering events (--mem-depths, max_depth 11 and 1001: at most 10 and
   1000 events), each in a fresh process (``peak_memory.py``, as
   ``bench_grad.py --parts memory``): the camera and a point light inside
   a dense (sigma_t --dense-sigma-t), nearly white (albedo 0.999) fog
   filling a large null cube, Russian roulette off, so that every path
   scatters until max_depth; the fog homogeneous (d loss / d (sigma_t,
   albedo)) and a uniform 4^3 ``gridvolume`` (d loss / d (the grid,
   albedo)), --dense-media. The mean number
   of events a path reaches is estimated by a random walk through the same
   medium (``mean_scattering_events``) and printed. Target: flat.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import grad_compare
from bench_primal import compare, throughput_line
from efficiency import Comparison, finish, import_mitsuba, note_load, parse_filters, set_filter, table
from peak_memory import (cap_address_space, describe_failure, failure, mb, measure_call, proc_status, report,
                         run_child)

SCENES = {"smoke": "smoke, cornell box", "fog": "fog, cornell box"}
PARTS = ("primal", "grad", "memory")
MEDIUM = "medium.interior_medium."
# Parameters differentiated in part "grad", and the factors they are
# perturbed by (the target image is rendered at the scene's own values).
GRAD_SCALES = {"smoke": {MEDIUM + "sigma_t.data": 0.5, MEDIUM + "albedo.value.value": 0.9},
               "fog": {MEDIUM + "sigma_t.value.value": 0.8, MEDIUM + "albedo.value.value": 0.9}}
TARGET_SPP_FACTOR = 4
TARGET_SEED = 999_983
# The smoke's density: extinction = SMOKE_SCALE * grid value (grid in [0, 1]).
SMOKE_SCALE = 8.0
# Part "memory": a cube of fog of this half size around the camera, wide
# enough that a path of 1000 events (rms distance ~ sqrt(2 * 1000) / sigma_t)
# never leaves it; albedo just below 1 keeps the image bright at any depth.
DENSE_HALF_SIZE = 20.0
DENSE_ALBEDO = 0.999
# The memory scene's fog as a homogeneous medium or as a uniform grid (a
# heterogeneous medium without null collisions: its majorant is its value),
# and the parameters differentiated in each.
DENSE_MEDIA = {"homogeneous": ("fog.sigma_t.value.value", "fog.albedo.value.value"),
               "grid": ("fog.sigma_t.data", "fog.albedo.value.value")}
DENSE_GRID = 4


def smoke_grid(n: int) -> np.ndarray:
    """A smoke puff on an n^3 grid (z, y, x), largest value 1: a noisy
    Gaussian blob off the centre."""
    z, y, x = np.meshgrid(*(np.linspace(0, 1, n),) * 3, indexing="ij")
    blob = np.exp(-((x - 0.45) ** 2 + (y - 0.4) ** 2 + (z - 0.5) ** 2) / 0.06)
    puff = blob * (0.6 + 0.4 * np.random.default_rng(1).random((n,) * 3))
    return (puff / puff.max()).astype(np.float32)


def rgb(*v) -> dict:
    return {"type": "rgb", "value": list(v)}


def medium_scene(factory, kind: str, res: int, spp: int, max_depth: int, integrator: str, vol_file: str,
                 max_value: float | None = None) -> dict:
    """One renderer's scene dict (``factory``: its ``cornell_box``, whose
    transform type the medium's shape and grid use): the Cornell box
    without its boxes, holding the medium ``kind`` (smoke or fog).
    ``max_value``: the smoke grid's ``max_value`` (the majorant over the
    scale; default the grid's largest value)."""
    d = factory()
    T = type(d["sensor"]["to_world"])
    del d["small-box"], d["large-box"]
    d["sensor"]["film"].update(width=res, height=res)
    d["sensor"]["sampler"]["sample_count"] = spp
    d["integrator"] = {"type": integrator, "max_depth": max_depth}
    if kind == "smoke":
        cube = T().translate([0.0, -0.35, 0.0]).scale(0.6)
        d["medium"] = {"type": "cube", "to_world": cube, "bsdf": {"type": "null"},
                       "interior": {"type": "heterogeneous", "scale": SMOKE_SCALE, "albedo": rgb(0.9, 0.8, 0.7),
                                    "sigma_t": {"type": "gridvolume", "filename": vol_file,
                                                # the grid's unit cube onto the cube [-1, 1]^3
                                                "to_world": cube.translate([-1.0, -1.0, -1.0]).scale(2.0)}}}
        if max_value is not None:
            d["medium"]["interior"]["sigma_t"]["max_value"] = max_value
    else:
        d["medium"] = {"type": "sphere", "center": [0.0, -0.35, 0.0], "radius": 0.6, "bsdf": {"type": "null"},
                       "interior": {"type": "homogeneous", "sigma_t": rgb(0.5, 0.75, 1.0), "scale": 3.0,
                                    "albedo": rgb(0.9, 0.8, 0.7), "phase": {"type": "hg", "g": 0.5}}}
    return d


def args_scene(args, factory, kind: str, integrator: str, vol_file: str) -> dict:
    """medium_scene at the command line's size, spp, max_depth and max_value."""
    return medium_scene(factory, kind, args.res, args.spp, args.max_depth, integrator, vol_file, args.max_value)


def dense_scene(res: int, spp: int, max_depth: int, sigma_t: float, medium: str = "homogeneous") -> dict:
    """Part "memory"'s scene (jaxrender's): camera and point light inside a
    dense fog that fills a large null cube, ``medium`` one of DENSE_MEDIA;
    no roulette (rr_depth = max_depth), so every path scatters until
    max_depth or until it leaves the cube."""
    from jaxrender.scene.transform import Transform as T
    fog = {"type": "ref", "id": "fog"}
    albedo = rgb(*(DENSE_ALBEDO,) * 3)
    if medium == "grid":
        density = {"type": "gridvolume", "data": np.ones((DENSE_GRID,) * 3, np.float32),
                   "to_world": T().scale(DENSE_HALF_SIZE).translate([-1.0, -1.0, -1.0]).scale(2.0)}
        spec = {"type": "heterogeneous", "sigma_t": density, "scale": sigma_t, "albedo": albedo}
    else:
        spec = {"type": "homogeneous", "sigma_t": sigma_t, "albedo": albedo}
    return {"type": "scene",
            "integrator": {"type": "prbvolpath", "max_depth": max_depth, "rr_depth": max_depth},
            "fog": spec,
            "sensor": {"type": "perspective", "fov": 45.0, "medium": fog,
                       "to_world": T().look_at(origin=[0, 0, 0], target=[0, 0, -1], up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": res, "height": res, "rfilter": {"type": "box"}},
                       "sampler": {"type": "independent", "sample_count": spp}},
            "lamp": {"type": "point", "position": [0.0, 0.0, -0.3], "intensity": rgb(50.0, 50.0, 50.0)},
            "box": {"type": "cube", "to_world": T().scale(DENSE_HALF_SIZE), "bsdf": {"type": "null"},
                    "interior": fog}}


def mean_scattering_events(sigma_t: float, half_size: float, max_events: int, n_paths: int = 4096,
                           direction=(0.0, 0.0, -1.0), seed: int = 0) -> float:
    """The mean number of real scattering events of paths that start at
    the centre of a cube [-half_size, half_size]^3 filled with a homogeneous
    medium of extinction ``sigma_t`` (isotropic phase function), going
    along ``direction``: free flights of exponential length, a scattering
    at each collision inside the cube, until the path leaves the cube or
    has scattered ``max_events`` times (volpath without roulette, whose
    max_depth allows max_depth - 1 events). A random walk, independent of
    the renderer."""
    rng = np.random.default_rng(seed)
    pos = np.zeros((n_paths, 3))
    d = np.broadcast_to(np.asarray(direction, np.float64) / np.linalg.norm(direction), (n_paths, 3)).copy()
    events = np.zeros(n_paths, np.int64)
    alive = np.full(n_paths, sigma_t > 0)
    for _ in range(max_events):
        if not alive.any():
            break
        pos[alive] += d[alive] * rng.exponential(1.0 / sigma_t if sigma_t > 0 else 1.0, alive.sum())[:, None]
        alive &= np.all(np.abs(pos) <= half_size, axis=1)
        events += alive
        # isotropic: a uniform direction on the sphere
        cos_t = rng.uniform(-1.0, 1.0, n_paths)
        phi = rng.uniform(0.0, 2 * np.pi, n_paths)
        sin_t = np.sqrt(1.0 - cos_t * cos_t)
        d = np.stack([sin_t * np.cos(phi), sin_t * np.sin(phi), cos_t], 1)
    return float(events.mean())


# ---------------------------------------------------------------- parts
def bench_primal_part(args, kinds, filters, vol_file, jaxrender, mi) -> list[dict]:
    rows = []
    for kind in kinds:
        for rfilter in filters:
            ours = args_scene(args, jaxrender.cornell_box, kind, "volpath", vol_file)
            theirs = args_scene(args, mi.cornell_box, kind, "volpath", vol_file) if mi else None
            r = compare(SCENES[kind], ours, theirs, rfilter, args, jaxrender, mi)
            rows.append(r)
            print(f"   {SCENES[kind]}, {rfilter}: " + throughput_line(r, args.res * args.res * args.spp), flush=True)
    if mi is not None:
        print("\n   var: per-pixel variance over seeds, mean over pixels and channels; ratios Mitsuba over jaxrender;\n"
              "   efficiency = (t_mitsuba * var_mitsuba) / (t_ours * var_ours), > 1: jaxrender reaches a given noise "
              "sooner (target >= 1.5)\n")
        print("   " + table([Comparison.of(r) for r in rows]).replace("\n", "\n   "))
    return rows


def bench_grad_part(args, kinds, filters, vol_file, jaxrender, mi) -> list[dict]:
    rows = []
    for kind in kinds:
        scales = GRAD_SCALES[kind]
        for rfilter in filters:
            d = set_filter(args_scene(args, jaxrender.cornell_box, kind, "prbvolpath", vol_file), rfilter)
            scene = jaxrender.load_dict(d)
            target = np.asarray(jaxrender.render(scene, spp=TARGET_SPP_FACTOR * args.spp, seed=TARGET_SEED))
            runners = grad_compare.jaxrender_runners(jaxrender, scene, scales, target, args.spp)
            if mi is not None:
                d = set_filter(args_scene(args, mi.cornell_box, kind, "prbvolpath", vol_file), rfilter)
                runners.update(grad_compare.mitsuba_runners(mi, mi.load_dict(d), scales, target, args.spp))
            times, results, own = grad_compare.run_all(runners, range(args.seeds))
            row = grad_compare.gradient_row(SCENES[kind], rfilter, times, results, own)
            rows.append(row)
            print(f"   {SCENES[kind]}, {rfilter}: {grad_compare.timing_line(row)}", flush=True)
            if mi is not None:
                grad_compare.print_means(row, {k: int(np.size(scene.params[k])) for k in scales})
    if mi is not None:
        grad_compare.print_table(rows)
    return rows


def memory_child(args) -> None:
    """One memory configuration in this fresh process; prints one JSON line."""
    cap_address_space(args.mem_cap_gb)
    out = {"medium": args.dense_medium, "max_depth": args.max_depth, "spp": args.mem_spp}
    try:
        import jax
        import jax.numpy as jnp

        import jaxrender
        keys = DENSE_MEDIA[args.dense_medium]
        scene = jaxrender.load_dict(dense_scene(args.mem_res, args.mem_spp, args.max_depth, args.dense_sigma_t,
                                                args.dense_medium))
        params = {k: jnp.asarray(scene.params[k], jnp.float32) for k in keys}
        jax.block_until_ready(params)
        out["baseline_mb"] = mb(proc_status("VmHWM"))

        def loss(p):
            return jnp.mean(jaxrender.render(scene, p, spp=args.mem_spp, seed=0) ** 2)
        t0 = time.perf_counter()
        vg = jax.jit(jax.value_and_grad(loss))
        jax.block_until_ready(vg(params))     # builds the kernels
        out["compile_s"] = time.perf_counter() - t0
        (value, grads), measured = measure_call(lambda: jax.block_until_ready(vg(params)))
        out.update(measured, loss=float(value), grads={k: np.asarray(grads[k]).tolist() for k in keys}, ok=True)
    except Exception as exc:
        out.update(failure(exc))
    report(out)


def bench_memory_part(args) -> list[dict]:
    depths = [int(x) for x in args.mem_depths.split(",")]
    print(f"   {'medium':<11} {'max_depth':>9} {'events':>7} {'baseline':>9} {'peak':>8} {'peak-base':>9} {'call':>7} "
          f"{'wall s':>7} {'loss':>10}")
    rows = []
    for medium, depth in ((m, d) for m in args.dense_media.split(",") if m for d in depths):
        events = mean_scattering_events(args.dense_sigma_t, DENSE_HALF_SIZE, depth - 1, n_paths=2048)
        cmd = [sys.executable, os.path.abspath(__file__), "--_child", "--max-depth", str(depth),
               "--mem-res", str(args.mem_res), "--mem-spp", str(args.mem_spp), "--mem-cap-gb", str(args.mem_cap_gb),
               "--dense-sigma-t", str(args.dense_sigma_t), "--dense-medium", medium]
        r = run_child(cmd, args.child_timeout, {"medium": medium, "max_depth": depth, "spp": args.mem_spp,
                                                 "mean_events": events})
        rows.append(r)
        if r.get("ok"):
            print(f"   {medium:<11} {depth:>9} {events:7.1f} {r['baseline_mb']:9.0f} {r['peak_mb']:8.0f} "
                  f"{r['peak_mb'] - r['baseline_mb']:9.0f} {r['call_mb']:7.1f} {r['time_s']:7.2f} {r['loss']:10.3e}",
                  flush=True)
        else:
            print(f"   {medium:<11} {depth:>9} {events:7.1f}  {describe_failure(r, args.mem_cap_gb)}", flush=True)
    ok = [r for r in rows if r.get("ok")]
    if len(ok) > 1:
        deltas = [r["peak_mb"] - r["baseline_mb"] for r in ok]
        calls = [r["call_mb"] for r in ok]
        print(f"   peak-base {min(deltas):.0f} .. {max(deltas):.0f} MiB, call {min(calls):.1f} .. {max(calls):.1f} MiB "
              f"(target: flat)")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=64, help="film width and height")
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--seeds", type=int, default=8, help="renders / gradients per renderer and scene (>= 2)")
    ap.add_argument("--max-depth", type=int, default=8)
    ap.add_argument("--grid", type=int, default=16, help="the smoke grid's resolution per axis")
    ap.add_argument("--max-value", type=float, help="the smoke grid's max_value: its majorant is scale x this "
                    "(default: the grid's largest value, 1); larger values add null collisions, not signal")
    ap.add_argument("--scenes", default=",".join(SCENES), help=f"comma list of {', '.join(SCENES)}")
    ap.add_argument("--filters", default="gaussian", help="comma list of box, tent, gaussian (Mitsuba's default)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    ap.add_argument("--mem-depths", default="11,1001", help="max_depth of each memory run (events: max_depth - 1)")
    ap.add_argument("--mem-res", type=int, default=32)
    ap.add_argument("--mem-spp", type=int, default=4)
    ap.add_argument("--dense-sigma-t", type=float, default=10.0, help="the memory scene's extinction")
    ap.add_argument("--dense-media", default=",".join(DENSE_MEDIA),
                    help="the memory scene's fog: comma list of homogeneous, grid (a uniform gridvolume)")
    ap.add_argument("--dense-medium", choices=list(DENSE_MEDIA), default="homogeneous", help=argparse.SUPPRESS)
    ap.add_argument("--mem-cap-gb", type=float, default=12.0, help="address-space cap of each child (0: none)")
    ap.add_argument("--child-timeout", type=float, default=300.0)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        return memory_child(args)
    parts = [p for p in args.parts.split(",") if p]
    kinds = [s for s in args.scenes.split(",") if s]
    if not parts or set(parts) - set(PARTS):
        raise SystemExit(f"--parts: {args.parts!r}: choose from {', '.join(PARTS)}")
    if not kinds or set(kinds) - set(SCENES):
        raise SystemExit(f"--scenes: {args.scenes!r}: choose from {', '.join(SCENES)}")
    if args.seeds < 2:
        raise SystemExit("--seeds must be at least 2")
    if set(filter(None, args.dense_media.split(","))) - set(DENSE_MEDIA):
        raise SystemExit(f"--dense-media: {args.dense_media!r}: choose from {', '.join(DENSE_MEDIA)}")
    filters = parse_filters(args.filters)
    results: dict = {"config": {k: v for k, v in vars(args).items() if not k.startswith("_")}}
    t_start = note_load()

    with tempfile.TemporaryDirectory() as tmp:
        vol_file = str(Path(tmp) / "smoke.vol")
        from jaxrender.scene.volumes import write_vol
        write_vol(vol_file, smoke_grid(args.grid))
        if "primal" in parts or "grad" in parts:
            import jaxrender
            mi = import_mitsuba("llvm_ad_rgb")
            if isinstance(mi, str):
                print(f"{mi}: timing jaxrender alone")
                mi = None
            print(f"{args.res}x{args.res}, {args.spp} spp, max_depth {args.max_depth}, {args.seeds} seeds per "
                  f"renderer, alternating seed by seed after one warm-up call each; times are medians\n")
        if "primal" in parts:
            print("1. primal: jaxrender volpath vs Mitsuba 3 volpath at equal error")
            results["primal"] = bench_primal_part(args, kinds, filters, vol_file, jaxrender, mi)
            print()
        if "grad" in parts:
            print("2. value_and_grad: jaxrender prbvolpath vs Mitsuba 3 prbvolpath at equal error")
            results["grad"] = bench_grad_part(args, kinds, filters, vol_file, jaxrender, mi)
            print()
    if "memory" in parts:
        print(f"3. jaxrender gradient memory over path length ({args.mem_res}x{args.mem_res}, {args.mem_spp} spp, "
              f"fog sigma_t {args.dense_sigma_t:g}, albedo {DENSE_ALBEDO}, no roulette; events: the mean scattering\n"
              f"   events per path of a random walk in that medium; fresh process each, RSS in MiB)")
        results["memory"] = bench_memory_part(args)
        print()
    finish(results, t_start, args.json)


if __name__ == "__main__":
    main()
