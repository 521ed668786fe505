"""Render the reference images with Mitsuba 3 (scalar_rgb; COLOR_VARIANTS and
POLARIZED_VARIANTS in their colour variant) and store their
per-pixel mean and standard error as small committed test data.

    pip install mitsuba && python tests/references/make_references.py [name ...]

Images of the aov integrator (AOV_VARIANTS) keep all their channels.
Each reference is the mean of RENDERS independent renders (different
seeds) of SPP samples per pixel (SAMPLER_VARIANTS: of their sampler's own
sample count); the standard error of that mean comes from their spread,
so tests can judge differences against Monte Carlo noise.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scenes import (AOV_VARIANTS, COLOR_AOV_VARIANTS, COLOR_VARIANTS, POLARIZED_VARIANTS, RENDERS,  # noqa: E402
                    SAMPLER_VARIANTS, SPP, VARIANTS)

OUT = HERE.parent / "data" / "references"
# Mitsuba's variant per colour type (mono only exists as llvm_ad_mono: it
# needs libLLVM, DRJIT_LIBLLVM_PATH).
MITSUBA_VARIANT = {"rgb": "scalar_rgb", "mono": "llvm_ad_mono", "spectral": "scalar_spectral",
                   "spectral_polarized": "llvm_ad_spectral_polarized", "mono_polarized": "llvm_ad_mono_polarized"}


def main() -> None:
    import mitsuba as mi
    OUT.mkdir(parents=True, exist_ok=True)
    colours = {**COLOR_VARIANTS, **COLOR_AOV_VARIANTS, **POLARIZED_VARIANTS}
    everything = {**VARIANTS, **AOV_VARIANTS, **SAMPLER_VARIANTS, **colours}
    names = sys.argv[1:] or list(everything)
    for name in names:
        make = everything[name]
        colour = "rgb"
        if name in colours:
            colour, make = make
        mi.set_variant(MITSUBA_VARIANT[colour])
        scene = mi.load_dict(make(mi.cornell_box()))
        spp = 0 if name in SAMPLER_VARIANTS else SPP          # 0: the scene's sampler's sample count
        imgs = np.stack([np.array(mi.render(scene, spp=spp, seed=s)) for s in range(RENDERS)])
        mean = imgs.mean(0)
        stderr = imgs.std(0, ddof=1) / np.sqrt(RENDERS)
        np.savez_compressed(OUT / f"{name}.npz", mean=mean.astype(np.float32), stderr=stderr.astype(np.float32),
                            spp=(spp or scene.sensors()[0].sampler().sample_count()) * RENDERS,
                            mitsuba=mi.__version__)
        print(f"{name}: {mean.shape}, mean {mean.mean(axis=(0, 1))}")


if __name__ == "__main__":
    main()
