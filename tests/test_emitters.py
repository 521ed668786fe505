"""Emitter sampling in the path kernel, tested through the kernel's own
routines (``emitters.sample`` and ``emitters.pdf``, which MIS
uses for directions that hit an emitter):

* chi-square fits of sampled directions against the solid-angle pdf the
  kernel assigns to them, integrated over cells of a cone around the
  emitter (area lights: triangles of unequal area chosen by their CDF, back
  faces rejected) or of the whole sphere (the constant environment);
* delta emitters (point, spot, directional) against Mitsuba 3's
  ``sample_direction``: direction, distance and radiance weight, for spot
  lights with a scaled / rotated ``to_world`` across the falloff;
* the uniform choice among emitters;
* bad spot parameters raise SceneError naming the key.
"""
from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels import emitters
from jaxrender.kernels.context import Context, Structure
from jaxrender.kernels.integrators import PathIntegrator
from jaxrender.kernels.interaction import SurfaceInteraction, intersect
from jaxrender.kernels.sampling import INV_FOUR_PI, Frame
from jaxrender.primitives import launch
from jaxrender.render import kernel_inputs
from jaxrender.scene.transform import Transform as T
from test_sampling import chi2_reject

N = 200_000


INPUTS = PathIntegrator().inputs()


def _scalars():
    return dict(spp=np.uint32(1), max_depth=np.int32(-1),
                rr_depth=np.int32(5), hide_emitters=np.int32(0), seed=np.uint32(0))


@functools.cache
def sample_kernel(structure: Structure = Structure()) -> ir.Kernel:
    """``emitters.sample`` at surface points ``pts`` with normals
    ``nrm`` (the ray arrived against the normal) for random numbers ``u``,
    for scenes of the given structure."""
    inputs = dict(INPUTS, pts=ir.In("f32", (3,)), nrm=ir.In("f32", (3,)), u=ir.In("f32", (4,)))

    def body(**b):
        i = ir.item_index()
        c = Context.create(b, structure)
        p, n = Vec(*b["pts"][i]), Vec(*b["nrm"][i])
        scale = 1e-4 * (1.0 + ir.maximum(ir.maximum(ir.abs(p.x), ir.abs(p.y)), ir.abs(p.z)))
        h = SurfaceInteraction(ir.Float(1.0), ir.Int(-1), ir.Float(0.0), ir.Float(0.0), -n, ir.Bool(True), p, n, Frame(n), Vec(0.0, 0.0, 1.0), ir.Int(0),
                      ir.Int(-1), ir.Bool(False), ir.Float(1.0), scale)
        es = emitters.sample(c, h, -n, b["u"][i])
        return {"w": tuple(es.w), "dist": es.dist, "factor": es.factor, "pdf": es.pdf,
                "delta": ir.select(es.delta, 1.0, 0.0), "sel": ir.cast(es.sel, "f32")}

    return ir.trace(body, inputs, {"w": ir.Out("f32", (3,)), "dist": ir.Out("f32"), "factor": ir.Out("f32"),
                                   "pdf": ir.Out("f32"), "delta": ir.Out("f32"), "sel": ir.Out("f32")},
                    name="test_sample_emitter")


@functools.cache
def pdf_kernel(structure: Structure = Structure()) -> ir.Kernel:
    """``emitters.pdf`` of rays from ``pts`` along ``dirs`` where they
    see emitted radiance (0 elsewhere)."""
    inputs = dict(INPUTS, pts=ir.In("f32", (3,)), dirs=ir.In("f32", (3,)))

    def body(**b):
        i = ir.item_index()
        c = Context.create(b, structure)
        h = intersect(c, Vec(*b["pts"][i]), Vec(*b["dirs"][i]), ir.Float(0.0))
        sees = ir.select(h.hit, h.is_emitter & (h.cos_l > 0.0), b["env_emitter"].value >= 0)
        return ir.select(sees, emitters.pdf(c, h, ir.Float(INV_FOUR_PI)), 0.0)

    return ir.trace(body, inputs, {"pdf": ir.Out("f32")}, name="test_emitter_pdf")


