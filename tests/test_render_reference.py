"""Forward rendering against Mitsuba 3 reference images (tests/data/references,
made by tests/references/make_references.py), judged against Monte Carlo
noise: the difference of every pixel is divided by the combined standard
error of the two estimates."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "references"))

from scenes import VARIANTS  # noqa: E402

import jaxrender  # noqa: E402

OUR_SPP = 64
OUR_RENDERS = 8


def our_estimate(name, scale=1.0):
    """Mean and standard error over independent renders (different seeds).
    (Mitsuba splats samples into neighbouring pixels and jaxrender samples
    the filter, so their per-pixel noise differs: each side's error is
    measured on its own renders.)"""
    scene = jaxrender.load_dict(VARIANTS[name](jaxrender.cornell_box()))
    imgs = np.stack([np.asarray(jaxrender.render(scene, spp=OUR_SPP, seed=100 + k), np.float64)
                     for k in range(OUR_RENDERS)]) * scale
    return imgs.mean(0), imgs.std(0, ddof=1) / np.sqrt(OUR_RENDERS)


def z_scores(ours, ours_se, ref):
    """Per-pixel (ours - reference) / combined standard error."""
    se = np.sqrt(ref["stderr"].astype(np.float64) ** 2 + ours_se ** 2)
    # Pixels with no variance (constant radiance) still allow float rounding.
    se = np.maximum(se, 1e-4 * (1.0 + np.abs(ref["mean"])))
    return (ours - ref["mean"]) / se, se


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_matches_mitsuba_within_noise(name):
    ref = np.load(HERE / "data" / "references" / f"{name}.npz")
    ours, ours_se = our_estimate(name)
    assert ours.shape == ref["mean"].shape
    assert np.all(np.isfinite(ours)) and np.all(ours >= 0)
    z, se = z_scores(ours, ours_se, ref)
    npix = z[..., 0].size
    # No pixel far outside the noise (standard errors from 8 renders are
    # t-distributed with heavy tails: allow rare 5-sigma pixels).
    assert np.mean(np.abs(z) > 5) < 0.01, f"{np.mean(np.abs(z) > 5):.2%} of pixels beyond 5 sigma"
    # No bias: the average z of each channel is ~N(0, 1/npix).
    assert np.all(np.abs(z.reshape(-1, 3).mean(0)) < 6 / np.sqrt(npix)), z.reshape(-1, 3).mean(0)
    # The whole-image means agree within 5 combined standard errors.
    diff = (ours - ref["mean"]).reshape(-1, 3).mean(0)
    agg_se = np.sqrt((se.reshape(-1, 3) ** 2).sum(0)) / npix
    assert np.all(np.abs(diff) < 5 * agg_se), (diff, agg_se)


def test_a_wrong_image_is_detected():
    """The statistic above rejects an image that is 3% too bright."""
    name = "cbox_gaussian"
    ref = np.load(HERE / "data" / "references" / f"{name}.npz")
    ours, ours_se = our_estimate(name, scale=1.03)
    z, se = z_scores(ours, ours_se, ref)
    npix = z[..., 0].size
    assert np.any(np.abs(z.reshape(-1, 3).mean(0)) >= 6 / np.sqrt(npix))
