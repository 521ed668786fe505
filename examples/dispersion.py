"""Goethe's prism experiment in the spectral variant: black and white stripes
seen through a glass prism whose index of refraction depends on wavelength.

A prism bends light by an angle that grows with its index of refraction.
Glass refracts blue more strongly than red (its IOR falls with
wavelength), so each wavelength sees the stripes shifted by its own amount:
where a white stripe meets a black one, the image splits into coloured
fringes (red and yellow on one side, blue and violet on the other), while
the middle of a wide stripe stays white. With a constant IOR the stripes
are only shifted, black and white. The glass here is a dense flint (its
IOR a Cauchy curve, 1.62 + 2e4 nm^2 / lambda^2: twice a real flint's
spread, for the image), given as a wavelength:value ``spectrum``, which the spectral
variant evaluates at each path's wavelengths (``int_ior`` as a spectrum
is beyond Mitsuba 3.9.1, whose dielectrics take one number).

    python3 examples/dispersion.py --res 256 --spp 128 --out dispersion

writes dispersive.png, constant.png (the same prism with the IOR at 550
nm) and fringes.png (a row of each image, per channel).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import jaxrender
from jaxrender.cli import write_image
from jaxrender.scene.transform import Transform as T

WAVELENGTHS = np.linspace(360.0, 830.0, 48)


def cauchy(lam_nm):
    """A dense flint, its dispersion doubled: 1.62 + 2e4 / lambda^2 (lambda in nm)."""
    return 1.62 + 2.0e4 / np.asarray(lam_nm) ** 2


def prism_obj(path: Path) -> None:
    """A triangular prism, 1.2 tall (y), its equilateral cross-section in xz
    (apex towards the camera, +z)."""
    r = 0.6
    tri = [(r * np.sin(a), r * np.cos(a)) for a in np.radians([0.0, 120.0, 240.0])]
    verts = [(x, y, z) for y in (-0.6, 0.6) for x, z in tri]
    faces = [(1, 2, 3), (4, 6, 5)]                       # bottom, top
    for i in range(3):
        j = (i + 1) % 3
        faces += [(i + 1, j + 1, j + 4), (i + 1, j + 4, i + 4)]
    path.write_text("".join(f"v {x} {y} {z}\n" for x, y, z in verts)
                    + "".join(f"f {a} {b} {c}\n" for a, b, c in faces))


def stripes(width: int = 64) -> np.ndarray:
    """Black and white vertical stripes of a few widths (a bitmap)."""
    x = np.arange(width)
    white = np.isin(x // 8, [1, 3, 4, 6])
    img = np.repeat(np.where(white, 0.9, 0.02)[None, :], 4, axis=0)
    return np.repeat(img[..., None], 3, axis=2).astype(np.float32)


def scene_dict(res: int, obj: Path, ior) -> dict:
    return {"type": "scene", "integrator": {"type": "path", "max_depth": 12},
            "sensor": {"type": "perspective", "fov": 30.0,
                       "to_world": T().look_at(origin=[0, 0, 4], target=[0, 0, 0], up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": res, "height": res // 2}},
            "sky": {"type": "constant", "radiance": 1.0},
            "backdrop": {"type": "rectangle", "to_world": T().translate([0.6, 0, -2.5]).scale([3.0, 2.0, 1.0]),
                         "bsdf": {"type": "diffuse", "reflectance": {"type": "bitmap", "bitmap": stripes(),
                                                                      "filter_type": "nearest"}}},
            "prism": {"type": "obj", "filename": str(obj), "face_normals": True,
                      "bsdf": {"type": "dielectric", "int_ior": ior}}}


def run(res: int = 256, spp: int = 128, out: str | Path = "dispersion", plot: bool = True) -> dict:
    """Render the prism with the dispersive and the constant IOR; write the
    images; return both images."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    obj = out / "prism.obj"
    prism_obj(obj)
    dispersive = {"type": "spectrum", "value": [(float(w), float(cauchy(w))) for w in WAVELENGTHS]}
    images = {}
    for name, ior in (("dispersive", dispersive), ("constant", float(cauchy(550.0)))):
        scene = jaxrender.load_dict(scene_dict(res, obj, ior), variant="spectral")
        images[name] = np.asarray(jaxrender.render(scene, spp=spp))
        write_image(out / f"{name}.png", images[name])
    if plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        row = images["dispersive"].shape[0] // 2
        fig, axes = plt.subplots(2, 1, figsize=(7, 4), sharex=True)
        for ax, name in zip(axes, images):
            for c, colour in enumerate("rgb"):
                ax.plot(images[name][row, :, c], color=colour, lw=1)
            ax.set_title(f"{name} IOR: the middle row's R, G, B")
        axes[1].set_xlabel("pixel column")
        fig.tight_layout()
        fig.savefig(out / "fringes.png", dpi=100)
        plt.close(fig)
    return images


def fringe_colour(image: np.ndarray) -> float:
    """How coloured the prism's view is: the mean spread between a pixel's
    largest and smallest channel over the middle rows (0 for greys)."""
    h = image.shape[0]
    mid = image[h // 3: 2 * h // 3]
    return float((mid.max(-1) - mid.min(-1)).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=256)
    ap.add_argument("--spp", type=int, default=128)
    ap.add_argument("--out", default="dispersion")
    args = ap.parse_args()
    images = run(args.res, args.spp, args.out)
    for name, img in images.items():
        print(f"{name:10s} colour spread {fringe_colour(img):.4f}")
    print(f"images in {args.out}/")


if __name__ == "__main__":
    main()