def sample(scene, p, n, u) -> dict:
    k = len(u)
    out = launch(sample_kernel(scene.structure), (k,), **kernel_inputs(scene), **_scalars(),
                 pts=np.tile(np.asarray(p, np.float32), (k, 1)), nrm=np.tile(np.asarray(n, np.float32), (k, 1)),
                 u=np.asarray(u, np.float32))
    return {key: np.asarray(v, np.float64) for key, v in out.items()}


def pdf(scene, p, dirs) -> np.ndarray:
    out = launch(pdf_kernel(scene.structure), (len(dirs),), **kernel_inputs(scene), **_scalars(),
                 pts=np.tile(np.asarray(p, np.float32), (len(dirs), 1)), dirs=np.asarray(dirs, np.float32))
    return np.asarray(out["pdf"], np.float64)


def _frame(axis):
    a = np.asarray(axis, np.float64)
    a = a / np.linalg.norm(a)
    t = np.cross(a, [1.0, 0.0, 0.0] if abs(a[0]) < 0.9 else [0.0, 1.0, 0.0])
    t /= np.linalg.norm(t)
    return np.stack([t, np.cross(a, t), a])     # rows: s, t, n


def chi2_directions(scene, p, n, axis=(0.0, 0.0, 1.0), cos_min=-1.0, nz=16, nphi=32, sub=16, seed=0):
    """Sample N emitter directions at ``p`` and compare the histogram over
    (cos theta, phi) cells around ``axis`` (cos theta >= cos_min) with the
    kernel's pdf integrated over each cell (midpoint rule, sub x sub points).
    Returns (z, pdf integral, fraction of successful samples)."""
    u = np.random.default_rng(seed).random((N, 4), dtype=np.float32)
    s = sample(scene, p, n, u)
    ok = (s["pdf"] > 0) & (s["delta"] == 0)
    fr = _frame(axis)
    local = s["w"][ok] @ fr.T
    assert np.all(local[:, 2] >= cos_min), "samples outside the tested cone"
    z_edges = np.linspace(cos_min, 1.0, nz + 1)
    phi_edges = np.linspace(-math.pi, math.pi, nphi + 1)
    hist, _, _ = np.histogram2d(np.clip(local[:, 2], cos_min, 1.0), np.arctan2(local[:, 1], local[:, 0]),
                                bins=[z_edges, phi_edges])
    zz = cos_min + (np.arange(nz * sub) + 0.5) * (1.0 - cos_min) / (nz * sub)
    pp = -math.pi + (np.arange(nphi * sub) + 0.5) * 2 * math.pi / (nphi * sub)
    Z, P = np.meshgrid(zz, pp, indexing="ij")
    r = np.sqrt(np.maximum(0.0, 1.0 - Z * Z))
    d_local = np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3)
    q = pdf(scene, p, d_local @ fr)
    cell = (1.0 - cos_min) / (nz * sub) * 2 * math.pi / (nphi * sub)
    integral = (q.reshape(Z.shape) * cell).reshape(nz, sub, nphi, sub).sum((1, 3))
    _, _, z = chi2_reject(hist.ravel(), integral.ravel() * N)
    return z, integral.sum(), ok.mean()


def _holder(**extra) -> dict:
    """A scene with a sensor and, far away and tiny, one non-emitting triangle
    pair (a scene needs a shape)."""
    d = {"type": "scene",
         "sensor": {"type": "perspective", "film": {"type": "hdrfilm", "width": 4, "height": 4}},
         "speck": {"type": "rectangle", "to_world": T().translate([0.0, 0.0, -50.0]).scale(1e-3)}}
    d.update(extra)
    return d


EMISSIVE_BOX = {"type": "cube", "emitter": {"type": "area", "radiance": 1.0},
                "to_world": T().translate([0.2, -0.1, 1.6]).rotate([0.6, 0.8, 0.0], 35).scale([0.35, 0.15, 0.25])}


def test_area_light_sampling_matches_its_solid_angle_pdf():
    """A box of 12 triangles of three different areas: triangles are chosen
    by area, points uniformly; samples on faces turned away fail (pdf 0),
    and the pdf integrates to the fraction that succeeds."""
    scene = jaxrender.load_dict(_holder(box=EMISSIVE_BOX))
    p, n = [0.0, 0.0, 0.0], [0.0, 0.3, 1.0]
    n = list(np.asarray(n) / np.linalg.norm(n))
    centre = np.array([0.2, -0.1, 1.6])
    dist = np.linalg.norm(centre)
    cos_min = math.sqrt(1.0 - (0.5 / dist) ** 2)    # a cone enclosing the box
    z, total, success = chi2_directions(scene, p, n, axis=centre, cos_min=cos_min)
    assert 0.3 < success < 0.7
    assert abs(total - success) < 0.01, (total, success)
    assert z < 4.5


