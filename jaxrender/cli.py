"""Command line: ``jaxrender render [scene.xml] -o out.exr|out.png`` and ``jaxrender info``.

Without a scene file the built-in Cornell box is rendered. A user's mistake
(a bad scene, option or output path) is one line on stderr and exit status
2, found before any rendering work; never a Python traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

OUTPUT_FORMATS = (".exr", ".png", ".npy")


class UsageError(Exception):
    """A mistake on the command line (reported as one line, exit status 2)."""


VARIANT_HELP = "colour variant: rgb (default), mono, spectral, mono_polarized or spectral_polarized"


def _load(path: str | None, defines: list[str], variant: str | None = None):
    import jaxrender
    overrides = {}
    for d in defines or []:
        if "=" not in d:
            raise UsageError(f"-D expects name=value, got {d!r}")
        k, v = d.split("=", 1)
        overrides[k] = v
    if path is None:
        if overrides:
            raise UsageError("-D overrides need a scene file")
        return jaxrender.load_dict(jaxrender.cornell_box(), variant=variant)
    return jaxrender.load_file(path, variant=variant, **overrides)


def linear_to_srgb8(img: np.ndarray) -> np.ndarray:
    x = np.clip(np.nan_to_num(img, nan=0.0), 0.0, 1.0)
    srgb = np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055)
    return (srgb * 255.0 + 0.5).astype(np.uint8)


def write_image(path: Path, img: np.ndarray, channels: list[str] | None = None) -> None:
    """EXR (linear float32), PNG (sRGB, 8 bit) or NPY, by extension.
    ``channels``: names of an AOV image's channels (EXR / NPY only)."""
    check_output(path, channels is not None)
    ext = path.suffix.lower()
    img = np.ascontiguousarray(img, dtype=np.float32)
    if ext == ".exr":
        import OpenEXR
        layers = ({"Y": np.ascontiguousarray(img[..., 0])} if channels is None and img.shape[-1] == 1 else
                  {"RGB": img} if channels is None else
                  {name: np.ascontiguousarray(img[..., k]) for k, name in enumerate(channels)})
        OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                     layers).write(str(path))
    elif ext == ".png":
        from PIL import Image
        grey = img.shape[-1] == 1      # a mono render
        Image.fromarray(linear_to_srgb8(img[..., 0] if grey else img), mode="L" if grey else "RGB").save(path)
    else:
        np.save(path, img)


def check_output(path: Path, named_channels: bool = False) -> None:
    """A UsageError unless ``path`` is a file of a format we write, in a
    directory we may write to (checked before rendering, not after)."""
    ext = path.suffix.lower()
    if ext not in OUTPUT_FORMATS:
        raise UsageError(f"unsupported output format {ext or path.name!r} (use {', '.join(OUTPUT_FORMATS)})")
    if named_channels and ext == ".png":
        raise UsageError("an aov image has named channels: write it as .exr or .npy")
    if path.is_dir():
        raise UsageError(f"output {str(path)!r} is a directory")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"output directory {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"cannot write {str(path)!r} (permission denied)")


def cmd_render(args) -> None:
    import jax
    from tqdm import tqdm

    import jaxrender
    out = Path(args.output)
    check_output(out)
    scene = _load(args.scene, args.define, args.variant)
    aov = jaxrender.aov_names(scene) if scene.integrator["type"] == "aov" else None
    check_output(out, aov is not None)
    if args.spp is not None and args.spp < 0:
        raise UsageError(f"--spp must be positive (or 0: the scene's), got {args.spp}")
    sampler = scene.sensor(args.sensor)[1].sampler
    spp = sampler.sample_count(args.spp) if args.spp else scene.sensor(args.sensor)[1].spp
    # A stratifying sampler's strata span all of a pixel's samples: one pass.
    passes = max(1, min(args.passes, spp)) if sampler.type == "independent" else 1
    base, extra = divmod(spp, passes)
    t0 = time.perf_counter()
    acc = None
    with tqdm(total=spp, unit="spp", desc="rendering", disable=args.quiet) as bar:
        for k in range(passes):
            n = base + (1 if k < extra else 0)
            img = jaxrender.render(scene, sensor=args.sensor, spp=n, seed=np.uint32((args.seed * 65536 + k) & 0xFFFFFFFF))
            img = jax.device_get(img) * n
            acc = img if acc is None else acc + img
            bar.update(n)
    img = acc / spp
    write_image(out, img, aov)
    if not args.quiet:
        print(f"wrote {out} ({img.shape[1]}x{img.shape[0]}, {spp} spp) in {time.perf_counter() - t0:.2f} s")


def cmd_info(args) -> None:
    scene = _load(args.scene, args.define, args.variant)
    cam = scene.camera
    print(f"film {cam.width}x{cam.height}, {cam.spp} spp, filter {cam.rfilter}; integrator {scene.integrator}")
    n_shapes = len(scene.shapes)
    print(f"{len(scene.triangles) - n_shapes} triangles, {n_shapes} analytic shapes, {len(scene.wide_bvh[0])} "
          f"8-wide BVH nodes, {len(scene.bvh_bounds)} shape BVH nodes, {len(scene.light_tris)} emissive triangles")
    print("parameters:")
    for k, v in scene.params.items():
        v = np.asarray(v)
        # Textures and environment maps: their shape, not every texel.
        print(f"  {k:40s} {v.tolist() if v.size <= 16 else f'array {v.shape} {v.dtype}'}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="jaxrender", description="jaxrender: differentiable rendering in JAX")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="render a scene (default: the Cornell box)")
    r.add_argument("scene", nargs="?", help="Mitsuba 3 XML scene file")
    r.add_argument("-o", "--output", default="render.exr", help="output .exr, .png or .npy")
    r.add_argument("--spp", type=int, default=None, help="samples per pixel (default: the scene's)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--sensor", type=int, default=0, help="which sensor of the scene (file order)")
    r.add_argument("--passes", type=int, default=8, help="sample passes (progress bar granularity; the independent sampler only)")
    r.add_argument("-D", "--define", action="append", help="override an XML <default>: name=value")
    r.add_argument("--variant", default=None, help=VARIANT_HELP)
    r.add_argument("-q", "--quiet", action="store_true")
    r.set_defaults(fn=cmd_render)
    i = sub.add_parser("info", help="list a scene's parameters")
    i.add_argument("scene", nargs="?")
    i.add_argument("-D", "--define", action="append")
    i.add_argument("--variant", default=None, help=VARIANT_HELP)
    i.set_defaults(fn=cmd_info)
    args = ap.parse_args(argv)
    from .scene.errors import SceneError
    try:
        args.fn(args)
    except (SceneError, UsageError, OSError) as exc:   # (OSError: a file could not be read or written)
        print(f"jaxrender: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
