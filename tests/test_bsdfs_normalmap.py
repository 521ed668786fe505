"""Mitsuba's normalmap and bumpmap BSDFs.

* eval / pdf / sample at real hits of a loaded scene (a rectangle, a mesh
  with vertex normals and a sphere, under rotations), through
  ``interaction.intersect`` and ``SurfaceBsdf`` as the path tracer runs
  them, against Mitsuba's ``scalar_rgb`` (``ray_intersect`` and the BSDF),
  compared in world coordinates (the two local frames differ);
* the bitmap's uv gradient (bumpmap) against Mitsuba's ``eval_1_grad``;
* images within noise of Mitsuba's path tracer;
* the normal map's derivative against finite differences;
* traverse keys, loader errors, unchanged kernels of other scenes.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import jaxrender
from bsdf_harness import rgb
from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels.bsdfs.surface import SurfaceBsdf
from jaxrender.kernels.context import Context
from jaxrender.kernels.integrators import PathIntegrator
from jaxrender.kernels.interaction import intersect
from jaxrender.primitives import launch
from jaxrender.render import kernel_inputs
from jaxrender.scene.errors import SceneError
from jaxrender.scene.transform import Transform as T
from test_film import _agree, _mitsuba_renders, _ours_renders

mi = pytest.importorskip("mitsuba")


def write_png(path, img: np.ndarray) -> str:
    """An 8-bit RGB (or grey) PNG of ``img`` in [0, 1]."""
    from PIL import Image
    a = np.clip(np.round(img * 255), 0, 255).astype(np.uint8)
    Image.fromarray(a if a.ndim == 2 else a, "L" if a.ndim == 2 else "RGB").save(path)
    return str(path)


def normal_image(n=8, seed=1, tilt=0.6) -> np.ndarray:
    """A tangent-space normal map (as 0.5 n + 0.5) of random tilted normals."""
    r = np.random.default_rng(seed)
    xy = r.uniform(-tilt, tilt, (n, n, 2))
    v = np.concatenate([xy, np.ones((n, n, 1))], axis=2)
    v /= np.linalg.norm(v, axis=2, keepdims=True)
    return 0.5 * v + 0.5


def height_image(n=8, seed=2) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (n, n))


@functools.cache
def hit_query_kernel(structure) -> ir.Kernel:
    """At the first hit of ray (o, d): SurfaceBsdf.query of the world
    direction wo and random numbers u; outputs in world coordinates."""
    inputs = dict(PathIntegrator().inputs(), o=ir.In("f32", (3,)), d=ir.In("f32", (3,)), wo=ir.In("f32", (3,)),
                  u=ir.In("f32", (3,)))

    def body(**b):
        i = ir.item_index()
        ctx = Context.create(b, structure)
        si = intersect(ctx, Vec(*b["o"][i]), Vec(*b["d"][i]), ir.Float(0.0))
        uu = b["u"][i]
        f, pdf, s = SurfaceBsdf(ctx, si).query(si.frame.to_local(Vec(*b["wo"][i])), uu[0], Vec(uu[1], uu[2]))
        return {"eval": tuple(f), "pdf": pdf, "s_wo": tuple(si.frame.to_world(s.wo)), "s_pdf": s.pdf,
                "s_weight": tuple(s.weight), "hit": ir.select(si.hit, 1.0, 0.0)}
    out = {"eval": ir.Out("f32", (3,)), "pdf": ir.Out("f32"), "s_wo": ir.Out("f32", (3,)), "s_pdf": ir.Out("f32"),
           "s_weight": ir.Out("f32", (3,)), "hit": ir.Out("f32")}
    return ir.trace(body, inputs, out, name="normalmap_query" + structure.suffix())


def _scalars():
    return dict(spp=np.uint32(1), max_depth=np.int32(-1), rr_depth=np.int32(5), hide_emitters=np.int32(0),
                seed=np.uint32(0))


def our_query(d: dict, o, dirs, wo, u) -> dict:
    scene = jaxrender.load_dict(d)
    out = launch(hit_query_kernel(scene.structure), (len(o),), **kernel_inputs(scene), **_scalars(),
                 o=o, d=dirs, wo=wo, u=u)
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def mitsuba_query(d: dict, o, dirs, wo, u) -> dict:
    from test_scene_parsing import to_mitsuba
    mi.set_variant("scalar_rgb")
    scene = mi.load_dict(to_mitsuba(mi, d))
    ctx = mi.BSDFContext()
    out = {k: [] for k in ("eval", "pdf", "s_wo", "s_pdf", "s_weight", "hit")}
    for oo, dd, w, uu in zip(o, dirs, wo, u):
        si = scene.ray_intersect(mi.Ray3f(mi.Point3f(*map(float, oo)), mi.Vector3f(*map(float, dd))))
        out["hit"].append(float(si.is_valid()))
        if not si.is_valid():
            for k in ("eval", "pdf", "s_wo", "s_pdf", "s_weight"):
                out[k].append(np.zeros(3) if k in ("eval", "s_wo", "s_weight") else 0.0)
            continue
        bsdf = si.bsdf()
        wl = si.to_local(mi.Vector3f(*map(float, w)))
        out["eval"].append(np.array(bsdf.eval(ctx, si, wl)))
        out["pdf"].append(float(bsdf.pdf(ctx, si, wl)))
        bs, weight = bsdf.sample(ctx, si, float(uu[0]), mi.Point2f(float(uu[1]), float(uu[2])))
        out["s_wo"].append(np.array(si.to_world(bs.wo)))
        out["s_pdf"].append(float(bs.pdf))
        out["s_weight"].append(np.array(weight))
    return {k: np.array(v, np.float64) for k, v in out.items()}


def rays(n, seed, target=0.8, dist=3.0, spread=1.0):
    """Rays from the +z hemisphere (``spread``: how far from the pole) onto [-target, target]^2 x 0."""
    r = np.random.default_rng(seed)
    v = r.normal(size=(n, 3))
    v[:, :2] *= spread
    v[:, 2] = np.abs(v[:, 2]) + 0.2
    o = dist * v / np.linalg.norm(v, axis=1, keepdims=True)
    p = np.c_[r.uniform(-target, target, (n, 2)), np.zeros(n)]
    d = p - o
    return o.astype(np.float32), (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)


def uniform_sphere(r, n):
    v = r.normal(size=(n, 3))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def scene_of(shape: dict) -> dict:
    return {"type": "scene", "sensor": {"type": "perspective"}, "thing": shape}


def normalmap_bsdf(path, nested=None, **kw) -> dict:
    return {"type": "normalmap", "normalmap": {"type": "bitmap", "filename": path, "raw": True},
            "bsdf": nested or {"type": "roughplastic", "alpha": 0.2, "diffuse_reflectance": rgb([0.2, 0.5, 0.7])},
            **kw}


ROT = T().rotate(list(np.array([0.3, 1.0, 0.2]) / np.linalg.norm([0.3, 1.0, 0.2])), 35.0)


def _compare(d, o, dirs, seed=4, smooth=True):
    r = np.random.default_rng(seed)
    n = len(o)
    wo = uniform_sphere(r, n)
    u = r.random((n, 3)).astype(np.float32)
    ours, ref = our_query(d, o, dirs, wo, u), mitsuba_query(d, o, dirs, wo, u)
    hit = (ref["hit"] > 0) & (ours["hit"] > 0)      # (an edge may be hit by one only)
    assert hit.mean() > 0.9
    ours, ref = {k: v[hit] for k, v in ours.items()}, {k: v[hit] for k, v in ref.items()}
    errs = {}
    for k in ("eval", "pdf"):
        np.testing.assert_allclose(ours[k], ref[k], rtol=3e-3, atol=3e-4, err_msg=k)
        errs[k] = np.abs(ours[k] - ref[k]).max()
    ok = ref["s_weight"].max(axis=1) > 0
    assert ok.mean() > 0.3
    for k in ("s_wo", "s_pdf", "s_weight"):
        np.testing.assert_allclose(ours[k][ok], ref[k][ok], rtol=3e-3, atol=5e-4, err_msg=k)
        errs[k] = np.abs(ours[k][ok] - ref[k][ok]).max()
    assert np.all(ours["s_weight"][~ok] == 0)
    if smooth:
        assert (ref["eval"].max(axis=1) > 0).mean() > 0.2
    return errs


NESTED = {
    "roughplastic": None,
    "aniso": {"type": "roughconductor", "distribution": "ggx", "alpha_u": 0.05, "alpha_v": 0.4},
    "dielectric": {"type": "dielectric"},
}


@pytest.mark.parametrize("nested", sorted(NESTED))
def test_normalmap_on_a_rectangle_matches_mitsuba(tmp_path, nested):
    png = write_png(tmp_path / "n.png", normal_image())
    d = scene_of({"type": "rectangle", "to_world": ROT, "bsdf": normalmap_bsdf(png, NESTED[nested])})
    o, dirs = rays(300, 1)
    o, dirs = o @ ROT.matrix[:3, :3].T.astype(np.float32), dirs @ ROT.matrix[:3, :3].T.astype(np.float32)
    print(_compare(d, o, dirs, smooth=nested != "dielectric"))


def write_obj(path) -> str:
    """A bumpy quad mesh over [-1, 1]^2 with vertex normals and UVs (4 x 4 vertices)."""
    lines, k = [], 4
    for j in range(k):
        for i in range(k):
            x, y = -1 + 2 * i / (k - 1), -1 + 2 * j / (k - 1)
            z = 0.1 * np.sin(2 * x) * np.cos(3 * y)
            n = np.array([-0.2 * np.cos(2 * x) * np.cos(3 * y), 0.3 * np.sin(2 * x) * np.sin(3 * y), 1.0])
            n /= np.linalg.norm(n)
            lines += [f"v {x} {y} {z}", f"vt {i / (k - 1)} {0.7 * j / (k - 1) + 0.1 * i / (k - 1)}",
                      "vn {} {} {}".format(*n)]
    for j in range(k - 1):
        for i in range(k - 1):
            a, b, c, e = j * k + i + 1, j * k + i + 2, (j + 1) * k + i + 2, (j + 1) * k + i + 1
            lines += [f"f {a}/{a}/{a} {b}/{b}/{b} {c}/{c}/{c}", f"f {a}/{a}/{a} {c}/{c}/{c} {e}/{e}/{e}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_normalmap_on_a_smooth_mesh_and_a_sphere_matches_mitsuba(tmp_path):
    """Mitsuba's tangent from the mesh's UVs (a sheared map) with vertex
    normals, and a sphere's dp_du; a twosided one seen from both sides."""
    png = write_png(tmp_path / "n.png", normal_image(seed=3))
    bsdf = normalmap_bsdf(png, to_uv=None)
    bsdf.pop("to_uv")
    mesh = {"type": "obj", "filename": write_obj(tmp_path / "m.obj"), "to_world": ROT,
            "bsdf": {"type": "twosided", "b": bsdf}}
    o, dirs = rays(300, 2, spread=1.0)
    o[::3, 2] *= -1            # a third seen from below
    dirs[::3, 2] *= -1
    m = ROT.matrix[:3, :3].T.astype(np.float32)
    print(_compare(scene_of(mesh), o @ m, dirs @ m, seed=5))
    sphere = {"type": "sphere", "center": [0.1, 0.0, -0.2], "radius": 1.2, "to_world": ROT, "bsdf": bsdf}
    o, dirs = rays(300, 3, target=0.5)
    print(_compare(scene_of(sphere), o @ m, dirs @ m, seed=6))


