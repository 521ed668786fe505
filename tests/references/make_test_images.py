"""Write the small images the texture and envmap tests use (committed in
tests/data/textures; rerun only to change them):

* ``albedo16.png``: 16x16 8-bit sRGB RGB, smooth colour ramps plus a few
  hard-edged texels (bilinear and wrap behaviour both show).
* ``grey8.png``: 8x8 8-bit grey (one channel).
* ``normals16.png``: 16x16 8-bit tangent-space normal map (0.5 n + 0.5,
  read raw): a bumpy pattern whose normals lean differently in u and v
  (a swapped or negated axis shows).
* ``sky32x16.exr``: 32x16 float RGB lat-long environment: a blue-to-white
  sky gradient, a dim ground, a tint varying with azimuth and a small
  bright "sun" off the zenith.

and the low-poly meshes of the smooth-shading tests (tests/data/meshes):

* ``lowpoly_sphere.obj``: a 6 x 8 UV sphere with ``vn`` normals (the exact
  sphere normals) and ``vt`` coordinates;
* ``lowpoly_torus.ply``: an ASCII 6 x 10 torus without normals (Mitsuba
  computes angle-weighted vertex normals for it);
* ``lowpoly_sphere.serialized``: Mitsuba's serialized format (version 4,
  written as tests/test_serialized.py writes it) holding the OBJ sphere's
  positions, normals and texture coordinates, squashed into an egg.

and the smoke grid of the media references (tests/data/volumes):

* ``smoke16.vol``: a 16^3 one-channel density in [0, 1], a lumpy plume
  (a few Gaussian puffs, denser at the bottom) with empty corners, so that
  trilinear lookups, null collisions and empty space all matter.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "data" / "textures"
MESHES = OUT.parent / "meshes"
VOLUMES = OUT.parent / "volumes"


def lowpoly_sphere(rings=6, segs=8):
    """Positions (= normals), texture coordinates and 0-based faces of a UV sphere."""
    n, uv = [], []
    for i in range(rings + 1):
        th = np.pi * i / rings
        for j in range(segs + 1):
            ph = 2 * np.pi * j / segs
            n.append((np.sin(th) * np.cos(ph), np.cos(th), np.sin(th) * np.sin(ph)))
            uv.append((j / segs, i / rings))
    k = lambda i, j: i * (segs + 1) + j
    faces = []
    for i in range(rings):
        for j in range(segs):
            a, b, c, d = k(i, j), k(i, j + 1), k(i + 1, j), k(i + 1, j + 1)
            if i > 0:
                faces.append((a, b, c))
            if i < rings - 1:
                faces.append((b, d, c))
    return np.array(n), np.array(uv), np.array(faces)


def write_meshes() -> None:
    MESHES.mkdir(parents=True, exist_ok=True)
    n, uv, faces = lowpoly_sphere()
    lines = []
    for p, t in zip(n, uv):
        lines.append("v %.6f %.6f %.6f" % tuple(p))
        lines.append("vn %.6f %.6f %.6f" % tuple(p))
        lines.append("vt %.6f %.6f" % tuple(t))
    lines += ["f " + " ".join(f"{a + 1}/{a + 1}/{a + 1}" for a in f) for f in faces]
    (MESHES / "lowpoly_sphere.obj").write_text("\n".join(lines) + "\n")
    write_serialized()
    big, small, nu, nv = 1.0, 0.4, 10, 6
    verts, faces = [], []
    for i in range(nu):
        u = 2 * np.pi * i / nu
        for j in range(nv):
            v = 2 * np.pi * j / nv
            verts.append(((big + small * np.cos(v)) * np.cos(u), small * np.sin(v), (big + small * np.cos(v)) * np.sin(u)))
    for i in range(nu):
        for j in range(nv):
            a, b = i * nv + j, ((i + 1) % nu) * nv + j
            c, d = i * nv + (j + 1) % nv, ((i + 1) % nu) * nv + (j + 1) % nv
            faces += [(a, c, b), (b, c, d)]
    head = ["ply", "format ascii 1.0", f"element vertex {len(verts)}", "property float x", "property float y",
            "property float z", f"element face {len(faces)}", "property list uchar int vertex_indices", "end_header"]
    body = ["%.6f %.6f %.6f" % v for v in verts] + ["3 %d %d %d" % f for f in faces]
    (MESHES / "lowpoly_torus.ply").write_text("\n".join(head + body) + "\n")
    print("wrote", sorted(p.name for p in MESHES.iterdir()))


def write_serialized() -> None:
    """The sphere, squashed (an egg: its normals are no longer its
    positions), as a one-mesh serialized file."""
    import sys
    sys.path.insert(0, str(OUT.parent.parent))
    from test_serialized import _file, _legacy_stream
    n, uv, faces = lowpoly_sphere()
    egg = n * [1.0, 1.4, 1.0]
    normals = n * [1.4, 1.0, 1.4]
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    _file(MESHES / "lowpoly_sphere.serialized", [_legacy_stream(4, egg, faces, normals, uv, name="egg")], 4)


def write_normal_map() -> None:
    y, x = (np.mgrid[0:16, 0:16] + 0.5) / 16
    dx = 0.7 * np.sin(2 * np.pi * 2 * x) * (0.6 + 0.4 * y)     # leans along u ...
    dy = 0.35 * np.cos(2 * np.pi * y)                          # ... and, less, along v
    n = np.stack([-dx, -dy, np.ones_like(x)], -1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    from PIL import Image
    Image.fromarray(np.round((0.5 * n + 0.5) * 255).astype(np.uint8), mode="RGB").save(OUT / "normals16.png")


def write_smoke() -> None:
    from jaxrender.scene.volumes import write_vol
    VOLUMES.mkdir(parents=True, exist_ok=True)
    n = 16
    z, y, x = (np.mgrid[0:n, 0:n, 0:n] + 0.5) / n
    density = np.zeros((n, n, n))
    for cx, cy, cz, r, a in ((0.5, 0.25, 0.5, 0.3, 1.0), (0.35, 0.55, 0.6, 0.2, 0.7), (0.65, 0.75, 0.4, 0.18, 0.5)):
        density += a * np.exp(-((x - cx) ** 2 + (y - cy) ** 2 + (z - cz) ** 2) / (2 * r * r))
    ripple = 0.75 + 0.25 * np.sin(11 * x + 3) * np.sin(9 * y + 1) * np.sin(13 * z + 2)
    density = np.clip(density * ripple - 0.1, 0.0, None)
    write_vol(VOLUMES / "smoke16.vol", density / density.max())
    print("wrote", sorted(p.name for p in VOLUMES.iterdir()))


def main() -> None:
    import OpenEXR
    from PIL import Image
    OUT.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:16, 0:16] / 15.0
    rgb = np.stack([0.15 + 0.8 * x, 0.2 + 0.7 * y, 0.9 - 0.6 * x * y], -1)
    rgb[3:5, 10:13] = [1.0, 0.9, 0.1]
    rgb[11, 2:6] = [0.05, 0.05, 0.05]
    Image.fromarray(np.round(rgb * 255).astype(np.uint8), mode="RGB").save(OUT / "albedo16.png")
    g = (np.add.outer(np.arange(8), np.arange(8)) % 4) / 3.0
    Image.fromarray(np.round(40 + 200 * g).astype(np.uint8), mode="L").save(OUT / "grey8.png")
    write_normal_map()
    h, w = 16, 32
    v = (np.arange(h) + 0.5) / h
    up = np.clip(1.0 - 2.0 * v, 0.0, 1.0)[:, None]    # 1 at the zenith, 0 at the horizon
    row = np.array([0.9, 0.95, 1.0]) * (1 - up) + np.array([0.25, 0.45, 0.9]) * up
    sky = np.repeat(row[:, None, :], w, axis=1).astype(np.float32)
    sky[v > 0.5] = [0.12, 0.1, 0.08]                 # ground
    u = 2 * np.pi * (np.arange(w) + 0.5) / w         # tint varying with azimuth: orientation shows
    sky[..., 0] *= 1 + 0.6 * np.cos(u)
    sky[..., 1] *= 1 + 0.6 * np.sin(u)
    sky[3:5, 7:9] = [12.0, 10.0, 8.0]                # sun
    OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                 {"RGB": np.ascontiguousarray(sky)}).write(str(OUT / "sky32x16.exr"))
    print("wrote", sorted(p.name for p in OUT.iterdir()))
    write_meshes()
    write_smoke()


if __name__ == "__main__":
    main()
