"""Ambient occlusion of a few hundred spheres, as one jaxrender megakernel.

Run it::

    python examples/ambient_occlusion.py -o ao.png --size 512 --samples 64

The specification (camera, RNG, intersection rules) is the one in
``benchmarks/ao_scene.py``, which holds the plain-JAX and numpy versions
of the same computation; ``benchmarks/bench_engine.py`` compares them. It is written against
the kernel IR: per pixel a loop over spheres for the primary hit, then K
occlusion rays, each a loop over spheres that stops at the first occluder.
Everything that varies (spheres, camera, image size, K, seed) is a runtime
buffer, so one compiled kernel serves all of them.
"""
from __future__ import annotations

import jax
import numpy as np

from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.primitives import launch

T_EPS = 1e-4
MAX_DIST = 2.0
ORIGIN_OFFSET = 1e-3
TWO_PI = float(np.float32(2.0 * np.pi))


def _sphere_t(o: Vec, d: Vec, c: Vec, r2):
    """(ray meets the sphere, distance by the spec's t0/t1 rule)."""
    oc = o - c
    b = oc.x * d.x + oc.y * d.y + oc.z * d.z
    cc = (oc.x * oc.x + oc.y * oc.y + oc.z * oc.z) - r2
    disc = b * b - cc

    def distance():
        sq = ir.sqrt(ir.maximum(disc, 0.0))
        t0 = -b - sq
        t1 = -b + sq
        return ir.select(t0 > T_EPS, t0, t1)

    # Most rays miss most spheres: a real branch skips the square root when
    # no lane of the packet needs it (the result is the same either way).
    return disc > 0.0, ir.cond(disc > 0.0, distance, lambda: 0.0)


def _pcg(x):
    return ir.rng.pcg_hash(x)


def _uniform(seed_hash, pixel, dim):
    h = _pcg(_pcg(seed_hash + pixel) + dim)
    return ir.cast(h >> 8, "f32") * (1.0 / 16777216.0)