def lit_card(bsdf: dict, size=32) -> dict:
    """A card carrying ``bsdf`` lit by a tilted area light, seen obliquely."""
    return {
        "type": "scene", "integrator": {"type": "path", "max_depth": 3},
        "sensor": {"type": "perspective", "fov": 45.0,
                   "to_world": T().look_at(origin=[0, -2.2, 2.2], target=[0, 0, 0], up=[0, 0, 1]),
                   "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}}},
        "card": {"type": "rectangle", "bsdf": bsdf},
        "light": {"type": "rectangle", "to_world": T().translate([1.2, 0.8, 1.5]).rotate([1, -1, 0], 40).scale(0.5),
                  "emitter": {"type": "area", "radiance": rgb([6.0, 5.0, 4.0])}},
    }


def test_normalmap_image_matches_mitsuba_within_noise(tmp_path):
    png = write_png(tmp_path / "n.png", normal_image(n=16, tilt=0.8))
    d = lit_card(normalmap_bsdf(png))
    _agree(_ours_renders(d, 16, 5), _mitsuba_renders(d, 16, 5, seed0=50))


def test_tangent_frames_of_analytic_shapes_match_mitsuba(tmp_path):
    """Disks, cylinders and spheres carry Mitsuba's dp_du: a normal map on
    them and anisotropic roughness (whose lobe turns with the frame's first
    axis, dp_du made orthogonal to the normal) render as in Mitsuba."""
    png = write_png(tmp_path / "n.png", normal_image(n=16, tilt=0.8))
    aniso = {"type": "roughconductor", "distribution": "ggx", "alpha_u": 0.03, "alpha_v": 0.5}
    d = lit_card({"type": "diffuse"}, size=32)
    d["integrator"]["max_depth"] = 2
    d["card"]["to_world"] = T().translate([0.0, 0.0, -0.6]).scale(2.0)
    d["plate"] = {"type": "disk", "to_world": T().translate([-0.5, 0.3, 0.0]).rotate([1, 0, 0], 20).scale(0.45),
                  "bsdf": normalmap_bsdf(png)}
    d["tube"] = {"type": "cylinder", "p0": [0.4, -0.5, -0.3], "p1": [0.5, 0.5, 0.1], "radius": 0.25,
                 "bsdf": normalmap_bsdf(png, aniso)}
    d["shiny_disk"] = {"type": "disk", "to_world": T().translate([0.1, -0.5, 0.1]).rotate([0, 1, 0], -25)
                       .scale(0.35), "bsdf": aniso}
    d["ball"] = {"type": "sphere", "center": [-0.35, -0.35, 0.1], "radius": 0.25, "bsdf": aniso}
    _agree(_ours_renders(d, 32, 5), _mitsuba_renders(d, 32, 5, seed0=50))


def test_normal_map_gradient_matches_finite_differences(tmp_path):
    from test_gradients import _compare_in_expectation
    png = write_png(tmp_path / "n.png", normal_image(n=4, tilt=0.5))
    scene = jaxrender.load_dict(lit_card(normalmap_bsdf(png), size=8))
    key = "card.bsdf.normalmap.data"
    assert key in scene.params and key not in scene.nondifferentiable
    direction = np.zeros(scene.params[key].shape)
    direction[..., 0] = 1.0          # tilt every normal towards +x (the light's side)
    _compare_in_expectation(scene, key, direction, spp=16, spp_fd=64, h=0.03)


def test_traverse_keys_are_mitsubas(tmp_path):
    from test_scene_parsing import to_mitsuba
    mi.set_variant("scalar_rgb")
    png = write_png(tmp_path / "n.png", normal_image(n=4))
    d = lit_card(normalmap_bsdf(png))
    ours = {k for k in jaxrender.load_dict(d).params if k.startswith("card.")}
    theirs = {k for k in mi.traverse(mi.load_dict(to_mitsuba(mi, d))).keys()
              if k.startswith("card.bsdf") and not k.endswith("to_uv")}
    assert {"card.bsdf.normalmap.data", "card.bsdf.nested_bsdf.diffuse_reflectance.value"} <= theirs
    assert theirs <= ours, theirs - ours
    d = lit_card(bumpmap_bsdf(write_png(tmp_path / "h.png", height_image(n=4)), scale=0.5))
    ours = {k for k in jaxrender.load_dict(d).params if k.startswith("card.")}
    theirs = {k for k in mi.traverse(mi.load_dict(to_mitsuba(mi, d))).keys()
              if k.startswith("card.bsdf") and not k.endswith("to_uv")}
    assert {"card.bsdf.nested_texture.data", "card.bsdf.scale"} <= theirs
    assert theirs <= ours, theirs - ours


def test_loader_refuses_what_it_cannot_honour(tmp_path):
    png = write_png(tmp_path / "n.png", normal_image(n=4))
    nm = normalmap_bsdf(png)
    cases = [({"type": "rectangle", "bsdf": normalmap_bsdf(png, nm)}, "a normalmap inside a normalmap"),
             ({"type": "rectangle", "bsdf": {"type": "normalmap", "normalmap": nm["normalmap"]}},
              "normalmap takes one nested BSDF, got 0"),
             ({"type": "rectangle", "bsdf": {"type": "bumpmap", "bsdf": {"type": "diffuse"}}},
              "bumpmap takes one nested texture, got 0"),
             ({"type": "rectangle", "bsdf": {"type": "bumpmap", "t": {"type": "checkerboard"},
                                             "bsdf": {"type": "diffuse"}}},
              "only a bitmap texture's gradient is supported, got 'checkerboard'"),
             ({"type": "sphere", "bsdf": {"type": "bumpmap", "t": nm["normalmap"], "bsdf": nm}},
              "a normalmap inside a bumpmap"),
             ({"type": "rectangle", "bsdf": normalmap_bsdf(write_png(tmp_path / "g.png", height_image()))},
              "the normal map must have three channels")]
    for shape, msg in cases:
        with pytest.raises(SceneError, match=msg):
            jaxrender.load_dict(scene_of(shape))


def test_scenes_without_them_keep_their_kernels():
    """A frame-perturbing type only adds dp_du / dp_dv where it is used."""
    from jaxrender.kernels.context import Structure
    plain = jaxrender.load_dict(jaxrender.cornell_box()).structure
    assert not plain.tangents
    assert Structure(bsdfs=("diffuse", "normalmap"), bsdf_nesting=1, tex_slots=1).tangents


def bumpmap_bsdf(path, nested=None, raw=True, **kw) -> dict:
    return {"type": "bumpmap", "height": {"type": "bitmap", "filename": path, "raw": raw, **kw.pop("tex", {})},
            "bsdf": nested or {"type": "roughplastic", "alpha": 0.2, "diffuse_reflectance": rgb([0.2, 0.5, 0.7])},
            **kw}


@pytest.mark.parametrize("nested", ["roughplastic", "aniso"])
def test_bumpmap_on_a_rectangle_matches_mitsuba(tmp_path, nested):
    png = write_png(tmp_path / "h.png", height_image())
    d = scene_of({"type": "rectangle", "to_world": ROT, "bsdf": bumpmap_bsdf(png, NESTED[nested], scale=0.3)})
    o, dirs = rays(300, 1)
    m = ROT.matrix[:3, :3].T.astype(np.float32)
    print(_compare(d, o @ m, dirs @ m))


def test_bumpmap_on_a_smooth_mesh_and_a_sphere_matches_mitsuba(tmp_path):
    """An RGB height map (its luminance) under a rotated, scaled ``to_uv``
    with mirror wrapping, on a mesh with vertex normals (twosided, seen from
    both sides) and on a sphere."""
    png = write_png(tmp_path / "h.png", np.random.default_rng(7).uniform(0, 1, (6, 9, 3)))
    bsdf = bumpmap_bsdf(png, scale=0.05, tex={"wrap_mode": "mirror",
                                              "to_uv": T().rotate([0, 0, 1], 30).scale([1.7, 1.3, 1.0])})
    mesh = {"type": "obj", "filename": write_obj(tmp_path / "m.obj"), "to_world": ROT,
            "bsdf": {"type": "twosided", "b": bsdf}}
    o, dirs = rays(300, 2)
    o[::3, 2] *= -1
    dirs[::3, 2] *= -1
    m = ROT.matrix[:3, :3].T.astype(np.float32)
    print(_compare(scene_of(mesh), o @ m, dirs @ m, seed=5))
    sphere = {"type": "sphere", "center": [0.1, 0.0, -0.2], "radius": 1.2, "to_world": ROT,
              "bsdf": bumpmap_bsdf(png, scale=0.01)}
    o, dirs = rays(300, 3, target=0.5)
    print(_compare(scene_of(sphere), o @ m, dirs @ m, seed=6))


def test_bumpmap_image_matches_mitsuba_within_noise(tmp_path):
    png = write_png(tmp_path / "h.png", height_image(n=16))
    d = lit_card(bumpmap_bsdf(png, scale=0.1))
    _agree(_ours_renders(d, 16, 5), _mitsuba_renders(d, 16, 5, seed0=50))


def test_height_map_gradient_matches_finite_differences(tmp_path):
    from test_gradients import _compare_in_expectation
    png = write_png(tmp_path / "h.png", height_image(n=4))
    scene = jaxrender.load_dict(lit_card(bumpmap_bsdf(png, scale=0.2), size=8))
    key = "card.bsdf.nested_texture.data"
    assert key in scene.params and key not in scene.nondifferentiable
    assert "card.bsdf.scale" in scene.nondifferentiable
    direction = np.zeros(scene.params[key].shape)
    direction[:, ::2] = 1.0          # raise every other column: slopes in u
    _compare_in_expectation(scene, key, direction, spp=16, spp_fd=64, h=0.03)


def test_adjoint_is_transpose_of_forward_mode(tmp_path):
    """Normal map, height map and nested BSDF parameters in one scene."""
    import jax.numpy as jnp
    from test_plugin_gradients import check_adjoint_transpose
    d = lit_card(normalmap_bsdf(write_png(tmp_path / "n.png", normal_image(n=4))), size=8)
    d["card"]["to_world"] = T().translate([-0.5, 0, 0]).scale(0.5)
    d["other"] = {"type": "sphere", "center": [0.5, 0.0, 0.3], "radius": 0.3,
                  "bsdf": bumpmap_bsdf(write_png(tmp_path / "h.png", height_image(n=4)), scale=0.2)}
    keys = ["card.bsdf.normalmap.data", "other.bsdf.nested_texture.data",
            "card.bsdf.nested_bsdf.diffuse_reflectance.value"]
    g = check_adjoint_transpose(jaxrender.load_dict(d), keys)
    assert all(float(jnp.max(jnp.abs(g[k]))) > 0 for k in keys)


def test_inside_and_around_other_composites_match_mitsuba(tmp_path):
    """A mask (its null component) inside a normalmap; a normalmap and a
    bumpmap blended (each sees the hit's own tangent)."""
    png = write_png(tmp_path / "n.png", normal_image(seed=3))
    m = ROT.matrix[:3, :3].T.astype(np.float32)
    o, dirs = rays(300, 1)
    for bsdf in (normalmap_bsdf(png, {"type": "mask", "opacity": 0.6, "a": {"type": "diffuse"}}),
                 {"type": "blendbsdf", "weight": 0.4, "a": normalmap_bsdf(png), "b": bumpmap_bsdf(png, scale=0.2)}):
        print(_compare(scene_of({"type": "rectangle", "to_world": ROT, "bsdf": bsdf}), o @ m, dirs @ m))
