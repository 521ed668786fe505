"""Primal rendering: jaxrender vs Mitsuba 3 (llvm_ad_rgb) on the same scenes, in one run.

    apt-get install -y libllvm19     # Mitsuba's LLVM backend needs LLVM >= 19
    python benchmarks/bench_primal.py [--size 256] [--spp 64] [--reps 3]

Scenes: the Cornell box (max_depth 8), the Cornell box with a large
tessellated mesh (a sphere of ~--mesh-tris triangles written to a PLY file,
smooth-shaded with the vertex normals both renderers compute for it), and
that mesh on a floor lit by an environment map (a procedural sky with a sun
written to an EXR file), max_depth 8.
The renderers alternate, --reps renders each (the fastest counts), so that
a change in the machine's load affects both alike. Prints the time of each
renderer, the ratio (Mitsuba time / jaxrender time;
>= 1 means jaxrender is at least as fast), paths per second, jaxrender's
cold-compile first frame (empty kernel cache) and warm first frame (kernel
from the disk cache, new process), and checks that the two images agree
within noise before reporting.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LIBLLVM = "/usr/lib/x86_64-linux-gnu/libLLVM-19.so"


def sphere_ply(path: Path, n_tris: int, center=(0.0, -0.5, 0.0), radius=0.4) -> None:
    """A UV sphere with about n_tris triangles, written as binary PLY."""
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
    f = np.concatenate([np.stack([a, c, b], -1).reshape(-1, 3), np.stack([b, c, d], -1).reshape(-1, 3)])
    with open(path, "wb") as fh:
        fh.write((f"ply\nformat binary_little_endian 1.0\nelement vertex {len(v)}\n"
                  "property float x\nproperty float y\nproperty float z\n"
                  f"element face {len(f)}\nproperty list uchar int vertex_indices\nend_header\n").encode())
        fv = np.zeros(len(f), dtype=[("n", "u1"), ("i", "<i4", 3)])
        fv["n"] = 3
        fv["i"] = f
        fh.write(v.astype("<f4").tobytes())
        fh.write(fv.tobytes())


def sky_exr(path: Path, width: int = 256, height: int = 128) -> None:
    """A lat-long sky (Mitsuba's envmap layout: +y up, row 0 the zenith): a
    blue-to-white gradient over a dim ground, tinted with azimuth, and a
    small bright sun, as float RGB OpenEXR."""
    import OpenEXR
    v = (np.arange(height) + 0.5) / height
    u = (np.arange(width) + 0.5) / width
    up = np.clip(1.0 - 2.0 * v, 0.0, 1.0)[:, None, None]
    sky = np.array([0.9, 0.95, 1.0]) * (1.0 - up) + np.array([0.25, 0.45, 0.9]) * up
    sky = np.broadcast_to(sky, (height, width, 3)).copy()
    sky[v > 0.5] = [0.12, 0.1, 0.08]
    sky *= (1.0 + 0.3 * np.cos(2 * np.pi * u))[None, :, None]
    dv, du = (v[:, None] - 0.22) * height, (u[None, :] - 0.3) * width
    sky[du * du + dv * dv < 9.0] = [60.0, 50.0, 40.0]
    OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                 {"RGB": np.ascontiguousarray(sky, np.float32)}).write(str(path))


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
    return out


def best_of(reps: int, run):
    """(fastest time of run(rep) over reps, the last result)."""
    best, out = float("inf"), None
    for r in range(reps):
        t0 = time.perf_counter()
        out = run(r)
        best = min(best, time.perf_counter() - t0)
    return best, out


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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mesh-tris", type=int, default=1_000_000)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        cold = first_frame(tmp)
        warm = first_frame(tmp)
        print(f"jaxrender first frame (new process, 1 spp): cold {cold[0]:.2f} s "
              f"(compiled {cold[1]}), warm {warm[0]:.2f} s (compiled {warm[1]}, disk hits {warm[2]})")
        mesh = Path(tmp) / "sphere.ply"
        t0 = time.perf_counter()
        sphere_ply(mesh, args.mesh_tris)
        print(f"wrote {args.mesh_tris} triangle mesh in {time.perf_counter() - t0:.1f} s")
        env = Path(tmp) / "sky.exr"
        sky_exr(env)

        import jaxrender
        have_mitsuba = os.path.exists(LIBLLVM)
        if have_mitsuba:
            os.environ.setdefault("DRJIT_LIBLLVM_PATH", LIBLLVM)
            import mitsuba as mi
            mi.set_variant("llvm_ad_rgb")
        else:
            print(f"Mitsuba llvm_ad_rgb needs {LIBLLVM}: apt-get install -y libllvm19; comparing nothing")
        ours_defs = scenes(args.size, args.spp, mesh, jaxrender.cornell_box, env)
        for name, d in ours_defs.items():
            t0 = time.perf_counter()
            scene = jaxrender.load_dict(d)
            load = time.perf_counter() - t0
            jaxrender.render(scene, spp=1).block_until_ready()
            paths = args.size * args.size * args.spp
            print(f"\n{name}: {args.size}x{args.size}, {args.spp} spp, {len(scene.triangles)} triangles "
                  f"(load + BVH {load:.2f} s)")
            ours = lambda r: np.asarray(jaxrender.render(scene, spp=args.spp, seed=r))
            if not have_mitsuba:
                t_ours, img = best_of(args.reps, ours)
                print(f"  jaxrender       {t_ours:8.3f} s  {paths / t_ours / 1e6:7.2f} Mpaths/s")
                continue
            md = scenes(args.size, args.spp, mesh, mi.cornell_box, env)[name]
            ms = mi.load_dict(md)
            mi.render(ms, spp=1)
            # Alternate the two renderers so that a change in the machine's
            # load during the run affects both alike.
            t_ours = t_mi = float("inf")
            for r in range(args.reps):
                t, img = best_of(1, lambda _: ours(r))
                t_ours = min(t_ours, t)
                t, ref = best_of(1, lambda _: np.array(mi.render(ms, spp=args.spp, seed=r)))
                t_mi = min(t_mi, t)
            print(f"  jaxrender       {t_ours:8.3f} s  {paths / t_ours / 1e6:7.2f} Mpaths/s")
            rel = np.abs(img.mean((0, 1)) / ref.mean((0, 1)) - 1).max()
            print(f"  mitsuba llvm    {t_mi:8.3f} s  {paths / t_mi / 1e6:7.2f} Mpaths/s")
            print(f"  ratio mitsuba / jaxrender = {t_mi / t_ours:.2f}x (target >= 1.0); "
                  f"image means differ by {rel:.2%}")


if __name__ == "__main__":
    main()
