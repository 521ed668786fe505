"""Forward rendering against Mitsuba 3 reference images (tests/data/references,
made by tests/references/make_references.py), judged against Monte Carlo
noise rather than by eye.

Three checks per scene:
* per pixel, the difference over the combined standard error: almost no
  pixel may lie beyond 5 sigma;
* per 8x8 block and for the whole image, the mean difference over its
  standard error (our error from the spread of independent renders' block
  means, robust to the heavy-tailed pixels of glossy paths; Mitsuba's from
  its per-pixel errors);
* a control: the same checks reject an image 3% too bright.
"""
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
BLOCK = 8


def our_renders(name: str, edit=None) -> np.ndarray:
    d = VARIANTS[name](jaxrender.cornell_box())
    if edit is not None:
        edit(d)
    scene = jaxrender.load_dict(d)
    return np.stack([np.asarray(jaxrender.render(scene, spp=OUR_SPP, seed=100 + k), np.float64)
                     for k in range(OUR_RENDERS)])


def blocks(img: np.ndarray) -> np.ndarray:
    """Mean over BLOCK x BLOCK tiles (the image is cropped to whole tiles)."""
    h, w = img.shape[-3] // BLOCK * BLOCK, img.shape[-2] // BLOCK * BLOCK
    x = img[..., :h, :w, :]
    x = x.reshape(*x.shape[:-3], h // BLOCK, BLOCK, w // BLOCK, BLOCK, x.shape[-1])
    return x.mean(axis=(-4, -2))


def disagreements(renders: np.ndarray, ref) -> list[str]:
    """Reasons the renders and the reference disagree beyond noise (empty: agree)."""
    k = len(renders)
    ours = renders.mean(0)
    ref_mean = ref["mean"].astype(np.float64)
    ref_se = ref["stderr"].astype(np.float64)
    problems = []
    # Pixels.
    se = np.maximum(np.sqrt(ref_se ** 2 + renders.var(0, ddof=1) / k), 1e-4 * (1.0 + np.abs(ref_mean)))
    z = (ours - ref_mean) / se
    if np.mean(np.abs(z) > 5) >= 0.01:
        problems.append(f"{np.mean(np.abs(z) > 5):.2%} of pixels beyond 5 sigma")
    # Blocks and the whole image. Mitsuba splats samples into neighbouring
    # pixels, so its pixel errors are correlated: inflate their sum by 2.
    for label, ours_b, ref_b, ref_b_se in (
            ("block", blocks(renders), blocks(ref_mean), 2 * np.sqrt(blocks(ref_se ** 2) / BLOCK ** 2)),
            ("image", renders.mean(axis=(1, 2)), ref_mean.mean(axis=(0, 1)),
             2 * np.sqrt((ref_se ** 2).mean(axis=(0, 1)) / ref_se[..., 0].size))):
        diff = ours_b.mean(0) - ref_b
        se_b = np.sqrt(ours_b.var(0, ddof=1) / k + ref_b_se ** 2) + 1e-7
        worst = np.max(np.abs(diff / se_b))
        if worst > 5:
            problems.append(f"{label} means differ by {worst:.1f} standard errors")
    return problems


# Known disagreements with Mitsuba, kept as references for the fix (strict:
# the test reports when they start to agree).
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN[n], strict=True))
                                  if n in KNOWN else n for n in sorted(VARIANTS)])
def test_matches_mitsuba_within_noise(name):
    ref = np.load(HERE / "data" / "references" / f"{name}.npz")
    renders = our_renders(name)
    assert renders.shape[1:] == ref["mean"].shape
    assert np.all(np.isfinite(renders)) and np.all(renders >= 0)
    assert disagreements(renders, ref) == []


def test_a_wrong_image_is_detected():
    ref = np.load(HERE / "data" / "references" / "cbox_gaussian.npz")
    assert disagreements(our_renders("cbox_gaussian") * 1.03, ref) != []


def test_flat_shading_is_detected():
    """Control: the smooth meshes rendered with face normals (what jaxrender
    did before it had shading normals) disagree with Mitsuba's image."""
    def faceted(d):
        d["smooth"]["face_normals"] = d["torus"]["face_normals"] = True
    ref = np.load(HERE / "data" / "references" / "cbox_smooth_meshes.npz")
    assert disagreements(our_renders("cbox_smooth_meshes", faceted), ref) != []