def test_rectangle_light_from_behind_gives_no_samples():
    light = {"type": "rectangle", "emitter": {"type": "area", "radiance": 1.0},
             "to_world": T().translate([0.0, 0.0, 2.0])}      # faces +z, away from the origin
    scene = jaxrender.load_dict(_holder(light=light))
    s = sample(scene, [0, 0, 0], [0, 0, 1], np.random.default_rng(1).random((1000, 4), dtype=np.float32))
    assert np.all(s["pdf"] == 0)


def test_constant_environment_sampling_matches_its_pdf():
    scene = jaxrender.load_dict(_holder(sky={"type": "constant"}))
    z, total, success = chi2_directions(scene, [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], nz=20, nphi=40, sub=4)
    assert success == 1.0
    assert abs(total - 1.0) < 1e-3
    assert z < 4.5


def test_wrong_pdf_is_detected():
    """Control: the same check rejects samples drawn from a different density
    (area samples of the box compared against the box with its faces'
    areas changed)."""
    scene = jaxrender.load_dict(_holder(box=EMISSIVE_BOX))
    other = dict(EMISSIVE_BOX, to_world=T().translate([0.2, -0.1, 1.6]).rotate([0.6, 0.8, 0.0], 35).scale([0.35, 0.2, 0.25]))
    p, n = [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]
    u = np.random.default_rng(0).random((N, 4), dtype=np.float32)
    s = sample(scene, p, n, u)
    ok = s["pdf"] > 0
    # histogram of our samples against the pdf of the other box, as in chi2_directions
    fr = _frame([0.2, -0.1, 1.6])
    local = s["w"][ok] @ fr.T
    cos_min = math.sqrt(1.0 - (0.5 / np.linalg.norm([0.2, -0.1, 1.6])) ** 2)
    nz, nphi, sub = 16, 32, 16
    hist, _, _ = np.histogram2d(local[:, 2], np.arctan2(local[:, 1], local[:, 0]),
                                bins=[np.linspace(cos_min, 1, nz + 1), np.linspace(-math.pi, math.pi, nphi + 1)])
    zz = cos_min + (np.arange(nz * sub) + 0.5) * (1.0 - cos_min) / (nz * sub)
    pp = -math.pi + (np.arange(nphi * sub) + 0.5) * 2 * math.pi / (nphi * sub)
    Z, P = np.meshgrid(zz, pp, indexing="ij")
    r = np.sqrt(1.0 - Z * Z)
    d = np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3) @ fr
    q = pdf(jaxrender.load_dict(_holder(box=other)), p, d)
    integral = (q.reshape(Z.shape)).reshape(nz, sub, nphi, sub).sum((1, 3)) * (
        (1.0 - cos_min) / (nz * sub) * 2 * math.pi / (nphi * sub))
    expected = integral.ravel() / integral.sum() * ok.sum()
    assert chi2_reject(hist.ravel(), expected)[2] > 4.5


def test_emitters_are_chosen_uniformly():
    scene = jaxrender.load_dict(_holder(box=EMISSIVE_BOX, sky={"type": "constant"},
                                        bulb={"type": "point", "position": [0, 1, 0]},
                                        spot={"type": "spot", "to_world": T().translate([1, 0, 0])}))
    s = sample(scene, [0, 0, 0], [0, 0, 1], np.random.default_rng(2).random((40_000, 4), dtype=np.float32))
    counts = np.bincount(s["sel"].astype(int), minlength=4)
    assert chi2_reject(counts.astype(float), np.full(4, len(s["sel"]) / 4.0))[2] < 4.5
    # delta emitters report delta samples; the others positive densities
    kinds = scene.emitter_meta[s["sel"].astype(int), 0]
    delta = np.isin(kinds, [emitters.TYPE_ID["point"], emitters.TYPE_ID["spot"]])
    assert np.all(s["delta"][delta] == 1) and np.all(s["delta"][~delta] == 0)


