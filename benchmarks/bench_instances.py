"""What sharing a shapegroup among its instances saves: a shapegroup of
one mesh of about ``--tris`` triangles instanced ``--instances`` times,
loaded with the two-level hierarchy (the default: one copy of the group,
``scene/instancing.py``) and expanded into copies
(``load_dict(..., expand_instances=True)``), against the mesh alone, with
Mitsuba's load time of the same scene for comparison.

    python benchmarks/bench_instances.py [--tris 10000] [--instances 50] [--reps 3] [--size 128] [--spp 4]

Reported per scene: jaxrender's ``load_dict`` time (mesh read, BVH builds;
the minimum over ``--reps``), the triangle rows, the bytes of the BVH
buffers (the scene's own, the groups' and the instances') and of the
per-triangle buffers (vertices, UVs, vertex normals, attributes), the
time of a ``--size``² render at ``--spp`` (path tracer, the minimum over
``--reps`` after a compiling render) and Mitsuba's (``scalar_rgb``)
``load_dict`` time.

Measured (2 shared cores, AVX2, 256x256 at 16 spp, ``--reps 3``):

* 50 instances of a 9660-triangle group: shared 0.09 s load, 0.76 MiB BVH
  + 0.96 MiB triangle buffers, render 0.52 s; expanded 2.8 s load, 38.4 +
  47.9 MiB, render 0.52 s; Mitsuba's load 0.025 s.
* 1000 instances of a 924-triangle group: shared 0.07-0.1 s load, 0.21 +
  0.09 MiB, render 1.21-1.36 s; expanded 5-6 s load, 76.2 + 91.6 MiB,
  render 0.55-0.72 s. The instance level (a skip-link BVH walked in the
  kernel language, one group query per instance reached) costs more than
  the native routine's walk of the copies: a native two-level routine
  would close that gap.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import jaxrender
from jaxrender.scene.transform import Transform as T


def write_mesh(path: Path, tris: int) -> int:
    """A bumpy sphere (UV grid) of about ``tris`` triangles as ASCII PLY
    without normals (so each loader computes them); returns its count."""
    n = max(4, int(np.sqrt(tris / 2)))
    th, ph = np.meshgrid(np.linspace(0.05, np.pi - 0.05, n), np.linspace(0, 2 * np.pi, n, endpoint=False),
                         indexing="ij")
    r = 1.0 + 0.05 * np.sin(7 * th) * np.cos(5 * ph)
    v = np.stack([r * np.sin(th) * np.cos(ph), r * np.sin(th) * np.sin(ph), r * np.cos(th)], -1).reshape(-1, 3)
    idx = np.arange(n * n).reshape(n, n)
    a, b = idx[:-1], np.roll(idx, -1, axis=1)[:-1]
    c, d = idx[1:], np.roll(idx, -1, axis=1)[1:]
    f = np.concatenate([np.stack([a, c, b], -1).reshape(-1, 3), np.stack([b, c, d], -1).reshape(-1, 3)])
    with open(path, "w") as out:
        out.write(f"ply\nformat ascii 1.0\nelement vertex {len(v)}\nproperty float x\nproperty float y\n"
                  f"property float z\nelement face {len(f)}\nproperty list uchar int vertex_indices\nend_header\n")
        np.savetxt(out, v, fmt="%.6f")
        np.savetxt(out, np.concatenate([np.full((len(f), 1), 3), f], 1), fmt="%d")
    return len(f)


def scene(mesh: Path, instances: int, size: int, spp: int) -> dict:
    """The mesh (or its instances on a grid in the z = 0 plane) under a
    constant environment, seen from above."""
    side = max(1, int(np.ceil(np.sqrt(instances))))
    centre = 1.5 * (side - 1)
    d = {"type": "scene", "light": {"type": "constant"},
         "sensor": {"type": "perspective", "fov": 50.0,
                    "to_world": T().look_at(origin=[centre, centre - 0.3 * side, 2.5 * side + 2.0],
                                            target=[centre, centre, 0.0], up=[0, 1, 0]),
                    "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}},
                    "sampler": {"type": "independent", "sample_count": spp}}}
    if instances == 0:
        d["mesh"] = {"type": "ply", "filename": str(mesh)}
        return d
    d["group"] = {"type": "shapegroup", "mesh": {"type": "ply", "filename": str(mesh)}}
    for k in range(instances):
        d[f"i{k}"] = {"type": "instance", "shapegroup": {"type": "ref", "id": "group"},
                      "to_world": T().translate([3.0 * (k % side), 3.0 * (k // side), 0.0]).rotate([0, 0, 1], 7 * k)}
    return d


def buffer_bytes(s) -> tuple[int, int]:
    """(BVH buffers, per-triangle buffers) of a loaded scene, in bytes."""
    bvh = sum(np.asarray(a).nbytes for a in (s.wide_bvh or (s.bvh_bounds, s.bvh_links)))
    bvh += sum(a.nbytes for a in (s.instancing or {}).values())
    per_tri = sum(a.nbytes for a in (s.triangles, s.tri_uv, s.tri_normals, s.tri_attr))
    return bvh, per_tri


def best_time(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(d: dict, reps: int, expand: bool, mitsuba: bool) -> dict:
    load = best_time(lambda: jaxrender.load_dict(d, expand_instances=expand), reps)
    s = jaxrender.load_dict(d, expand_instances=expand)
    bvh, per_tri = buffer_bytes(s)
    jaxrender.render(s, seed=0).block_until_ready()          # (compiles)
    render = best_time(lambda: jaxrender.render(s, seed=1).block_until_ready(), reps)
    out = dict(load_s=load, render_s=render, triangles=len(s.triangles), bvh_mb=bvh / 2 ** 20,
               tri_buffers_mb=per_tri / 2 ** 20)
    if mitsuba:
        try:
            import mitsuba as mi
            mi.set_variant("scalar_rgb")
            mi.set_log_level(mi.LogLevel.Error)      # (its ASCII PLY performance warning)
            out["mitsuba_load_s"] = best_time(lambda: mi.load_dict(_mi(mi, d)), reps)
        except ImportError:
            pass
    return out


def _mi(mi, x):
    if isinstance(x, T):
        return mi.ScalarTransform4f(x.matrix.tolist())
    if isinstance(x, dict):
        return {k: _mi(mi, v) for k, v in x.items()}
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tris", type=int, default=10000)
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--spp", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mesh = Path(tmp) / "mesh.ply"
        n = write_mesh(mesh, args.tris)
        print(f"mesh: {n} triangles; renders {args.size}x{args.size} at {args.spp} spp")
        many = args.instances
        runs = [("mesh alone", 0, False), ("1 instance", 1, False), (f"{many} shared", many, False),
                (f"{many} expanded", many, True)]
        for label, k, expand in runs:
            r = measure(scene(mesh, k, args.size, args.spp), args.reps, expand, mitsuba=not expand)
            print(f"{label:>14}: load {r['load_s']:.3f} s, {r['triangles']} triangle rows, BVH {r['bvh_mb']:.2f} MiB, "
                  f"triangle buffers {r['tri_buffers_mb']:.2f} MiB, render {r['render_s']:.3f} s"
                  + (f"; Mitsuba load {r['mitsuba_load_s']:.3f} s" if "mitsuba_load_s" in r else ""))


if __name__ == "__main__":
    main()
