"""Regenerate ``jaxrender/data/sunsky_rgb.npz``: the RGB tables of the
Hosek-Wilkie sky and sun models that Mitsuba 3.9.1's ``sunsky`` emitter
reads in its RGB variants, so that jaxrender never needs Mitsuba at run time.

    pip install mitsuba==3.9.1 && python tools/make_sunsky_data.py [--check]

Source: the datasets the mitsuba wheel ships in ``mitsuba/data/sunsky/``
(``sunsky_datasets.bin``, ``sampling_data.bin``; 3-clause BSD, Hosek & Wilkie
2012-2013, see ``jaxrender/data/sunsky_LICENSE``). Both are Mitsuba
``TensorFile`` archives, read here directly. Kept, as float32 (the precision
Mitsuba's single-precision variants load them in):

* ``sky_params`` (turbidity 10, albedo 2, Bezier control point 6, RGB 3,
  model coefficient 9) and ``sky_radiance`` (10, 2, 6, 3): the sky model;
* ``sun_irradiance_rgb`` (turbidity 10, sun elevation 30, RGB 3): the sun's
  spectral irradiance table (11 wavelengths, 320..720 nm) projected on
  Mitsuba's linear sRGB colour matching functions (``linear_rgb_rec``) and
  averaged over the 11 wavelengths, which is Mitsuba's ``spectrum_to_srgb``
  without its ``MI_CIE_Y_NORMALIZATION`` factor (its RGB sunsky divides that
  factor out again). The projection is linear, so interpolating this table
  equals projecting the interpolated spectrum;
* ``sun_radiance`` (turbidity 10, elevation segment 45, RGB 3, polynomial
  degree 4, limb-darkening power 6): the RGB ``complex_sun`` model.

Mitsuba is imported only for the colour matching functions.
``--check`` compares with the committed file and exits 1 if they differ.
"""
from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

import numpy as np

MITSUBA_VERSION = "3.9.1"
OUT = Path(__file__).resolve().parent.parent / "jaxrender" / "data" / "sunsky_rgb.npz"
WAVELENGTHS = 320.0 + 40.0 * np.arange(11)
# TensorFile dtype codes (Mitsuba's Struct::Type) of the fields used here.
DTYPES = {10: np.float32, 11: np.float64}


def read_tensor_file(path: Path) -> dict[str, np.ndarray]:
    """Every field of a Mitsuba ``TensorFile``: the magic ``tensor_file\\0``,
    a u16 version, a u32 field count, then per field its u16-prefixed name,
    u16 rank, u8 dtype, u64 byte offset and u64 shape; little endian."""
    raw = path.read_bytes()
    if raw[:12] != b"tensor_file\0":
        raise SystemExit(f"{path}: not a Mitsuba tensor file")
    _, count = struct.unpack_from("<HI", raw, 12)
    at, fields = 18, {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", raw, at)
        name = raw[at + 2:at + 2 + length].decode()
        at += 2 + length
        rank, dtype, offset = struct.unpack_from("<HBQ", raw, at)
        at += 11
        shape = struct.unpack_from(f"<{rank}Q", raw, at)
        at += 8 * rank
        if dtype not in DTYPES:
            raise SystemExit(f"{path}: field {name} has unsupported dtype code {dtype}")
        n = int(np.prod(shape))
        fields[name] = np.frombuffer(raw, DTYPES[dtype], n, offset).reshape(shape)
    return fields


def tables(mi) -> dict[str, np.ndarray]:
    data = Path(mi.__file__).parent / "data" / "sunsky"
    models = read_tensor_file(data / "sunsky_datasets.bin")
    sampling = read_tensor_file(data / "sampling_data.bin")
    cmf = np.array([list(mi.linear_rgb_rec(float(w))) for w in WAVELENGTHS], np.float32)     # (11, 3)
    sun_spec = sampling["sun_irradiance"].astype(np.float32)                                 # (10, 30, 11)
    sun_rgb = np.einsum("tew,wc->tec", sun_spec, cmf) / np.float32(len(WAVELENGTHS))
    expect = {"sky_params": (10, 2, 6, 3, 9), "sky_radiance": (10, 2, 6, 3), "sun_irradiance_rgb": (10, 30, 3),
              "sun_radiance": (10, 45, 3, 4, 6)}
    out = {"sky_params": models["sky_params_rgb"], "sky_radiance": models["sky_rad_rgb"],
           "sun_irradiance_rgb": sun_rgb, "sun_radiance": models["sun_rad_rgb"]}
    for k, shape in expect.items():
        if out[k].shape != shape:
            raise SystemExit(f"{k}: expected shape {shape}, the dataset has {out[k].shape}")
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = ap.parse_args()
    import mitsuba as mi
    if mi.__version__ != MITSUBA_VERSION:
        print(f"warning: mitsuba {mi.__version__}, the tables were made with {MITSUBA_VERSION}", file=sys.stderr)
    mi.set_variant("scalar_rgb")
    new = tables(mi)
    if args.check:
        old = np.load(OUT)
        same = set(old.files) == set(new) and all(np.array_equal(old[k], new[k]) for k in new)
        print("up to date" if same else f"{OUT} differs from the dataset")
        return 0 if same else 1
    OUT.parent.mkdir(exist_ok=True)
    np.savez_compressed(OUT, **new)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
