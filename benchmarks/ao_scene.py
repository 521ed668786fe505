"""Ambient-occlusion benchmark: plain-JAX and numpy baselines.

The scene is ``n_spheres`` spheres resting on an infinite ground plane
``y = 0``.  For every pixel a primary ray finds the nearest surface, and ``K``
cosine-weighted occlusion rays of length ``MAX_DIST`` are cast from it.  The
output is ``AO = 1 - occluded / K`` (0 for pixels whose primary ray misses).

All arithmetic is float32 (and uint32 with wraparound for the RNG), evaluated
in the operation order written in the helpers below, so that an independent
implementation (e.g. a compiled megakernel) following the same specification
can be compared pixel-for-pixel.  Specification details fixed here:

* Camera: origin ``(0, 3, -8)``, target ``(0, 0.5, 0)``, world up
  ``(0, 1, 0)``, vertical fov 45 degrees.  ``forward = normalize(target -
  origin)``, ``right = normalize(cross(world_up, forward))``, ``up_cam =
  cross(forward, right)``.  For ``forward = +z`` this gives ``right = +x`` and
  ``up_cam = +y`` (left-handed screen convention: looking along +z with y up,
  world +x appears on the right of the image).  For this camera, ``right =
  (1, 0, 0)`` exactly and ``up_cam`` has positive y, so world +x is image
  right and world +y is image up.  ``tan(fov / 2)`` is evaluated in float64
  and rounded once to float32; ``aspect = float32(W) / float32(H)``.
* Pixel ``(px, py)`` with ``py = 0`` the top row has linear index
  ``p = py * W + px``.  ``sx = (2 * (px + 0.5) / W - 1) * tan_half * aspect``,
  ``sy = (1 - 2 * (py + 0.5) / H) * tan_half``, ``dir = normalize(forward +
  sx * right + sy * up_cam)`` with ``normalize(v) = v / sqrt(dot(v, v))``.
* Sphere hits use ``oc = o - c``, ``b = dot(oc, d)``, ``c = dot(oc, oc) -
  r * r``, ``disc = b * b - c``; with ``disc > 0``: ``t0 = -b - sqrt(disc)``,
  ``t1 = -b + sqrt(disc)``, ``t = t0 if t0 > 1e-4 else t1``.
* Primary rays: nearest ``t > 1e-4`` over spheres and the plane
  (``t = -o.y / d.y`` when ``d.y < 0``).  On an exact tie the sphere wins
  (the plane is taken only if strictly nearer), and among spheres the lowest
  index wins.  Sphere normal is
  ``(p - c) / r`` (not renormalized); AO origin ``q = p + 1e-3 * n``.
* Occlusion rays (direction not renormalized): occluded by a sphere hit with
  ``1e-4 < t < 2`` or, when ``dir.y < 0``, by the plane with
  ``-q.y / dir.y < 2`` (no lower bound on the plane t, exactly as specified).
* RNG: PCG hash (Jarzynski & Olano 2020); ``uniform(seed, p, dim) =
  float32(hash(hash(hash(seed) + p) + dim) >> 8) * 2**-24``; sample ``k`` uses
  dims ``2k`` and ``2k + 1``.  ``phi = float32(2 * pi) * u2``.
* Frame: Duff et al. 2017 branchless ONB with ``sign = copysign(1, n.z)``.

XLA flag: with jax/jaxlib 0.10.2 on CPU the JAX result agrees with the numpy
reference *without* ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=``
(checked at 64x64 / K=16 / 256 spheres, 256x256 / K=32 and several odd sizes;
results are bit-identical with and without the flag), so the flag is not
needed for this benchmark.  Remaining JAX-vs-numpy differences are float
rounding only: a primary ray grazing a sphere silhouette can pick a different
surface (a handful of pixels per image), and ``1 - n / K`` can differ by an
ulp when ``1 / K`` is not exact.

Run ``python benchmarks/ao_scene.py`` to check JAX against numpy and time the
JAX version.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

# ---------------------------------------------------------------------------
# Constants of the specification.
# ---------------------------------------------------------------------------
F32 = np.float32
U32 = np.uint32

CAM_ORIGIN = np.array([0.0, 3.0, -8.0], dtype=F32)
CAM_TARGET = np.array([0.0, 0.5, 0.0], dtype=F32)
WORLD_UP = np.array([0.0, 1.0, 0.0], dtype=F32)
FOV_DEG = 45.0

T_EPS = F32(1e-4)  # minimum accepted hit distance
ORIGIN_OFFSET = F32(1e-3)  # AO ray origin offset along the normal
MAX_DIST = F32(2.0)  # AO ray length
TWO_PI = F32(2.0 * np.pi)
INV_2_24 = F32(2.0**-24)

# A float32 3-vector stored as separate component arrays (structure of arrays).
Vec3 = tuple[Any, Any, Any]


# ---------------------------------------------------------------------------
# Scene and camera.
# ---------------------------------------------------------------------------
def make_scene(n_spheres: int = 256, seed: int = 0) -> dict[str, np.ndarray]:
    """Random spheres resting on the ground plane ``y = 0``.

    Returns ``{"spheres": float32 array (n_spheres, 4)}`` with rows
    ``(cx, cy, cz, r)`` and ``cy = r``.
    """
    rng = np.random.RandomState(seed)
    cx = rng.uniform(-4.0, 4.0, n_spheres)
    cz = rng.uniform(-4.0, 4.0, n_spheres)
    r = rng.uniform(0.2, 0.6, n_spheres)
    spheres = np.stack([cx, r, cz, r], axis=1).astype(F32)
    return {"spheres": spheres}


def _normalize_np(v: np.ndarray) -> np.ndarray:
    """``v / sqrt(dot(v, v))`` in float32."""
    v = v.astype(F32)
    return v / np.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])


def _cross_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array(
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]],
        dtype=F32,
    )


def camera_basis() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.float32]:
    """Return ``(origin, forward, right, up_cam, tan_half)`` in float32.

    ``right = normalize(cross(world_up, forward))`` and ``up_cam =
    cross(forward, right)``, so ``+sx`` maps to world ``+x`` (image right) and
    ``+sy`` to image up for this camera.
    """
    forward = _normalize_np(CAM_TARGET - CAM_ORIGIN)
    right = _normalize_np(_cross_np(WORLD_UP, forward))
    up_cam = _cross_np(forward, right)
    tan_half = F32(np.tan(np.radians(FOV_DEG) / 2.0))
    return CAM_ORIGIN.copy(), forward, right, up_cam, tan_half


def _primary_dirs(xp: Any, p: Any, W: int, H: int) -> Vec3:
    """Primary ray directions for linear pixel indices ``p`` (uint32 array)."""
    _, fwd, right, up, tan_half = camera_basis()
    aspect = F32(W) / F32(H)
    px = (p % U32(W)).astype(xp.float32)
    py = (p // U32(W)).astype(xp.float32)
    sx = (F32(2.0) * (px + F32(0.5)) / F32(W) - F32(1.0)) * tan_half * aspect
    sy = (F32(1.0) - F32(2.0) * (py + F32(0.5)) / F32(H)) * tan_half
    dx = fwd[0] + sx * right[0] + sy * up[0]
    dy = fwd[1] + sx * right[1] + sy * up[1]
    dz = fwd[2] + sx * right[2] + sy * up[2]
    length = xp.sqrt(dx * dx + dy * dy + dz * dz)
    return dx / length, dy / length, dz / length


def camera_rays(W: int, H: int) -> tuple[np.ndarray, np.ndarray]:
    """Primary rays for a ``W x H`` image, pixel index ``p = py * W + px``.

    Returns ``(origins, dirs)``, both float32 arrays of shape ``(H * W, 3)``.
    """
    p = np.arange(H * W, dtype=U32)
    d = np.stack(_primary_dirs(np, p, W, H), axis=1).astype(F32)
    o = np.broadcast_to(CAM_ORIGIN, d.shape).astype(F32)
    return o, d


# ---------------------------------------------------------------------------
# Shared per-element math (works on numpy and jax.numpy arrays alike).
# ---------------------------------------------------------------------------
def _pcg_hash(x: Any) -> Any:
    """PCG hash of a uint32 array (Jarzynski & Olano 2020), wraparound."""
    state = x * U32(747796405) + U32(2891336453)
    word = ((state >> ((state >> U32(28)) + U32(4))) ^ state) * U32(277803737)
    return (word >> U32(22)) ^ word


def _uniform(xp: Any, seed_hash: Any, pixel: Any, dim: Any) -> Any:
    """``float32(hash(hash(hash(seed) + pixel) + dim) >> 8) * 2**-24``.

    ``seed_hash`` is ``hash(seed)`` (already computed by the caller).
    """
    h = _pcg_hash(_pcg_hash(seed_hash + pixel) + dim)
    return (h >> U32(8)).astype(xp.float32) * INV_2_24


def _sphere_t(xp: Any, o: Vec3, d: Vec3, c: Vec3, r2: Any) -> tuple[Any, Any]:
    """Ray/sphere test; returns ``(valid, t)`` with ``valid = disc > 0``.

    ``t = t0 if t0 > 1e-4 else t1``; callers apply their own range test.
    """
    ocx, ocy, ocz = o[0] - c[0], o[1] - c[1], o[2] - c[2]
    b = ocx * d[0] + ocy * d[1] + ocz * d[2]
    cc = (ocx * ocx + ocy * ocy + ocz * ocz) - r2
    disc = b * b - cc
    sq = xp.sqrt(xp.maximum(disc, F32(0.0)))
    t0 = -b - sq
    t1 = -b + sq
    return disc > F32(0.0), xp.where(t0 > T_EPS, t0, t1)


def _cosine_dir(xp: Any, n: Vec3, u1: Any, u2: Any) -> Vec3:
    """Cosine-weighted direction around unit normal ``n`` (Duff et al. ONB)."""
    rr = xp.sqrt(u1)
    phi = TWO_PI * u2
    lx = rr * xp.cos(phi)
    ly = rr * xp.sin(phi)
    lz = xp.sqrt(xp.maximum(F32(0.0), F32(1.0) - u1))
    nx, ny, nz = n
    sign = xp.copysign(F32(1.0), nz)
    a = F32(-1.0) / (sign + nz)
    b = nx * ny * a
    t1x, t1y, t1z = F32(1.0) + sign * nx * nx * a, sign * b, -sign * nx
    t2x, t2y, t2z = b, sign + ny * ny * a, -ny
    return (
        lx * t1x + ly * t2x + lz * nx,
        lx * t1y + ly * t2y + lz * ny,
        lx * t1z + ly * t2z + lz * nz,
    )


def _primary_hit(xp: Any, d: Vec3, spheres: Any) -> tuple[Any, Vec3, Vec3]:
    """Nearest primary hit for directions ``d`` (arrays of shape ``(N,)``).

    ``spheres`` is ``(S, 4)``.  Returns ``(hit, q, n)``: hit mask ``(N,)``,
    AO ray origin ``q`` and normal ``n``.  Missed pixels get ``t = 0`` and
    ``n = (0, 1, 0)`` so that downstream math stays finite.
    """
    o = tuple(F32(v) for v in CAM_ORIGIN)
    cx, cy, cz, r = spheres[:, 0], spheres[:, 1], spheres[:, 2], spheres[:, 3]
    col = lambda v: v[:, None]  # noqa: E731  (N,) -> (N, 1)
    valid, ts = _sphere_t(xp, o, (col(d[0]), col(d[1]), col(d[2])), (cx, cy, cz), r * r)
    ts = xp.where(valid & (ts > T_EPS), ts, F32(np.inf))  # (N, S)
    idx = xp.argmin(ts, axis=1)
    t_sph = xp.min(ts, axis=1)
    neg = d[1] < F32(0.0)
    t_pl = xp.where(neg, -o[1] / xp.where(neg, d[1], F32(-1.0)), F32(np.inf))
    t_pl = xp.where(t_pl > T_EPS, t_pl, F32(np.inf))
    plane = t_pl < t_sph
    t = xp.where(plane, t_pl, t_sph)
    hit = t < F32(np.inf)
    t = xp.where(hit, t, F32(0.0))
    p = (o[0] + t * d[0], o[1] + t * d[1], o[2] + t * d[2])
    hr = r[idx]
    sph_n = ((p[0] - cx[idx]) / hr, (p[1] - cy[idx]) / hr, (p[2] - cz[idx]) / hr)
    use_sph = hit & ~plane
    n = (
        xp.where(use_sph, sph_n[0], F32(0.0)),
        xp.where(use_sph, sph_n[1], F32(1.0)),
        xp.where(use_sph, sph_n[2], F32(0.0)),
    )
    q = tuple(p[i] + ORIGIN_OFFSET * n[i] for i in range(3))
    return hit, q, n


def _ao_dirs(xp: Any, seed_hash: Any, pix: Any, n: Vec3, K: int) -> Vec3:
    """AO directions of shape ``(N, K)`` for pixels ``pix`` (uint32 ``(N,)``)."""
    k = xp.arange(K, dtype=xp.uint32)[None, :]
    pcol = pix[:, None]
    u1 = _uniform(xp, seed_hash, pcol, U32(2) * k)
    u2 = _uniform(xp, seed_hash, pcol, U32(2) * k + U32(1))
    return _cosine_dir(xp, (n[0][:, None], n[1][:, None], n[2][:, None]), u1, u2)


def _plane_occluded(xp: Any, q: Vec3, d: Vec3) -> Any:
    """Ground-plane occlusion: ``d.y < 0`` and ``-q.y / d.y < MAX_DIST``."""
    neg = d[1] < F32(0.0)
    t = -q[1] / xp.where(neg, d[1], F32(-1.0))
    return neg & (t < MAX_DIST)


def _sphere_occluded(xp: Any, q: Vec3, d: Vec3, c: Vec3, r2: Any) -> Any:
    """Sphere occlusion test ``1e-4 < t < MAX_DIST`` (broadcasting)."""
    valid, t = _sphere_t(xp, q, d, c, r2)
    return valid & (t > T_EPS) & (t < MAX_DIST)


# ---------------------------------------------------------------------------
# numpy reference.
# ---------------------------------------------------------------------------
def ao_numpy(
    scene: dict[str, np.ndarray], W: int, H: int, K: int, seed: int
) -> np.ndarray:
    """Reference AO image ``(H, W)`` float32, vectorized numpy.

    Pixels are processed in chunks so that the ``(pixels, K, spheres)``
    temporaries stay around 4M elements.
    """
    spheres = np.asarray(scene["spheres"], dtype=F32)
    S = spheres.shape[0]
    c = (spheres[:, 0], spheres[:, 1], spheres[:, 2])
    r2 = spheres[:, 3] * spheres[:, 3]
    seed_hash = _pcg_hash(np.array([seed], dtype=U32))
    n_pix = W * H
    chunk = max(1, (1 << 22) // max(1, K * S))
    out = np.zeros(n_pix, dtype=F32)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        for start in range(0, n_pix, chunk):
            pix = np.arange(start, min(start + chunk, n_pix), dtype=U32)
            d = _primary_dirs(np, pix, W, H)
            hit, q, n = _primary_hit(np, d, spheres)
            dirs = _ao_dirs(np, seed_hash, pix, n, K)  # (N, K) each
            qk = (q[0][:, None], q[1][:, None], q[2][:, None])
            occ = _plane_occluded(np, qk, dirs)
            qs = tuple(v[:, None, None] for v in q)
            ds = tuple(v[:, :, None] for v in dirs)
            occ |= np.any(_sphere_occluded(np, qs, ds, c, r2), axis=-1)
            n_occ = np.count_nonzero(occ, axis=1).astype(F32)
            ao = F32(1.0) - n_occ / F32(K)
            out[start : start + pix.shape[0]] = np.where(hit, ao, F32(0.0))
    return out.reshape(H, W)


# ---------------------------------------------------------------------------
# Plain-JAX baseline.
# ---------------------------------------------------------------------------
def make_ao_jax(
    scene: dict[str, np.ndarray], W: int, H: int, K: int
) -> Callable[[Any], jax.Array]:
    """Build a jitted ``f(seed: uint32 scalar) -> (H, W) float32`` AO image.

    Pass the seed as ``np.uint32`` (jit rejects Python ints >= 2**31).
    Everything (camera rays, primary hits, RNG, AO rays) runs inside one jit.
    Pixels and samples are vectorized by broadcasting over ``(H*W, K)``
    arrays.  The primary hit broadcasts over all spheres (``(H*W, S)``).

    Occlusion uses a ``lax.fori_loop`` over spheres that ORs a ``(H*W, K)``
    boolean mask.  On a 2-core CPU at 256x256, K=32, 256 spheres this was the
    fastest of the variants measured (about 0.23 s), versus about 0.5-0.6 s for
    a single ``(H*W, K, S)`` broadcast reduced with ``any``, about 0.35-0.4 s
    for ``lax.map`` over 256/1024-pixel tiles with that broadcast, and 0.23 s to
    over 1 s for ``lax.scan`` over 32/16/8-sphere chunks.
    """
    spheres = jnp.asarray(np.asarray(scene["spheres"], dtype=F32))
    n_spheres = int(spheres.shape[0])
    n_pix = W * H

    @jax.jit
    def ao(seed: Any) -> jax.Array:
        seed_hash = _pcg_hash(jnp.asarray(seed, dtype=jnp.uint32))
        pix = jnp.arange(n_pix, dtype=jnp.uint32)
        d = _primary_dirs(jnp, pix, W, H)
        hit, q, n = _primary_hit(jnp, d, spheres)
        dirs = _ao_dirs(jnp, seed_hash, pix, n, K)  # (N, K) each
        qk = (q[0][:, None], q[1][:, None], q[2][:, None])

        def body(i: jax.Array, occ: jax.Array) -> jax.Array:
            s = spheres[i]
            return occ | _sphere_occluded(jnp, qk, dirs, (s[0], s[1], s[2]), s[3] * s[3])

        occ = lax.fori_loop(0, n_spheres, body, _plane_occluded(jnp, qk, dirs))
        n_occ = jnp.sum(occ, axis=1, dtype=jnp.int32).astype(jnp.float32)
        img = jnp.where(hit, F32(1.0) - n_occ / F32(K), F32(0.0))
        return img.reshape(H, W)

    return ao


# ---------------------------------------------------------------------------
# Self-check and timing.
# ---------------------------------------------------------------------------
def _check(W: int = 64, H: int = 64, K: int = 16, n_spheres: int = 256, seed: int = 0) -> bool:
    """Compare the JAX baseline with the numpy reference; print a summary."""
    scene = make_scene(n_spheres)
    ref = ao_numpy(scene, W, H, K, seed)
    out = np.asarray(make_ao_jax(scene, W, H, K)(np.uint32(seed)))
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    frac = float(np.mean(diff > 1.0 / K + 1e-6))
    ok = bool(diff.mean() < 1e-3)
    print(
        f"check {W}x{H} K={K} spheres={n_spheres}: max abs diff {diff.max():.6g}, "
        f"mean abs diff {diff.mean():.3g}, pixels differing by > 1/K {frac:.4%}, "
        f"mean AO {ref.mean():.4f} -> {'OK' if ok else 'FAIL'}"
    )
    return ok


def _time(W: int = 256, H: int = 256, K: int = 32, n_spheres: int = 256, reps: int = 5) -> float:
    """Time the jitted JAX baseline after warm-up; returns the best time (s)."""
    f = make_ao_jax(make_scene(n_spheres), W, H, K)
    f(np.uint32(0)).block_until_ready()
    times = []
    for i in range(reps):
        t0 = time.perf_counter()
        f(np.uint32(i + 1)).block_until_ready()
        times.append(time.perf_counter() - t0)
    print(
        f"ao_jax {W}x{H} K={K} spheres={n_spheres}: best {min(times) * 1e3:.1f} ms, "
        f"median {float(np.median(times)) * 1e3:.1f} ms over {reps} runs "
        f"({W * H * K * n_spheres / min(times) / 1e9:.2f} G ray-sphere tests/s)"
    )
    return min(times)


if __name__ == "__main__":
    passed = _check()
    _time()
    sys.exit(0 if passed else 1)
