"""Primal rendering: jaxrender vs Mitsuba 3 (llvm_ad_rgb) on the same scenes, in one run, at equal error.

    apt-get install -y libllvm19     # Mitsuba's LLVM backend needs LLVM >= 19
    python benchmarks/bench_primal.py [--size 128] [--spp 64] [--seeds 8]
        [--filters box,tent,gaussian] [--scenes cornell,mesh,envmap[,polarizers]] [--variant rgb]
        [--json out.json]

Scenes: the Cornell box (max_depth 8), the Cornell box with a large
tessellated mesh (a sphere of ~--mesh-tris triangles written to a PLY file,
smooth-shaded with the vertex normals both renderers compute for it), and
that mesh on a floor lit by an environment map (a procedural sky with a sun
written to an EXR file), max_depth 8; each with the film's reconstruction
filter set to each of --filters (gaussian is Mitsuba's default).

For every scene and filter, each renderer renders the scene --seeds times
(seeds 0, 1, ...) at the same spp, the two taking turns seed by seed after
one warm-up render each, so that a change in the machine's load affects
both alike. Reported per row: the median render time of each, the
per-pixel variance over seeds averaged over pixels and channels of each,
and the ratios Mitsuba / jaxrender of time, of variance, and of time x
variance: the efficiency ratio, above 1 when jaxrender reaches a given
noise level sooner (target >= 1.5 with the gaussian filter). Before the
table, each row's throughput and a check that the two renderers' mean
images agree within noise (per-channel means over seeds, as a z-score).
--first-frame also times jaxrender's cold-compile first frame (empty kernel
cache) and warm first frame (kernels from the disk cache, new process).
--variant mono, spectral, mono_polarized or spectral_polarized renders both
in that colour variant (Mitsuba's llvm_ad_<variant>). The polarizers scene
(glass and gold boxes behind a linear polarizer and, on the right, a
quarter-wave plate) polarizes light in the polarized variants; elsewhere
the sheets are a half filter and a clear one.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from efficiency import (FILTERS, Comparison, alternate, import_mitsuba, mean_difference_z, median, note_load,
                        parse_filters, seed_variance, set_filter, table, variance_ratio_interval)


def sphere_ply(path: Path, n_tris: int, center=(0.0, -0.5, 0.0), radius=0.4) -> None:
    """A UV sphere with about n_tris triangles, written as binary PLY, its
    faces wound counter-clockwise seen from outside (normals outward: the
    front side, which one-sided BSDFs shade, faces the camera)."""
    rings = max(4, int(np.sqrt(n_tris / 2)))
    segs = max(8, n_tris // (2 * rings))
    th = np.linspace(0, np.pi, rings + 1)
    ph = np.linspace(0, 2 * np.pi, segs, endpoint=False)
    T, P = np.meshgrid(th, ph, indexing="ij")
    v = np.stack([np.sin(T) * np.cos(P), np.cos(T), np.sin(T) * np.sin(P)], -1).reshape(-1, 3)
    v = (v * radius + np.array(center)).astype(np.float32)
    i, j = np.meshgrid(np.arange(rings), np.arange(segs), indexing="ij")
    a = i * segs + j
    b = i * segs + (j + 1) % segs
    c = (i + 1) * segs + j
    d = (i + 1) * segs + (j + 1) % segs
    f = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([b, d, c], -1).reshape(-1, 3)])
    with open(path, "wb") as fh:
        fh.write((f"ply\nformat binary_little_endian 1.0\nelement vertex {len(v)}\n"
                  "property float x\nproperty float y\nproperty float z\n"
                  f"element face {len(f)}\nproperty list uchar int vertex_indices\nend_header\n").encode())
        fv = np.zeros(len(f), dtype=[("n", "u1"), ("i", "<i4", 3)])
        fv["n"] = 3
        fv["i"] = f
        fh.write(v.astype("<f4").tobytes())
        fh.write(fv.tobytes())


def sky_image(width: int = 256, height: int = 128) -> np.ndarray:
    """A lat-long sky (Mitsuba's envmap layout: +y up, row 0 the zenith): a
    blue-to-white gradient over a dim ground, tinted with azimuth, and a
    small bright sun, as float32 RGB (height, width, 3)."""
    v = (np.arange(height) + 0.5) / height
    u = (np.arange(width) + 0.5) / width
    up = np.clip(1.0 - 2.0 * v, 0.0, 1.0)[:, None, None]
    sky = np.array([0.9, 0.95, 1.0]) * (1.0 - up) + np.array([0.25, 0.45, 0.9]) * up
    sky = np.broadcast_to(sky, (height, width, 3)).copy()
    sky[v > 0.5] = [0.12, 0.1, 0.08]
    sky *= (1.0 + 0.3 * np.cos(2 * np.pi * u))[None, :, None]
    dv, du = (v[:, None] - 0.22) * height, (u[None, :] - 0.3) * width
    sky[du * du + dv * dv < 9.0] = [60.0, 50.0, 40.0]
    return np.ascontiguousarray(sky, np.float32)


def sky_exr(path: Path, width: int = 256, height: int = 128) -> None:
    """:func:`sky_image` written as float RGB OpenEXR."""
    import OpenEXR
    OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                 {"RGB": sky_image(width, height)}).write(str(path))


def scenes(size: int, spp: int, mesh_path: Path | None, base_factory, env_path: Path | None = None):
    def base():
        d = base_factory()
        d["sensor"]["film"]["width"] = size
        d["sensor"]["film"]["height"] = size
        d["sensor"]["sampler"]["sample_count"] = spp
        return d

    out = {"cornell box": base()}
    if mesh_path is not None:
        d = base()
        d["mesh"] = {"type": "ply", "filename": str(mesh_path), "bsdf": {"type": "ref", "id": "white"}}
        out["cornell box + mesh"] = d
    if mesh_path is not None and env_path is not None:
        d = base()
        T = type(d["sensor"]["to_world"])
        out["mesh + envmap"] = {
            "type": "scene", "integrator": d["integrator"], "sensor": d["sensor"], "white": d["white"],
            "sky": {"type": "envmap", "filename": str(env_path), "scale": 1.0,
                    "to_world": T().rotate([0.0, 1.0, 0.0], 40.0)},
            "floor": {"type": "rectangle", "to_world": T().translate([0.0, -0.9, 0.0]).rotate([1.0, 0.0, 0.0], -90.0)
                      .scale(3.0), "bsdf": {"type": "ref", "id": "white"}},
            "mesh": {"type": "ply", "filename": str(mesh_path),
                     "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2}},
        }
    d = base()
    T = type(d["sensor"]["to_world"])
    d["large-box"]["bsdf"] = {"type": "conductor", "material": "Au"}
    d["small-box"]["bsdf"] = {"type": "dielectric", "int_ior": 1.5}
    # lifted off the floor: two coplanar faces are a tie each renderer breaks its own way
    d["small-box"]["to_world"] = T().translate([0.335, -0.68, 0.38]).rotate([0, 1, 0], -17).scale(0.3)
    d["sheet"] = {"type": "rectangle", "to_world": T().translate([0.0, 0.0, 2.6]).scale([2.0, 2.0, 1.0]),
                  "bsdf": {"type": "polarizer", "theta": 30.0}}
    d["plate"] = {"type": "rectangle", "to_world": T().translate([1.0, 0.0, 2.7]).scale([1.0, 2.0, 1.0]),
                  "bsdf": {"type": "retarder", "theta": 45.0}}
    out["cornell box + polarizers"] = d
    return out


WARM_PROBE = """
import time, sys
t0 = time.perf_counter()
import jaxrender
from jaxrender.lowering import stats
scene = jaxrender.load_dict(jaxrender.cornell_box())
jaxrender.render(scene, spp=1).block_until_ready()
print(time.perf_counter() - t0, stats["compiled"], stats["disk_hits"])
"""


def first_frame(cache_dir: str) -> tuple[float, int, int]:
    env = dict(os.environ, JAXRENDER_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", WARM_PROBE], env=env, capture_output=True, text=True, check=True)
    t, compiled, hits = out.stdout.split()
    return float(t), int(compiled), int(hits)



SCENES = {"cornell": "cornell box", "mesh": "cornell box + mesh", "envmap": "mesh + envmap",
          "polarizers": "cornell box + polarizers"}


def compare(name: str, ours_dict: dict, mitsuba_dict: dict | None, rfilter: str, args, jaxrender, mi,
            variant: str = "rgb") -> dict:
    """Render one scene with one filter --seeds times with each renderer,
    alternating, and return the measurements (row and checks)."""
    t0 = time.perf_counter()
    scene = jaxrender.load_dict(set_filter(ours_dict, rfilter), variant=variant)
    load = time.perf_counter() - t0
    runners = {"ours": lambda seed: np.asarray(jaxrender.render(scene, spp=args.spp, seed=seed))}
    if mi is not None:
        t0 = time.perf_counter()
        ms = mi.load_dict(set_filter(mitsuba_dict, rfilter))
        load_mi = time.perf_counter() - t0
        runners["mitsuba"] = lambda seed: np.array(mi.render(ms, spp=args.spp, seed=seed))
    times, images = alternate(runners, range(args.seeds))
    out = {"scene": name, "filter": rfilter, "triangles": len(scene.triangles), "load_ours_s": load,
           "t_ours": median(times["ours"]), "t_ours_all": times["ours"], "var_ours": seed_variance(images["ours"])}
    if mi is None:
        return out
    # The two renderers must estimate the same image for their variances to
    # be comparable: per-channel image means over seeds, within noise.
    ch_ours = np.stack(images["ours"]).mean((1, 2))
    ch_mi = np.stack(images["mitsuba"]).mean((1, 2))
    row = Comparison(name, rfilter, out["t_ours"], median(times["mitsuba"]),
                     out["var_ours"], seed_variance(images["mitsuba"]))
    lo, hi = variance_ratio_interval(images["ours"], images["mitsuba"])
    out.update(row.as_dict(), load_mitsuba_s=load_mi, t_mitsuba_all=times["mitsuba"],
               variance_ratio_90=[lo, hi], efficiency_ratio_90=[row.time_ratio * lo, row.time_ratio * hi],
               mean_rel_diff=(ch_ours.mean(0) / ch_mi.mean(0) - 1).tolist(),
               mean_z=mean_difference_z(ch_ours, ch_mi).tolist())
    return out


def throughput_line(r: dict, paths: int) -> str:
    """compare()'s row as the throughput of each renderer (``paths`` camera
    paths per render) and the mean-image check."""
    line = f"jaxrender {paths / r['t_ours'] / 1e6:.2f} Mpaths/s"
    if "t_mitsuba" in r:
        z = np.abs(r["mean_z"]).max()
        line += (f", Mitsuba {paths / r['t_mitsuba'] / 1e6:.2f} Mpaths/s; image means differ by "
                 f"{np.abs(r['mean_rel_diff']).max():.2%} (|z| {z:.1f}"
                 f"{', MISMATCH: variances not comparable' if z > 4 else ''})")
    return line


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=128, help="film width and height")
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=8, help="renders per renderer, scene and filter (>= 2)")
    ap.add_argument("--filters", default=",".join(FILTERS), help="comma list of box, tent, gaussian")
    ap.add_argument("--scenes", default="cornell,mesh,envmap", help=f"comma list of {', '.join(SCENES)}")
    ap.add_argument("--mesh-tris", type=int, default=1_000_000)
    ap.add_argument("--first-frame", action="store_true",
                    help="also time jaxrender's first frame in a new process, cold and warm kernel cache")
    ap.add_argument("--variant", default="rgb",
                    choices=("rgb", "mono", "spectral", "mono_polarized", "spectral_polarized"),
                    help="colour variant of both renderers (Mitsuba's llvm_ad_<variant>)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    filters = parse_filters(args.filters)
    wanted = [s.strip() for s in args.scenes.split(",") if s.strip()]
    if not wanted or any(s not in SCENES for s in wanted):
        raise SystemExit(f"--scenes: {args.scenes!r}: choose from {', '.join(SCENES)}")
    if args.seeds < 2:
        raise SystemExit("--seeds must be at least 2")
    results: dict = {"config": vars(args), "rows": []}
    note_load()

    with tempfile.TemporaryDirectory() as tmp:
        if args.first_frame:
            cold = first_frame(tmp)
            warm = first_frame(tmp)
            results["first_frame"] = {"cold_s": cold[0], "warm_s": warm[0]}
            print(f"jaxrender first frame (new process, 1 spp): cold {cold[0]:.2f} s "
                  f"(compiled {cold[1]}), warm {warm[0]:.2f} s (compiled {warm[1]}, disk hits {warm[2]})")
        mesh = env = None
        if "mesh" in wanted or "envmap" in wanted:
            mesh = Path(tmp) / "sphere.ply"
            t0 = time.perf_counter()
            sphere_ply(mesh, args.mesh_tris)
            print(f"wrote {args.mesh_tris} triangle mesh in {time.perf_counter() - t0:.1f} s")
        if "envmap" in wanted:
            env = Path(tmp) / "sky.exr"
            sky_exr(env)

        import jaxrender
        mi = import_mitsuba(f"llvm_ad_{args.variant}")
        if isinstance(mi, str):
            print(f"{mi}: timing jaxrender alone")
            mi = None
        print(f"{args.size}x{args.size}, {args.spp} spp, {args.seeds} seeds per renderer; renderers alternate "
              f"seed by seed after one warm-up render; times are medians over the seeds\n")
        for key in wanted:
            name = SCENES[key]
            for rfilter in filters:
                ours_dict = scenes(args.size, args.spp, mesh, jaxrender.cornell_box, env)[name]
                mi_dict = scenes(args.size, args.spp, mesh, mi.cornell_box, env)[name] if mi else None
                r = compare(name, ours_dict, mi_dict, rfilter, args, jaxrender, mi, args.variant)
                results["rows"].append(r)
                print(f"{name}, {rfilter}: {r['triangles']} triangles, load + BVH {r['load_ours_s']:.2f} s; "
                      + throughput_line(r, args.size * args.size * args.spp), flush=True)

    if mi is not None:
        rows = [Comparison.of(r) for r in results["rows"]]
        print("\nvar: per-pixel variance over seeds, mean over pixels and channels. Ratios are Mitsuba over "
              "jaxrender;\nefficiency = (t_mitsuba * var_mitsuba) / (t_ours * var_ours), > 1: jaxrender reaches "
              "a given noise sooner\n")
        print(table(rows))
        print("\n90% bootstrap intervals over the seeds (the variances' noise; times are medians):")
        for r in results["rows"]:
            (vlo, vhi), (elo, ehi) = r["variance_ratio_90"], r["efficiency_ratio_90"]
            print(f"  {r['scene']:<20} {r['filter']:<8} var ratio {vlo:.2f}-{vhi:.2f}, efficiency {elo:.2f}-{ehi:.2f}")
        gauss = [r for r in rows if r.filter == "gaussian"]
        if gauss:
            print("\ntarget: efficiency >= 1.5 with the gaussian filter: " + ", ".join(
                f"{r.scene} {r.efficiency_ratio:.2f} {'ok' if r.efficiency_ratio >= 1.5 else 'MISSED'}"
                for r in gauss))
    else:
        for r in results["rows"]:
            print(f"{r['scene']:<20} {r['filter']:<8} t_ours {r['t_ours']:.4f} s  "
                  f"var_ours {r['var_ours']:.4e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
