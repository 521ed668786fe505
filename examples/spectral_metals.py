"""Gold, copper and silver rendered in the rgb and the spectral variant.

A metal's colour is its Fresnel reflectance, computed from its complex index
of refraction eta + i k. Measured eta and k vary strongly with wavelength
(gold and copper absorb blue and green). The rgb variant reduces each to
three numbers (Mitsuba's RGB integration of the curves) and evaluates the
Fresnel equations on them; the spectral variant evaluates them on the
measured curves at each path's four wavelengths and converts the result to
RGB on the film. The Fresnel equations are nonlinear in eta and k, so the
two disagree: mostly at grazing angles (the rims of the spheres) and in
interreflections, where the spectral colours are the physically right ones.

    python3 examples/spectral_metals.py --res 256 --spp 256 --out spectral_metals

writes rgb.png, spectral.png, their difference (difference.png, scaled by 4),
and ior.png (the measured curves the spectral render used).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import jaxrender
from jaxrender.cli import write_image
from jaxrender.scene.conductors import measured_ior
from jaxrender.scene.transform import Transform as T

METALS = {"gold": ("Au", -0.55), "copper": ("Cu", 0.0), "silver": ("Ag", 0.55)}


def scene_dict(res: int, spp: int) -> dict:
    """Three rough metal spheres on a grey floor under an area light and a dim sky."""
    d = {"type": "scene",
         "integrator": {"type": "path", "max_depth": 6},
         "sensor": {"type": "perspective", "fov": 35.0,
                    "to_world": T().look_at(origin=[0, 0.9, 3.4], target=[0, 0.05, 0], up=[0, 1, 0]),
                    "film": {"type": "hdrfilm", "width": res, "height": res},
                    "sampler": {"type": "independent", "sample_count": spp}},
         "sky": {"type": "constant", "radiance": {"type": "rgb", "value": [0.25, 0.25, 0.25]}},
         "light": {"type": "rectangle", "to_world": T().look_at(origin=[1.5, 2.5, 1.5], target=[0, 0, 0],
                                                                up=[0, 1, 0]).scale(0.8),
                   "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [12.0, 12.0, 12.0]}}},
         "floor": {"type": "rectangle", "to_world": T().translate([0, -0.25, 0]).rotate([1, 0, 0], -90).scale(4),
                   "bsdf": {"type": "diffuse", "reflectance": 0.5}}}
    for name, (material, x) in METALS.items():
        d[name] = {"type": "sphere", "center": [x, 0.0, 0.0], "radius": 0.25,
                   "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.08, "material": material}}
    return d


def render(variant: str, res: int, spp: int, seed: int = 0) -> np.ndarray:
    scene = jaxrender.load_dict(scene_dict(res, spp), variant=variant)
    return np.asarray(jaxrender.render(scene, seed=seed))


def plot_ior(path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for name, (material, _) in METALS.items():
        for ax, part in zip(axes, ("eta", "k")):
            wl, v = measured_ior(material, part)
            keep = (wl >= 360) & (wl <= 830)
            ax.plot(wl[keep], v[keep], label=f"{name} ({material})")
    for ax, part in zip(axes, ("eta (real part)", "k (imaginary part)")):
        ax.set_xlabel("wavelength (nm)")
        ax.set_title(part)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(res: int = 256, spp: int = 256, out: str | Path = "spectral_metals", plot: bool = True) -> dict:
    """Render both variants; write the images (and the curves' plot); return
    each sphere's mean colour in each variant."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = {v: render(v, res, spp) for v in ("rgb", "spectral")}
    for v, img in images.items():
        write_image(out / f"{v}.png", img)
    write_image(out / "difference.png", np.abs(images["spectral"] - images["rgb"]) * 4.0)
    if plot:
        plot_ior(out / "ior.png")
    # each sphere's centre region, for the numbers printed below
    colours = {}
    for name, (_, x) in METALS.items():
        cx = int(res * (0.5 + x / 2.2))
        half = max(res // 25, 1)
        box = np.s_[int(res * 0.5):int(res * 0.6), max(cx - half, 0):cx + half]
        colours[name] = {v: images[v][box].reshape(-1, 3).mean(0) for v in images}
    return colours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=256)
    ap.add_argument("--spp", type=int, default=256)
    ap.add_argument("--out", default="spectral_metals")
    args = ap.parse_args()
    colours = run(args.res, args.spp, args.out)
    for name, c in colours.items():
        print(f"{name:7s} rgb {np.round(c['rgb'], 3)}  spectral {np.round(c['spectral'], 3)}")
    print(f"images in {args.out}/")


if __name__ == "__main__":
    main()