def ao_kernel(spheres, camera, width, height, samples, seed):
    p = ir.item_index()
    W = width.value
    H = height.value
    o = Vec(camera.read(0, 0), camera.read(0, 1), camera.read(0, 2))
    fwd = Vec(camera.read(0, 3), camera.read(0, 4), camera.read(0, 5))
    right = Vec(camera.read(0, 6), camera.read(0, 7), camera.read(0, 8))
    up = Vec(camera.read(0, 9), camera.read(0, 10), camera.read(0, 11))
    tan_half = camera.read(0, 12)
    aspect = ir.cast(W, "f32") / ir.cast(H, "f32")
    px = ir.cast(p % W, "f32")
    py = ir.cast(p // W, "f32")
    sx = (2.0 * (px + 0.5) / ir.cast(W, "f32") - 1.0) * tan_half * aspect
    sy = (1.0 - 2.0 * (py + 0.5) / ir.cast(H, "f32")) * tan_half
    dx = fwd.x + sx * right.x + sy * up.x
    dy = fwd.y + sx * right.y + sy * up.y
    dz = fwd.z + sx * right.z + sy * up.z
    length = ir.sqrt(dx * dx + dy * dy + dz * dz)
    d = Vec(dx / length, dy / length, dz / length)
    n_spheres = spheres.len
    inf = float("inf")

    # Primary hit: nearest sphere (lowest index wins ties).
    def prim_body(s):
        i, best_t, best_i = s
        cx, cy, cz, r = spheres[i]
        valid, t = _sphere_t(o, d, Vec(cx, cy, cz), r * r)
        closer = valid & (t > T_EPS) & (t < best_t)
        return i + 1, ir.select(closer, t, best_t), ir.select(closer, i, best_i)

    _, t_sph, idx = ir.while_loop(lambda s: s[0] < n_spheres, prim_body,
                                  (ir.UInt(0), ir.Float(inf), ir.UInt(0)))
    neg = d.y < 0.0
    t_pl = ir.select(neg, -o.y / ir.select(neg, d.y, -1.0), inf)
    t_pl = ir.select(t_pl > T_EPS, t_pl, inf)
    plane = t_pl < t_sph
    t = ir.select(plane, t_pl, t_sph)
    hit = t < inf

    def shade():
        pos = o + d * t
        cx, cy, cz, r = spheres[idx]
        sph_n = Vec((pos.x - cx) / r, (pos.y - cy) / r, (pos.z - cz) / r)
        n = ir.select(plane, Vec(0.0, 1.0, 0.0), sph_n)
        q = pos + n * ORIGIN_OFFSET
        seed_hash = _pcg(seed.value)
        sign = ir.copysign(1.0, n.z)
        a = -1.0 / (sign + n.z)
        b = n.x * n.y * a
        t1 = Vec(1.0 + sign * n.x * n.x * a, sign * b, -sign * n.x)
        t2 = Vec(b, sign + n.y * n.y * a, -n.y)

        def sample(k, occluded):
            u1 = _uniform(seed_hash, p, 2 * k)
            u2 = _uniform(seed_hash, p, 2 * k + 1)
            rr = ir.sqrt(u1)
            phi = TWO_PI * u2
            lx, ly = rr * ir.cos(phi), rr * ir.sin(phi)
            lz = ir.sqrt(ir.maximum(0.0, 1.0 - u1))
            w = Vec(lx * t1.x + ly * t2.x + lz * n.x,
                    lx * t1.y + ly * t2.y + lz * n.y,
                    lx * t1.z + ly * t2.z + lz * n.z)
            wneg = w.y < 0.0
            hit_plane = wneg & (-q.y / ir.select(wneg, w.y, -1.0) < MAX_DIST)

            def occ_body(s):
                i, _ = s
                cx, cy, cz, r = spheres[i]
                valid, ts = _sphere_t(q, w, Vec(cx, cy, cz), r * r)
                return i + 1, valid & (ts > T_EPS) & (ts < MAX_DIST)

            # Early exit: stop at the first occluding sphere.
            _, hit_sphere = ir.while_loop(lambda s: (s[0] < n_spheres) & ~s[1], occ_body,
                                          (ir.UInt(0), hit_plane))
            return occluded + ir.select(hit_sphere, 1, 0)

        occluded = ir.fori_loop(ir.UInt(0), samples.value, sample, ir.Int(0))
        return 1.0 - ir.cast(occluded, "f32") / ir.cast(samples.value, "f32")

    return ir.cond(hit, shade, lambda: 0.0)


KERNEL_SPEC = dict(
    inputs={"spheres": ir.In("f32", (4,)), "camera": ir.In("f32", (13,)),
            "width": ir.Scalar("u32"), "height": ir.Scalar("u32"),
            "samples": ir.Scalar("u32"), "seed": ir.Scalar("u32")},
    outputs={"ao": ir.Out("f32")},
)


def trace_ao() -> ir.Kernel:
    return ir.trace(ao_kernel, **KERNEL_SPEC, name="ambient_occlusion")


def make_spheres(n_spheres: int = 256, seed: int = 0) -> np.ndarray:
    """``n`` spheres resting on the ground plane, rows (cx, cy, cz, r)."""
    rng = np.random.RandomState(seed)
    cx = rng.uniform(-4, 4, n_spheres)
    cz = rng.uniform(-4, 4, n_spheres)
    r = rng.uniform(0.2, 0.6, n_spheres)
    return np.stack([cx, r, cz, r], axis=1).astype(np.float32)


def camera_buffer(W: int, H: int) -> np.ndarray:
    """Camera at (0, 3, -8) looking at (0, 0.5, 0), 45 degree vertical fov."""
    f32 = np.float32
    origin = np.array([0, 3, -8], f32)
    fwd = np.array([0, 0.5, 0], f32) - origin
    fwd = fwd / np.sqrt(np.sum(fwd * fwd))
    right = np.cross(np.array([0, 1, 0], f32), fwd).astype(f32)
    right = right / np.sqrt(np.sum(right * right))
    up = np.cross(fwd, right).astype(f32)
    tan_half = f32(np.tan(np.radians(45.0) / 2.0))
    return np.concatenate([origin, fwd, right, up, [tan_half]]).astype(f32)[None, :]


def render_ao(kernel: ir.Kernel, spheres, camera, W: int, H: int, K: int, seed) -> jax.Array:
    out = launch(kernel, (H * W,), spheres=spheres, camera=camera, width=np.uint32(W),
                 height=np.uint32(H), samples=np.uint32(K), seed=seed)["ao"]
    return out.reshape(H, W)


def main(argv=None) -> None:
    import argparse
    import time

    from PIL import Image

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="ao.png")
    ap.add_argument("--size", type=int, default=256, help="image width and height")
    ap.add_argument("--samples", type=int, default=32, help="occlusion rays per pixel")
    ap.add_argument("--spheres", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    kernel = trace_ao()
    img = render_ao(kernel, make_spheres(args.spheres), camera_buffer(args.size, args.size),
                    args.size, args.size, args.samples, np.uint32(args.seed))
    img = np.asarray(img)
    dt = time.perf_counter() - t0
    Image.fromarray((np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8), mode="L").save(args.output)
    print(f"wrote {args.output} ({args.size}x{args.size}, {args.samples} rays/pixel) in {dt:.2f} s")


if __name__ == "__main__":
    main()
