"""Analytic shapes (sphere, disk) and shading normals, tested through the
kernel's own routines against Mitsuba 3 and against their own densities:

* ray hits (distance, point, geometric and shading normal, UV) of spheres and
  disks under rotations, non-uniform scales, reflections and flip_normals,
  and of meshes with file normals, computed normals and face_normals, equal
  Mitsuba's ``ray_intersect`` for the same rays;
* BVH traversal over a mix of triangles and many spheres / disks finds the
  same closest hits as brute force, and occlusion agrees;
* sphere and disk area lights: chi-square fits of the sampled directions
  against the solid-angle pdf ``emitter_pdf`` gives MIS (sphere from outside:
  the cone; from inside a flipped sphere: by area; tiny far spheres);
* triangle-only scenes trace kernels that never read the shape buffers;
* bad parameters raise SceneError naming the key.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels import emitters, textures
from jaxrender.kernels.context import Context, Structure
from jaxrender.kernels import geometry
from jaxrender.kernels.integrators import PathIntegrator
from jaxrender.kernels.interaction import intersect
from jaxrender.primitives import launch
from jaxrender.render import kernel_inputs
from jaxrender.scene.transform import Transform as T
from test_emitters import _holder, chi2_directions, pdf, sample

MESHES = Path(__file__).resolve().parent / "data" / "meshes"


def _scalars():
    return dict(spp=np.uint32(1), max_depth=np.int32(-1),
                rr_depth=np.int32(5), hide_emitters=np.int32(0), seed=np.uint32(0))


@functools.cache
def hit_kernel(structure: Structure) -> ir.Kernel:
    """``interaction.intersect`` of rays (pts, dirs): t, p, ng, shading normal, uv."""
    inputs = dict(PathIntegrator().inputs(structure), pts=ir.In("f32", (3,)), dirs=ir.In("f32", (3,)))

    def body(**b):
        i = ir.item_index()
        c = Context.create(b, structure)
        h = intersect(c, Vec(*b["pts"][i]), Vec(*b["dirs"][i]), ir.Float(0.0))
        uv = textures.hit_uv(b, h.prim, h.b1, h.b2)
        return {"t": ir.select(h.hit, h.t, -1.0), "p": tuple(h.p), "ng": tuple(h.ng), "ns": tuple(h.frame.n),
                "uv": (uv.x, uv.y)}

    return ir.trace(body, inputs, {"t": ir.Out("f32"), "p": ir.Out("f32", (3,)), "ng": ir.Out("f32", (3,)),
                                   "ns": ir.Out("f32", (3,)), "uv": ir.Out("f32", (2,))}, name="test_hits")


def our_hits(scene, o, d) -> dict:
    structure = dataclasses.replace(scene.structure, tex_slots=1)   # (UVs computed)
    inputs = kernel_inputs(scene)
    inputs["tri_uv"] = scene.tri_uv     # UVs even without textures
    out = launch(hit_kernel(structure), (len(o),), **inputs, **_scalars(), pts=np.asarray(o, np.float32),
                 dirs=np.asarray(d, np.float32))
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def mitsuba_hits(mi, shapes: dict, o, d) -> dict:
    scene = mi.load_dict({"type": "scene", **_to_mitsuba(mi, shapes)})
    out = {k: [] for k in ("t", "p", "ng", "ns", "uv")}
    for oo, dd in zip(o, d):
        si = scene.ray_intersect(mi.Ray3f(mi.Point3f(*map(float, oo)), mi.Vector3f(*map(float, dd))))
        ok = si.is_valid()
        out["t"].append(float(si.t) if ok else -1.0)
        out["p"].append(np.array(si.p))
        out["ng"].append(np.array(si.n))
        out["ns"].append(np.array(si.sh_frame.n))
        out["uv"].append(np.array(si.uv))
    return {k: np.array(v, np.float64) for k, v in out.items()}


def _to_mitsuba(mi, x):
    if isinstance(x, T):
        return mi.ScalarTransform4f(x.matrix.tolist())
    if isinstance(x, np.ndarray):          # a gridvolume's data: (z, y, x[, channels])
        return mi.TensorXf(x if x.ndim == 4 else x[..., None])
    if isinstance(x, dict):
        return {k: _to_mitsuba(mi, v) for k, v in x.items()}
    return x


def _rays(n, seed, lo=-1.0, hi=1.0, dist=4.0):
    """Rays from a sphere of radius ``dist`` towards points of the box [lo, hi]^3."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n, 3))
    o = dist * u / np.linalg.norm(u, axis=1, keepdims=True)
    d = rng.uniform(lo, hi, (n, 3)) - o
    return o.astype(np.float32), (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)