# ---------------------------------------------------------------------------
# Delta emitters against Mitsuba's sample_direction
# ---------------------------------------------------------------------------

def _spot_matrix():
    return np.array(T().look_at(origin=[0.2, 1.0, -0.1], target=[0.0, 0.0, 0.1], up=[0, 0, 1])
                    .rotate([0, 0, 1], 20).scale([1.0, 1.3, 0.7]).matrix)


DELTA_EMITTERS = {
    "spot": {"type": "spot", "cutoff_angle": 35.0, "intensity": {"type": "rgb", "value": [1.0, 2.0, 3.0]}},
    "spot-sharp": {"type": "spot", "cutoff_angle": 25.0, "beam_width": 25.0,
                   "intensity": {"type": "rgb", "value": [0.5, 0.5, 2.0]}},
    "spot-wide": {"type": "spot", "cutoff_angle": 120.0, "beam_width": 10.0},
    "point": {"type": "point", "position": [0.1, 0.9, 0.2], "intensity": {"type": "rgb", "value": [3.0, 2.0, 1.0]}},
    "directional": {"type": "directional", "direction": [0.3, -1.0, 0.2], "irradiance": 2.5},
}


@pytest.mark.parametrize("name", sorted(DELTA_EMITTERS))
def test_delta_emitters_match_mitsuba(name):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    spec = dict(DELTA_EMITTERS[name])
    if spec["type"] == "spot":
        spec["to_world"] = _spot_matrix()
    scene = jaxrender.load_dict(_holder(light=spec))
    mspec = dict(spec)
    if "to_world" in mspec:
        mspec["to_world"] = mi.ScalarTransform4f(mspec["to_world"].tolist())
    em = mi.load_dict(mspec)
    rng = np.random.default_rng(5)
    pts = rng.uniform([-1.0, -0.5, -1.0], [1.0, 0.3, 1.0], (300, 3)).astype(np.float32)
    out = launch(sample_kernel(), (len(pts),), **kernel_inputs(scene), **_scalars(), pts=pts,
                 nrm=np.tile(np.float32([0, 1, 0]), (len(pts), 1)), u=rng.random((len(pts), 4), dtype=np.float32))
    w = np.asarray(out["w"], np.float64)
    value = np.asarray(out["factor"], np.float64)[:, None] * np.asarray(scene.params[scene.emitter_keys[0]], np.float64)
    it = mi.Interaction3f()
    lit = 0
    for k, p in enumerate(pts):
        # our shading point sits 1e-4 (relative) above the surface along the normal
        it.p = mi.Point3f(*map(float, p + np.float32([0, 1, 0]) * 1e-4 * (1 + np.abs(p).max())))
        ds, spec_ref = em.sample_direction(it, mi.Point2f(0.5, 0.5))
        ref = np.array(spec_ref, np.float64)
        np.testing.assert_allclose(w[k], np.array(ds.d), atol=2e-5)
        np.testing.assert_allclose(value[k], ref, rtol=2e-4, atol=2e-4 * (1 + np.abs(ref).max()))
        lit += ref.max() > 0
    assert out["delta"].min() == 1.0
    assert lit > 20      # the test sees the emitter's light, not only its zeros


@pytest.mark.parametrize("spot, message", [
    ({"cutoff_angle": 0.0}, "light.cutoff_angle: must be in (0, 180] degrees"),
    ({"cutoff_angle": 200.0}, "light.cutoff_angle: must be in (0, 180] degrees"),
    ({"cutoff_angle": 20.0, "beam_width": 30.0}, "light.beam_width: must be in [0, cutoff_angle = 20.0]"),
    ({"beam_width": -1.0}, "light.beam_width: must be in [0"),
    ({"cutoff_angle": "wide"}, "light.cutoff_angle: expected a finite float"),
    ({"texture": {"type": "bitmap", "filename": "x.png"}}, "light.texture: textured spot lights"),
    ({"to_world": np.diag([1.0, 0.0, 1.0, 1.0])}, "light.to_world: the transform is singular"),
])
def test_bad_spot_parameters_raise(spot, message):
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(_holder(light={"type": "spot", **spot}))


def test_spot_intensity_is_a_parameter():
    scene = jaxrender.load_dict(_holder(light={"type": "spot", "intensity": 2.0}))
    assert np.allclose(scene.params["light.intensity.value"], 2.0)
