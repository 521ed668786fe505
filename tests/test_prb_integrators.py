"""Mitsuba's path replay integrators by name (``prb``, ``prb_projective``,
``direct_projective``): scenes written for Mitsuba's inverse rendering load
and render with the path tracer's kernels, with Mitsuba's defaults and
roulette, and what those integrators do differently (their sample counts,
guiding, null BSDFs, polarization) is an error, not a plausible image.

Against something we did not write: Mitsuba 3's Cornell-box reference
image (its path tracer's, which its prb equals in expectation), and its
sources' defaults and roulette rule (``ADIntegrator``: max_depth 6,
roulette from vertex index rr_depth counted from 0).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import jaxrender
from jaxrender.kernels import integrators
from jaxrender.scene.errors import SceneError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "references"))

from scenes import VARIANTS  # noqa: E402
from test_render_reference import disagreements, our_renders  # noqa: E402


def _box(integrator: dict, size: int = 16) -> dict:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    d["integrator"] = integrator
    return d


def test_prb_matches_mitsubas_reference_image():
    """prb (max_depth 8 as the reference's path tracer) within noise of
    Mitsuba's Cornell-box image; a 3% brighter image is rejected."""
    ref = np.load(HERE / "data" / "references" / "cbox_gaussian.npz")
    assert VARIANTS["cbox_gaussian"](jaxrender.cornell_box())["integrator"]["max_depth"] == 8
    renders = our_renders("cbox_gaussian", lambda d: d.update(integrator={"type": "prb", "max_depth": 8}))
    assert disagreements(renders, ref) == []
    assert disagreements(renders * 1.03, ref) != []


def test_mitsubas_defaults_and_roulette():
    """prb's max_depth is 6 unless given, and its roulette starts one vertex
    later than the path tracer's for the same rr_depth: the image is the
    path tracer's with max_depth 6 and rr_depth + 1, bit for bit, and
    differs from the one with the same rr_depth."""
    scene = jaxrender.load_dict(_box({"type": "prb", "rr_depth": 2}))
    assert scene.integrator == {"type": "prb", "max_depth": 6, "rr_depth": 2}
    image = np.asarray(jaxrender.render(scene, spp=4, seed=7))
    same = jaxrender.load_dict(_box({"type": "path", "max_depth": 6, "rr_depth": 3}))
    np.testing.assert_array_equal(image, np.asarray(jaxrender.render(same, spp=4, seed=7)))
    earlier = jaxrender.load_dict(_box({"type": "path", "max_depth": 6, "rr_depth": 2}))
    assert not np.array_equal(image, np.asarray(jaxrender.render(earlier, spp=4, seed=7)))
    projective = jaxrender.load_dict(_box({"type": "prb_projective", "rr_depth": 2}))
    np.testing.assert_array_equal(image, np.asarray(jaxrender.render(projective, spp=4, seed=7)))


def test_direct_projective_is_the_direct_integrator():
    """direct_projective is the direct integrator's object and settings, so
    its kernels, images and derivatives (geometry included) are the direct
    integrator's; the image is checked bit for bit."""
    projective, direct = ({"type": "direct_projective", "hide_emitters": True},
                          {"type": "direct", "hide_emitters": True})
    assert integrators.create(projective) == integrators.create(direct)
    assert integrators.create(projective).settings(projective) == integrators.create(direct).settings(direct)
    images = [np.asarray(jaxrender.render(jaxrender.load_dict(_box(i)), spp=2, seed=3)) for i in (projective, direct)]
    np.testing.assert_array_equal(*images)


@pytest.mark.parametrize("integrator, message", [
    ({"type": "prb", "sppc": 32}, "sppc"),
    ({"type": "prb_projective", "sppp": 32}, "sppp"),
    ({"type": "direct_projective", "sppi": 128}, "sppi"),
    ({"type": "prb_projective", "guiding": "octree"}, "guiding"),
    ({"type": "prb_projective", "guiding_rounds": 2}, "guiding_rounds"),
    ({"type": "direct_projective", "project_seed": "bsdf"}, "project_seed"),
    ({"type": "direct_projective", "max_depth": 4}, "direct illumination"),
    ({"type": "prb", "rr_depth": 0}, "greater than zero"),
    ({"type": "prb", "max_depth": -2}, "-1"),
    ({"type": "prb", "max_dept": 4}, "max_dept"),
    ({"type": "prb_basic"}, "prb_basic"),
])
def test_what_they_do_differently_raises(integrator, message):
    with pytest.raises(SceneError, match=message):
        jaxrender.load_dict(_box(integrator))


def test_polarized_variants_raise_as_mitsuba():
    d = _box({"type": "prb"})
    with pytest.raises(SceneError, match="polarized"):
        jaxrender.load_dict(d, variant="spectral_polarized")


def test_null_bsdfs_raise():
    """Mitsuba's prb counts a path that only passed through null components
    (its path tracer does not): a mask in the scene is an error."""
    d = _box({"type": "prb"})
    d["small-box"]["bsdf"] = {"type": "mask", "opacity": 0.5, "bsdf": d["small-box"]["bsdf"]}
    scene = jaxrender.load_dict(d)
    with pytest.raises(SceneError, match="pass-through"):
        jaxrender.render(scene, spp=1)