def _sensor():
    return {"type": "perspective", "film": {"type": "hdrfilm", "width": 4, "height": 4}}


ROT = T().rotate([0.6, 0.0, 0.8], 50.0)
SHAPES = {
    "sphere": {"type": "sphere", "center": [0.1, -0.2, 0.15], "radius": 0.6},
    "sphere-rotated": {"type": "sphere", "center": [0.2, 0.1, 0.0], "radius": 0.4,
                       "to_world": T().translate([0.0, 0.1, -0.2]).rotate([0.0, 0.6, 0.8], 70.0).scale(1.5)},
    "sphere-flipped": {"type": "sphere", "radius": 0.7, "flip_normals": True, "to_world": ROT},
    "sphere-mirrored": {"type": "sphere", "to_world": T().rotate([0, 0, 1], 30).scale([-0.5, 0.5, 0.5])},
    "disk": {"type": "disk", "to_world": T().translate([0.1, 0.0, -0.1]).rotate([1.0, 0.0, 0.0], 60.0)
             .scale([0.9, 0.5, 1.0])},
    "disk-flipped": {"type": "disk", "flip_normals": True, "to_world": ROT.scale(0.8)},
    "disk-mirrored": {"type": "disk", "to_world": T().rotate([0, 1, 0], 20).scale([-0.8, 0.8, 0.8])},
    "cylinder": {"type": "cylinder", "p0": [0.1, -0.7, 0.2], "p1": [-0.2, 0.6, -0.1], "radius": 0.45},
    "cylinder-transformed": {"type": "cylinder", "radius": 0.6, "to_world": ROT.translate([0.0, 0.0, -0.8])
                             .scale([0.8, 0.8, 1.6])},
    "cylinder-flipped": {"type": "cylinder", "p0": [0.0, 0.0, -0.5], "p1": [0.0, 0.0, 0.5], "radius": 0.7,
                         "flip_normals": True},
    "cylinder-mirrored": {"type": "cylinder", "p0": [0.0, -0.6, 0.0], "p1": [0.0, 0.6, 0.0],
                          "to_world": T().rotate([0, 0, 1], 20).scale([-0.5, 1.0, 0.5])},
    "obj-normals": {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"), "to_world": ROT.scale(0.8)},
    "obj-flipped": {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"), "flip_normals": True,
                    "to_world": T().scale([0.9, 0.6, 0.8])},
    "obj-face-normals": {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"), "face_normals": True},
    "ply-computed": {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"),
                     "to_world": ROT.scale([0.7, 1.2, 0.7])},
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_hits_match_mitsuba(name):
    """t, p, geometric and shading normals and UVs of 400 rays."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    spec = SHAPES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # the mirrored sphere's (Mitsuba warns too)
        scene = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), "shape": spec})
    o, d = _rays(400, seed=len(name))
    ours = our_hits(scene, o, d)
    ref = mitsuba_hits(mi, {"shape": spec}, o, d)
    hit = ref["t"] > 0
    # (rays grazing an edge may differ; none of these do by more than a few)
    agree = (ours["t"] > 0) == hit
    assert agree.mean() > 0.99 and hit.mean() > 0.1
    both = agree & hit
    if name.startswith("cylinder"):
        # Mitsuba solves a cylinder's quadratic in double precision, we in
        # float32 (the stable form): rays within a degree of grazing differ more.
        both &= np.abs(np.sum(d * ref["ng"], axis=1)) > 0.02
    np.testing.assert_allclose(ours["t"][both], ref["t"][both], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours["p"][both], ref["p"][both], atol=2e-5)
    np.testing.assert_allclose(ours["ng"][both], ref["ng"][both], atol=2e-5)
    np.testing.assert_allclose(ours["ns"][both], ref["ns"][both], atol=1e-4)
    uv, ruv = ours["uv"][both], ref["uv"][both]
    # u wraps around at the seam (phi = 0): compare on the circle there
    du = np.abs(uv - ruv)
    du[:, 0] = np.minimum(du[:, 0], 1.0 - du[:, 0]) if name.startswith(("sphere", "cylinder")) else du[:, 0]
    if name.startswith("disk"):
        du[:, 1] = np.minimum(du[:, 1], 1.0 - du[:, 1])
    assert np.max(du) < 2e-4, np.max(du)
    if name.startswith(("obj-normals", "ply")):
        assert np.max(np.abs(ours["ns"][both] - ours["ng"][both])) > 0.05     # really smooth-shaded


@pytest.mark.parametrize("walk", [True, False])
def test_mixed_bvh_matches_brute_force(walk, monkeypatch):
    """Many spheres and disks among triangles: closest hits and occlusion
    through the BVH (walked, or each of its 40 rows tested:
    geometry.ALL_ROWS_AT_MOST) equal a brute-force loop over the same
    primitives."""
    if walk:
        monkeypatch.setattr(geometry, "ALL_ROWS_AT_MOST", 0)
    else:
        assert geometry.ALL_ROWS_AT_MOST >= 40
    hit_kernel.cache_clear()
    occluded_kernel.cache_clear()
    rng = np.random.default_rng(3)
    shapes = {}
    for k in range(40):
        c = rng.uniform(-1, 1, 3)
        if k % 2:
            shapes[f"s{k}"] = {"type": "sphere", "center": list(c), "radius": float(rng.uniform(0.02, 0.25))}
        else:
            shapes[f"d{k}"] = {"type": "disk", "to_world": T().translate(list(c)).rotate(list(rng.normal(size=3)), 70)
                               .scale(float(rng.uniform(0.05, 0.3)))}
    shapes["box"] = {"type": "cube", "to_world": T().translate([0.2, -0.3, 0.1]).scale(0.3)}
    shapes["mesh"] = {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"), "to_world": T().scale(0.8)}
    scene = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), **shapes})
    assert scene.structure.analytic and len(scene.bvh_bounds) > 20
    o, d = _rays(3000, seed=5)
    ours = our_hits(scene, o, d)
    # brute force: every shape alone in its own scene (no BVH sharing)
    best = np.full(len(o), np.inf)
    for name, spec in shapes.items():
        alone = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), name: spec})
        t = our_hits(alone, o, d)["t"]
        best = np.where((t > 0) & (t < best), t, best)
    hit = np.isfinite(best)
    assert np.array_equal(ours["t"] > 0, hit)
    np.testing.assert_allclose(ours["t"][hit], best[hit], rtol=1e-6)
    # occlusion along the same rays, up to just before / after the closest hit
    for frac, want in ((0.999, False), (1.001, True)):
        occ = occluded(scene, o[hit], d[hit], best[hit] * frac)
        assert np.array_equal(occ, np.full(hit.sum(), want))
    hit_kernel.cache_clear()
    occluded_kernel.cache_clear()


@functools.cache
def occluded_kernel(structure: Structure) -> ir.Kernel:
    inputs = dict(PathIntegrator().inputs(structure), pts=ir.In("f32", (3,)), dirs=ir.In("f32", (3,)),
                  tmax=ir.In("f32"))

    def body(**b):
        i = ir.item_index()
        c = Context.create(b, structure)
        hit = geometry.occluded(c.geo, Vec(*b["pts"][i]), Vec(*b["dirs"][i]), ir.Float(0.0), b["tmax"][i])
        return ir.select(hit, 1, 0)

    return ir.trace(body, inputs, {"hit": ir.Out("i32")}, name="test_occluded")


def occluded(scene, o, d, t_max):
    out = launch(occluded_kernel(scene.structure), (len(o),), **kernel_inputs(scene), **_scalars(), pts=o, dirs=d,
                 tmax=np.asarray(t_max, np.float32))
    return np.asarray(out["hit"]) == 1


# ---------------------------------------------------------------------------
# Area lights on spheres and disks: sampling against emitter_pdf
# ---------------------------------------------------------------------------

def _light(kind, **kw):
    return {"type": kind, "emitter": {"type": "area", "radiance": 1.0}, **kw}


def test_sphere_light_from_outside_samples_its_cone():
    """Mitsuba's visible-sphere sampling: uniform in the cone the sphere
    subtends, every sample valid, pdf integrating to 1 over the cone."""
    centre = np.array([0.3, -0.2, 1.5])
    scene = jaxrender.load_dict(_holder(ball=_light("sphere", center=list(centre), radius=0.5)))
    cos_min = math.sqrt(1.0 - (0.5 / np.linalg.norm(centre)) ** 2) - 1e-3
    z, total, success = chi2_directions(scene, [0, 0, 0], [0, 0, 1], axis=centre, cos_min=cos_min)
    assert success == 1.0
    assert abs(total - 1.0) < 0.01, total
    assert z < 4.5


def test_tiny_far_sphere_light_has_a_finite_cone_pdf():
    """A sphere subtending 1e-4 rad: the cone's 1 - cos is computed without
    cancellation, so its pdf is finite and matches 1 / solid angle."""
    r, dist = 1e-3, 10.0
    scene = jaxrender.load_dict(_holder(ball=_light("sphere", center=[0.0, 0.0, dist], radius=r)))
    s = sample(scene, [0, 0, 0], [0, 0, 1], np.random.default_rng(0).random((2000, 4), dtype=np.float32))
    solid_angle = 2 * math.pi * (1 - math.sqrt(1 - (r / dist) ** 2))
    assert np.all(np.isfinite(s["pdf"])) and np.allclose(s["pdf"], 1 / solid_angle, rtol=1e-3)
    assert np.all(np.arccos(np.clip(s["w"][:, 2], -1, 1)) <= math.asin(r / dist) * 1.01)
    p = pdf(scene, [0, 0, 0], s["w"][:50])
    np.testing.assert_allclose(p, 1 / solid_angle, rtol=1e-3)


def test_flipped_sphere_light_from_inside_samples_by_area():
    """An interior (flip_normals) sphere light around the point: sampled
    uniformly by area, every direction valid, pdf integrates to 1."""
    scene = jaxrender.load_dict(_holder(dome=_light("sphere", center=[0.2, 0.1, -0.3], radius=2.0,
                                                    flip_normals=True)))
    z, total, success = chi2_directions(scene, [0, 0, 0], [0, 0, 1], nz=20, nphi=40, sub=4)
    assert success == 1.0
    assert abs(total - 1.0) < 0.01, total
    assert z < 4.5


def test_sphere_light_sees_no_light_from_wrong_side():
    """From inside a plain sphere light, or outside a flipped one, nothing
    is emitted towards the point: no valid samples and pdf 0."""
    for spec, p in ((dict(center=[0, 0, 0], radius=2.0), [0.1, 0.2, 0.3]),
                    (dict(center=[0, 0, 2], radius=0.5, flip_normals=True), [0, 0, 0])):
        scene = jaxrender.load_dict(_holder(ball=_light("sphere", **spec)))
        s = sample(scene, p, [0, 0, 1], np.random.default_rng(1).random((1000, 4), dtype=np.float32))
        assert np.all(s["pdf"] == 0)


def test_disk_light_is_sampled_uniformly_by_area():
    """A tilted, non-uniformly scaled disk light: area sampling, back side
    excluded (flip_normals turns it to face the point)."""
    for flip in (False, True):
        tw = T().translate([0.2, 0.1, 1.4]).rotate([1.0, 0.0, 0.0], 150.0 if not flip else -30.0).scale([0.5, 0.3, 1])
        scene = jaxrender.load_dict(_holder(disk=_light("disk", to_world=tw, flip_normals=flip)))
        centre = np.array([0.2, 0.1, 1.4])
        cos_min = math.sqrt(1.0 - (0.55 / np.linalg.norm(centre)) ** 2)
        z, total, success = chi2_directions(scene, [0, 0, 0], [0, 0, 1], axis=centre, cos_min=cos_min)
        assert success == 1.0
        assert abs(total - 1.0) < 0.01, total
        assert z < 4.5


def test_cylinder_light_is_sampled_uniformly_by_area():
    """A cylinder light. Flipped, from a point inside: all of it faces the
    point, and the sampled directions fit the pdf (chi-square; directions
    out of its open ends have no light). From outside, where the density
    has an integrable singularity along the silhouettes (the midpoint rule
    cannot integrate it): its far side faces away and gives no sample, the
    valid samples are the pdf's mass, and each sample's pdf is the one MIS
    finds by hitting the cylinder along its direction."""
    inside = _light("cylinder", p0=[0.0, 0.0, -1.0], p1=[0.2, 0.1, 1.0], radius=0.5, flip_normals=True)
    z, total, success = chi2_directions(jaxrender.load_dict(_holder(tube=inside)), [0.05, 0.0, 0.1], [0, 0, 1])
    assert success == 1.0 and abs(total - 1.0) < 0.01, (total, success)
    assert z < 4.5
    outside = _light("cylinder", p0=[0.3, -0.2, 1.6], p1=[-0.1, 0.3, 2.2], radius=0.35)
    scene = jaxrender.load_dict(_holder(tube=outside))
    centre = np.array([0.1, 0.05, 1.9])
    cos_min = math.sqrt(1.0 - (0.8 / np.linalg.norm(centre)) ** 2)
    _, total, success = chi2_directions(scene, [0, 0, 0], [0, 0, 1], axis=centre, cos_min=cos_min)
    assert 0.2 < success < 0.8 and abs(total - success) < 0.01, (total, success)
    s = sample(scene, [0, 0, 0], [0, 0, 1], np.random.default_rng(3).random((4000, 4), dtype=np.float32))
    ok = s["pdf"] > 0
    hit = our_hits(scene, np.zeros((ok.sum(), 3)), s["w"][ok])
    # (not grazing, and not all at the rims: the sample is taken from a point
    # offset from p by a ray epsilon, so its direction meets the cylinder a
    # little elsewhere, or just misses it)
    facing = np.abs(np.sum(hit["ng"] * s["w"][ok], axis=1)) > 0.3
    assert facing.mean() > 0.6
    ratio = pdf(scene, [0, 0, 0], s["w"][ok])[facing] / s["pdf"][ok][facing]
    assert np.mean(np.abs(ratio - 1.0) > 5e-3) < 0.01, np.sort(ratio)


def test_analytic_lights_register_with_their_area():
    scene = jaxrender.load_dict(_holder(ball=_light("sphere", radius=0.5, center=[0, 0, 3]),
                                        disk=_light("disk", to_world=T().translate([0, 0, 4]).scale([2, 1, 1]))))
    kinds = scene.emitter_meta[:, 0].tolist()
    assert kinds == [emitters.TYPE_ID["area_sphere"], emitters.TYPE_ID["area_disk"]]
    np.testing.assert_allclose(scene.emitter_geom[:, 3], [math.pi, 2 * math.pi], rtol=1e-6)
    assert list(scene.params) == ["sensor.to_world", "sensor.x_fov", "speck.bsdf.reflectance.value", "speck.to_world",
                                  "ball.to_world", "ball.bsdf.reflectance.value", "ball.emitter.radiance.value",
                                  "disk.to_world", "disk.bsdf.reflectance.value", "disk.emitter.radiance.value"]
    # Mitsuba's default BSDF of an emitter is black; its keys are Mitsuba's
    assert np.all(scene.params["ball.bsdf.reflectance.value"] == 0)
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    d = _holder(ball=_light("sphere", radius=0.5, center=[0, 0, 3]))
    d["speck"]["to_world"] = mi.ScalarTransform4f(d["speck"]["to_world"].matrix.tolist())
    theirs = mi.traverse(mi.load_dict(d))
    assert {k for k in scene.params if k.startswith("ball")} <= set(theirs.keys())
    assert np.all(np.array(theirs["ball.bsdf.reflectance.value"]) == 0)


# ---------------------------------------------------------------------------
# Structure: triangle-only scenes pay nothing
# ---------------------------------------------------------------------------

def used_inputs(kernel: ir.Kernel) -> set:
    """Names of the input buffers the kernel's graph reads (gathers, lengths, BVH queries)."""
    names = list(kernel.inputs)
    used = {names[n.attrs[0]] for n in ir.walk(kernel.block) if n.op in ("gather", "buffer_len")}
    return used | {names[i] for n in ir.walk(kernel.block) if n.op == ir.bvh_query.OP for i in n.attrs[2:]}


def test_structure_flags_follow_the_scene():
    # (the Cornell box's gaussian filter splats into 5x5 pixels)
    diffuse = ("diffuse",)
    cbox = jaxrender.load_dict(jaxrender.cornell_box())
    assert cbox.structure == Structure(bsdfs=diffuse, footprint=5)
    d = jaxrender.cornell_box()
    d["ball"] = {"type": "sphere", "radius": 0.2}
    assert jaxrender.load_dict(d).structure == Structure(analytic=("sphere",), bsdfs=diffuse, footprint=5)
    d = jaxrender.cornell_box()
    d["torus"] = {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply")}
    assert jaxrender.load_dict(d).structure == Structure(shading_normals=True, bsdfs=diffuse, footprint=5)
    d["torus"]["face_normals"] = True
    assert jaxrender.load_dict(d).structure == Structure(bsdfs=diffuse, footprint=5)
    d = jaxrender.cornell_box()
    d["tube"] = {"type": "cylinder", "radius": 0.1}
    d["ball"] = {"type": "sphere", "radius": 0.2}
    assert jaxrender.load_dict(d).structure.analytic == ("sphere", "cylinder")


def test_kernels_trace_only_the_analytic_kinds_the_scene_has():
    """A scene's kernels hold the code of its own kinds of analytic shapes:
    a sphere alone needs no dispatch on the kind, and no disk or cylinder
    code (each kind's own correctness: test_hits_match_mitsuba, mixed kinds:
    test_mixed_bvh_matches_brute_force)."""
    def ops(kinds):
        k = PathIntegrator().primal_kernel(Structure(analytic=kinds, bsdfs=("diffuse",)))
        return [n.op for n in ir.walk(k.block)]

    every, sphere, two = ops(True), ops(("sphere",)), ops(("sphere", "disk"))
    assert Structure(analytic=True).analytic == ("sphere", "disk", "cylinder")
    # (the kinds' dispatches; the emitters' remain)
    assert every.count("dispatch") > two.count("dispatch") == sphere.count("dispatch")
    assert len(sphere) < len(two) < len(every)
    with pytest.raises(ValueError, match="unknown analytic shape"):
        Structure(analytic=("torus",))


def test_triangle_only_kernels_do_not_touch_shape_buffers():
    for structure, unused in ((Structure(), {"prim_shape", "shape_data", "tri_normals"}),
                              (Structure(analytic=True), {"tri_normals"}),
                              (Structure(shading_normals=True), {"prim_shape", "shape_data"})):
        k = PathIntegrator().primal_kernel(structure)
        used = used_inputs(k)
        assert not (used & unused), (structure, used & unused)
        # Triangles are in the 8-wide BVH; analytic shapes add the skip-link one of their own.
        wide = {"wide_nodes", "wide_leaves"}
        skip_links = {"bvh_bounds", "bvh_links"}
        assert "tris" in used and wide <= used
        assert skip_links <= used if structure.analytic else not used & skip_links, structure


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ({"type": "sphere", "radius": -1.0}, "ball.radius: must be a positive finite float"),
    ({"type": "sphere", "radius": 0.0}, "ball.radius: must be a positive finite float"),
    ({"type": "sphere", "radius": float("nan")}, "ball.radius: must be a positive finite float"),
    ({"type": "sphere", "radius": "big"}, "ball.radius: expected a positive float"),
    ({"type": "sphere", "center": [0.0, float("nan"), 0.0]}, "ball.center: expected 3 finite floats"),
    ({"type": "sphere", "center": [0.0, 1.0]}, "ball.center: expected 3 finite floats"),
    ({"type": "sphere", "to_world": np.diag([1.0, 0.0, 1.0, 1.0])}, "ball.to_world: the transform is singular"),
    ({"type": "disk", "to_world": np.diag([1.0, 1.0, 0.0, 1.0])}, "ball.to_world: the transform is singular"),
    ({"type": "disk", "to_world": np.full((4, 4), np.nan)}, "ball: to_world must be a finite 4x4 matrix"),
])
def test_bad_shape_parameters_raise(spec, message):
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict({"type": "scene", "sensor": _sensor(), "ball": spec})


def test_non_uniform_sphere_warns_like_mitsuba():
    with pytest.warns(UserWarning, match="ball.to_world: a sphere's transform should not contain non-uniform"):
        jaxrender.load_dict({"type": "scene", "sensor": _sensor(),
                             "ball": {"type": "sphere", "to_world": T().scale([1.0, 2.0, 1.0])}})


def test_xml_sphere_and_disk(tmp_path):
    xml = tmp_path / "s.xml"
    xml.write_text("""<scene version="3.0.0">
  <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="4"/>
    <integer name="height" value="4"/></film></sensor>
  <shape type="sphere" id="ball"><point name="center" x="0" y="1" z="2"/><float name="radius" value="0.5"/>
    <boolean name="flip_normals" value="true"/></shape>
  <shape type="disk" id="lid"><transform name="to_world"><scale value="2"/><translate z="3"/></transform>
    <emitter type="area"><rgb name="radiance" value="1 2 3"/></emitter></shape>
</scene>""")
    scene = jaxrender.load_file(str(xml))
    ball, lid = scene.shapes
    np.testing.assert_allclose(ball.center, [0, 1, 2])
    assert ball.radius == 0.5 and ball.flip
    np.testing.assert_allclose(lid.center, [0, 0, 3])
    np.testing.assert_allclose(lid.area, 4 * math.pi)
    np.testing.assert_allclose(scene.params["lid.emitter.radiance.value"], [1, 2, 3])


def test_cylinders_render_like_mitsuba():
    """A diffuse cylinder and a cylinder light in the Cornell box, against
    Mitsuba's renders within noise."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    from test_film import _agree, _mitsuba_renders, _ours_renders
    d = jaxrender.cornell_box()
    d["sensor"]["film"].update(width=20, height=20)
    d["integrator"] = {"type": "path", "max_depth": 3}
    d["tube"] = {"type": "cylinder", "p0": [0.3, -1.0, 0.2], "p1": [0.1, 0.2, -0.3], "radius": 0.2,
                 "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.2, 0.6, 0.3]}}}
    d["neon"] = {"type": "cylinder", "p0": [-0.6, 0.6, 0.0], "p1": [-0.2, 0.7, 0.4], "radius": 0.05,
                 "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [6.0, 4.0, 2.0]}}}
    _agree(_ours_renders(d, 16, 6), _mitsuba_renders(d, 16, 6, seed0=50))


@pytest.mark.parametrize("kind", ["sphere", "disk", "cylinder"])
def test_material_coordinates_give_back_the_point(kind):
    """A moving shape's point keeps its material coordinates
    (``shapes.<kind>.material_coords``) and is placed again from them
    (``material_point``): the two are inverse on the shape, to float32
    rounding, over random points and the sphere's poles, equator and
    octant seams (where its octahedral map folds), signed zeros too."""
    from jaxrender.kernels.shapes import cylinder, disk, sphere
    module = {"sphere": sphere, "disk": disk, "cylinder": cylinder}[kind]
    rng = np.random.default_rng(11)
    if kind == "sphere":
        p = rng.normal(size=(4000, 3))
        special = [(0, 0, 1), (0, 0, -1), (1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0.6, 0.8, 0.0),
                   (-0.0, 0.6, -0.8), (0.6, -0.0, -0.8), (-0.6, 0.0, -0.8), (0.0, -0.6, -0.8), (1e-7, 1e-7, -1.0),
                   (0.7071068, 0.0, -0.7071068), (-0.5, -0.5, -0.7071068), (1e-30, -1.0, 1e-30)]
        p = np.concatenate([p / np.linalg.norm(p, axis=1, keepdims=True), np.array(special)])
    elif kind == "disk":
        r, a = np.sqrt(rng.uniform(size=4000)), rng.uniform(0, 2 * np.pi, 4000)
        p = np.stack([r * np.cos(a), r * np.sin(a), np.zeros_like(r)], axis=1)
    else:
        a = np.concatenate([rng.uniform(-np.pi, np.pi, 4000), [0.0, np.pi, -np.pi / 2, np.pi / 2]])
        p = np.stack([np.cos(a), np.sin(a), rng.uniform(0, 1, len(a))], axis=1)
    p = p.astype(np.float32)

    def body(x):
        c1, c2 = module.material_coords(Vec(*x[ir.item_index()]))
        return {"q": tuple(module.material_point(c1, c2))}
    k = ir.trace(body, {"x": ir.In("f32", (3,))}, {"q": ir.Out("f32", (3,))}, name=f"material_{kind}")
    q = np.asarray(launch(k, (len(p),), x=p)["q"])
    np.testing.assert_allclose(q, p, atol=1e-6, rtol=0)


def test_few_triangles_share_the_analytic_shapes_bvh():
    """Beside analytic shapes, up to SKIP_LINK_TRIANGLES triangles stay in
    the shapes' skip-link BVH (the wide one is empty); more go to the wide
    BVH and the skip-link one holds the shapes alone. Both see the same."""
    from jaxrender.scene.geometry import SKIP_LINK_TRIANGLES
    ball = {"type": "sphere", "center": [0.3, -0.5, 0.2], "radius": 0.3, "bsdf": {"type": "ref", "id": "white"}}
    many = jaxrender.load_dict({**jaxrender.cornell_box(), "ball": ball})
    assert len(many.triangles) - 1 > SKIP_LINK_TRIANGLES
    assert many.wide_bvh[1].shape[0] > 0 and int(many.bvh_links[:, 2].sum()) == 1
    few = jaxrender.cornell_box()
    few = {k: v for k, v in few.items() if k not in ("small-box", "large-box", "back", "left", "right")}
    few["ball"] = ball
    scene = jaxrender.load_dict(few)
    assert len(scene.triangles) - 1 <= SKIP_LINK_TRIANGLES
    assert scene.wide_bvh[1].shape[0] == 0 and int(scene.bvh_links[:, 2].sum()) == len(scene.triangles)
    assert np.isfinite(np.asarray(jaxrender.render(scene, spp=4))).all()


@pytest.mark.parametrize("cubes, instanced", [(1, False), (2, False), (2, True)])
def test_few_rows_are_each_tested_as_the_walk_finds_them(cubes, instanced, monkeypatch):
    """Where the skip-link BVH holds at most geometry.ALL_ROWS_AT_MOST rows
    (every row: 14 triangles and three shapes; or, 26 triangles being in
    the wide BVH, the three shapes; then with a shapegroup's rows after
    theirs), a query tests each row, all lanes alike: closest hits (t,
    point, normals, UVs) and occlusion equal the walk's bit for bit."""
    spec = {"plane": {"type": "rectangle", "to_world": T().translate([0.0, -0.9, 0.0]).rotate([1, 0, 0], -80)},
            "ball": {"type": "sphere", "center": [0.3, -0.2, 0.2], "radius": 0.35},
            "disk": {"type": "disk", "to_world": T().translate([-0.4, 0.3, 0.1]).rotate([0, 1, 0], 35).scale(0.4)},
            "tube": {"type": "cylinder", "p0": [0.5, 0.4, -0.6], "p1": [-0.5, 0.6, -0.2], "radius": 0.2}}
    for k in range(cubes):
        spec[f"box{k}"] = {"type": "cube", "to_world": T().translate([-0.3 + 0.5 * k, -0.4, -0.3]).scale(0.25)}
    if instanced:
        spec["g"] = {"type": "shapegroup", "egg": {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj")}}
        for k, x in enumerate((-0.6, 0.6)):
            spec[f"egg{k}"] = {"type": "instance", "shapegroup": {"type": "ref", "id": "g"},
                               "to_world": T().translate([x, 0.5, 0.4]).scale(0.2)}
    scene = jaxrender.load_dict({"type": "scene", "sensor": _sensor(), **spec})
    assert scene.structure.instanced == instanced
    rows = int(scene.bvh_links[:, 2].sum())
    assert rows == (17 if cubes == 1 else 3) and rows <= geometry.ALL_ROWS_AT_MOST
    o, d = _rays(2000, seed=11)
    each = our_hits(scene, o, d)
    hit = each["t"] > 0
    assert 0.3 < hit.mean() < 0.95
    t_max = np.where(hit, each["t"], 10.0) * np.where(np.arange(len(o)) % 2, 0.999, 1.001)
    each_occluded = occluded(scene, o, d, t_max)
    monkeypatch.setattr(geometry, "ALL_ROWS_AT_MOST", 0)
    hit_kernel.cache_clear()
    occluded_kernel.cache_clear()
    try:
        walked = our_hits(scene, o, d)
        walked_occluded = occluded(scene, o, d, t_max)
    finally:
        hit_kernel.cache_clear()
        occluded_kernel.cache_clear()
    for k in each:
        assert each[k].tobytes() == walked[k].tobytes(), k
    assert np.array_equal(each_occluded, walked_occluded) and each_occluded.any() and not each_occluded.all()
