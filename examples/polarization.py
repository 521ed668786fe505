"""Polarized light in the spectral_polarized variant: crossed polarizers with
retarders between them, and polarization by reflection seen as Stokes images.

1. Crossed polarizers (Mitsuba 2 paper's experiment). A camera looks at a
   white sky through a linear polarizer (0 degrees) and an analyzer crossed
   with it (90 degrees): nothing passes. Between them, a row of wave plates
   at angles from 0 to 90 degrees: half-wave plates (top half of the image)
   turn the light's polarization by twice their angle, so the analyzer
   passes 1/2 sin^2(2 theta) of the sky; quarter-wave plates (bottom half)
   make it elliptical and the analyzer passes 1/4 sin^2(2 theta). The
   render is checked against these closed forms (``crossed.png``,
   ``transmission.png``).
2. Polarization by reflection. A glass sphere and a gold sphere on a glass
   floor under an area light, rendered by the ``stokes`` integrator: S0 is
   the usual image, S1 (horizontal minus vertical), S2 (diagonal) and S3
   (circular) are written in false colour, green positive and red negative
   (``s0.png`` ... ``s3.png``). Light reflected off glass near Brewster's
   angle is polarized parallel to the surface, and a gold reflection turns
   linear polarization elliptical (S3). The same scene photographed through
   a polarizing filter at 0 and 90 degrees (``filter_0.png``,
   ``filter_90.png``) shows those reflections dimmed or kept.

    python3 examples/polarization.py --res 256 --spp 64 --out polarization
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

import jaxrender
from jaxrender.cli import write_image
from jaxrender.scene.transform import Transform as T

PLATE_ANGLES = np.linspace(0.0, 90.0, 7)      # degrees, one strip each
PLATES = {"half-wave": 180.0, "quarter-wave": 90.0}     # retardance (degrees) of the top and bottom rows
VARIANT = "spectral_polarized"
HALF = 1.1          # half the width of the crossed-polarizer view (the plates' row spans it)


def crossed_dict(res: int) -> dict:
    """Sky -> polarizer (0 deg) -> wave plates -> analyzer (90 deg) -> camera."""
    path = {"type": "path", "max_depth": 8}
    d = {"type": "scene", "integrator": path,
         # parallel rays: every plate is seen head-on (a retarder's phase and
         # axes change with the angle of incidence)
         "sensor": {"type": "orthographic",
                    "to_world": T().look_at(origin=[0, 0, 9], target=[0, 0, 0], up=[0, 1, 0]).scale([HALF, HALF, 1]),
                    "film": {"type": "hdrfilm", "width": res, "height": res // 2, "rfilter": {"type": "box"}}},
         "sky": {"type": "constant", "radiance": 1.0},
         "polarizer": {"type": "rectangle", "to_world": T().translate([0, 0, 1]).scale([3, 3, 1]),
                       "bsdf": {"type": "polarizer", "theta": 0.0}},
         "analyzer": {"type": "rectangle", "to_world": T().translate([0, 0, 3]).scale([3, 3, 1]),
                      "bsdf": {"type": "polarizer", "theta": 90.0}}}
    width = 2.2 / len(PLATE_ANGLES)
    for row, (kind, delta) in enumerate(PLATES.items()):
        y = 0.4 if row == 0 else -0.4
        for k, theta in enumerate(PLATE_ANGLES):
            x = -1.1 + width * (k + 0.5)
            d[f"{kind}_{k}"] = {"type": "rectangle",
                                "to_world": T().translate([x, y, 2]).scale([width / 2, 0.4, 1]),
                                "bsdf": {"type": "retarder", "theta": float(theta), "delta": delta}}
    return d


def expected_transmission(kind: str, theta_deg: np.ndarray) -> np.ndarray:
    """What crossed polarizers pass of unpolarized light with a wave plate at
    theta between them: 1/2 sin^2(2 theta) sin^2(delta / 2)."""
    delta = math.radians(PLATES[kind])
    return 0.5 * np.sin(2 * np.radians(theta_deg)) ** 2 * math.sin(delta / 2) ** 2


def strip_means(image: np.ndarray) -> dict:
    """Mean intensity at the centre of each strip, per row (kind)."""
    h, w = image.shape[:2]
    lum = image.mean(-1)
    out = {}
    for row, kind in enumerate(PLATES):
        y = int(h * (0.3 if row == 0 else 0.7))
        # the image spans x in [-HALF, HALF], mirrored (Mitsuba's camera)
        xs = [int(w * (0.5 - (-1.1 + 2.2 / len(PLATE_ANGLES) * (k + 0.5)) / (2 * HALF)))
              for k in range(len(PLATE_ANGLES))]
        out[kind] = np.array([lum[y - 1:y + 2, x - 1:x + 2].mean() for x in xs])
    return out


def reflection_dict(res: int, integrator: dict, filter_theta: float | None = None) -> dict:
    """Glass and gold spheres on a glass floor, lit by a slanted area light."""
    d = {"type": "scene", "integrator": integrator,
         "sensor": {"type": "perspective", "fov": 35.0,
                    "to_world": T().look_at(origin=[0, 1.1, 3.2], target=[0, 0.1, 0], up=[0, 1, 0]),
                    "film": {"type": "hdrfilm", "width": res, "height": res * 3 // 4}},
         "sky": {"type": "constant", "radiance": 0.3},
         "light": {"type": "rectangle", "to_world": T().look_at(origin=[0, 2.0, -2.5], target=[0, 0, 0],
                                                                up=[0, 1, 0]).scale(1.2),
                   "emitter": {"type": "area", "radiance": 6.0}},
         "floor": {"type": "rectangle", "to_world": T().translate([0, -0.3, 0]).rotate([1, 0, 0], -90).scale(4),
                   "bsdf": {"type": "dielectric", "int_ior": 1.5}},
         "backdrop": {"type": "rectangle", "to_world": T().translate([0, -0.31, 0]).rotate([1, 0, 0], -90)
                      .scale(4), "bsdf": {"type": "diffuse", "reflectance": [0.2, 0.25, 0.35]}},
         "glass": {"type": "sphere", "center": [-0.45, 0.0, 0.0], "radius": 0.3,
                   "bsdf": {"type": "dielectric", "int_ior": 1.5}},
         "gold": {"type": "sphere", "center": [0.45, 0.0, 0.0], "radius": 0.3,
                  "bsdf": {"type": "conductor", "material": "Au"}}}
    if filter_theta is not None:
        # a polarizing filter just in front of the lens, facing the camera
        d["filter"] = {"type": "rectangle", "to_world": T().look_at(origin=[0, 1.05, 3.05], target=[0, 0.1, 0],
                                                                     up=[0, 1, 0]).scale(0.5),
                       "bsdf": {"type": "polarizer", "theta": filter_theta}}
    return d


def false_colour(s: np.ndarray, scale: float) -> np.ndarray:
    """A signed Stokes component as green (positive) and red (negative)."""
    v = np.clip(s.mean(-1) / scale, -1.0, 1.0)
    return np.stack([np.maximum(-v, 0), np.maximum(v, 0), np.zeros_like(v)], -1)


def plot_transmission(path: Path, measured: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2))
    fine = np.linspace(0, 90, 181)
    for kind, colour in zip(PLATES, ("C0", "C1")):
        ax.plot(fine, expected_transmission(kind, fine), color=colour, label=f"{kind}: closed form")
        ax.plot(PLATE_ANGLES, measured[kind], "o", color=colour, label=f"{kind}: rendered")
    ax.set_xlabel("wave plate angle (degrees)")
    ax.set_ylabel("transmitted fraction")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(res: int = 256, spp: int = 64, out: str | Path = "polarization", plot: bool = True) -> dict:
    """Render both experiments; write the images; return the strips'
    measured and expected transmission and the Stokes images' means."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    crossed = np.asarray(jaxrender.render(jaxrender.load_dict(crossed_dict(res), variant=VARIANT), spp=spp))
    write_image(out / "crossed.png", crossed * 2.0)
    measured = strip_means(crossed)
    if plot:
        plot_transmission(out / "transmission.png", measured)
    stokes_int = {"type": "stokes", "nested": {"type": "path", "max_depth": 8}}
    stokes = np.asarray(jaxrender.render(jaxrender.load_dict(reflection_dict(res, stokes_int), variant=VARIANT),
                                         spp=spp))
    s = [stokes[..., 3 + 3 * i:6 + 3 * i] for i in range(4)]
    write_image(out / "s0.png", s[0])
    scale = max(float(np.percentile(np.abs(np.stack(s[1:])), 99)), 1e-6)
    for i in (1, 2, 3):
        write_image(out / f"s{i}.png", false_colour(s[i], scale))
    filtered = {}
    for theta in (0.0, 90.0):
        scene = jaxrender.load_dict(reflection_dict(res, {"type": "path", "max_depth": 8}, theta), variant=VARIANT)
        filtered[theta] = np.asarray(jaxrender.render(scene, spp=spp))
        write_image(out / f"filter_{int(theta)}.png", filtered[theta] * 2.0)
    dolp = np.hypot(s[1].mean(-1), s[2].mean(-1)) / np.maximum(s[0].mean(-1), 1e-6)
    return {"measured": measured, "expected": {k: expected_transmission(k, PLATE_ANGLES) for k in PLATES},
            "stokes_means": [x.mean() for x in s], "max_linear_degree": float(np.percentile(dolp, 99)),
            "filter_means": {k: float(v.mean()) for k, v in filtered.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=256)
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--out", default="polarization")
    args = ap.parse_args()
    r = run(args.res, args.spp, args.out)
    for kind in PLATES:
        print(f"{kind:12s} rendered {np.round(r['measured'][kind], 4)}")
        print(f"{'':12s} expected {np.round(r['expected'][kind], 4)}")
    print("Stokes image means (S0..S3):", np.round(r["stokes_means"], 5))
    print(f"99th percentile degree of linear polarization: {r['max_linear_degree']:.3f}")
    print("mean through a filter at 0 / 90 degrees:", {k: round(v, 4) for k, v in r["filter_means"].items()})
    print(f"images in {args.out}/")


if __name__ == "__main__":
    main()
