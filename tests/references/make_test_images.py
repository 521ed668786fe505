"""Write the small images the texture and envmap tests use (committed in
tests/data/textures; rerun only to change them):

* ``albedo16.png``: 16x16 8-bit sRGB RGB, smooth colour ramps plus a few
  hard-edged texels (bilinear and wrap behaviour both show).
* ``grey8.png``: 8x8 8-bit grey (one channel).
* ``sky32x16.exr``: 32x16 float RGB lat-long environment: a blue-to-white
  sky gradient, a dim ground, a tint varying with azimuth and a small
  bright "sun" off the zenith.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "data" / "textures"


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


if __name__ == "__main__":
    main()
