"""Textures: lookups against numpy and Mitsuba 3, image decoding, UVs of the
built-in shapes and mesh files, texture slots in the BSDF row, bad input,
and gradients with respect to texels (finite differences, dot-product test).

The images against Mitsuba are in test_render_reference.py (cbox_textured)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels import layout
from jaxrender.kernels import textures as ktex
from jaxrender.kernels.context import Structure
from jaxrender.lowering import stats
from jaxrender.primitives import launch
from jaxrender.scene import textures as tio
from jaxrender.scene.loaders.textures import parse_texture
from jaxrender.scene.transform import Transform
from test_gradients import _check_jvp_vjp_dot

DATA = Path(__file__).parent / "data" / "textures"
LUM = np.array(ktex.LUMINANCE)


# ---------------------------------------------------------------------------
# Lookups
# ---------------------------------------------------------------------------

@functools.cache
def lookup_kernel() -> ir.Kernel:
    """texture_eval of texture ``tex`` at each item's uv."""
    def body(texels, tex_meta, tex_uv, tex, uv):
        i = ir.item_index()
        b = dict(texels=texels, tex_meta=tex_meta, tex_uv=tex_uv)
        return tuple(ktex.texture_eval(b, tex.value, Vec(uv.read(i, 0), uv.read(i, 1))))
    return ir.trace(body, {"texels": ir.In("f32"), "tex_meta": ir.In("i32", (layout.TEX_META_ROW,)),
                           "tex_uv": ir.In("f32", (6,)), "tex": ir.Scalar("i32"), "uv": ir.In("f32", (2,))},
                    {"v": ir.Out("f32", (3,))}, name="texture_lookup")


def lookup(spec: dict, uv: np.ndarray, width: int = 3) -> np.ndarray:
    """Our lookup of the texture ``spec`` (a load_dict texture) at ``uv``."""
    params = {}
    t = parse_texture(spec, "t", width, params)
    meta = np.array([[0, t.width, t.height, t.channels, t.kind, t.wrap, t.filter, 0]], np.int32)
    out = launch(lookup_kernel(), (len(uv),), texels=np.asarray(t.texels(params)), tex_meta=meta,
                 tex_uv=t.to_uv.reshape(1, 6).astype(np.float32), tex=np.int32(0), uv=np.asarray(uv, np.float32))
    return np.asarray(out["v"], np.float64)


def np_wrap(i, n, mode):
    if mode == "clamp":
        return np.clip(i, 0, n - 1)
    q, m = np.divmod(i, n)
    return m if mode == "repeat" else np.where(q % 2 == 0, m, n - 1 - m)


def np_lookup(img, uv, wrap, filt, to_uv=np.eye(3)[:2]):
    """Reference: Mitsuba's bitmap lookup written with numpy (float64)."""
    h, w, c = img.shape
    u = to_uv[0, 0] * uv[:, 0] + to_uv[0, 1] * uv[:, 1] + to_uv[0, 2]
    v = to_uv[1, 0] * uv[:, 0] + to_uv[1, 1] * uv[:, 1] + to_uv[1, 2]
    if filt == "nearest":
        x = np_wrap(np.floor(u * w).astype(int), w, wrap)
        y = np_wrap(np.floor(v * h).astype(int), h, wrap)
        out = img[y, x]
    else:
        px, py = u * w - 0.5, v * h - 0.5
        x0, y0 = np.floor(px).astype(int), np.floor(py).astype(int)
        fx, fy = (px - x0)[:, None], (py - y0)[:, None]
        xa, xb = np_wrap(x0, w, wrap), np_wrap(x0 + 1, w, wrap)
        ya, yb = np_wrap(y0, h, wrap), np_wrap(y0 + 1, h, wrap)
        out = ((1 - fy) * ((1 - fx) * img[ya, xa] + fx * img[ya, xb])
               + fy * ((1 - fx) * img[yb, xa] + fx * img[yb, xb]))
    return np.repeat(out, 3, axis=1) if c == 1 else out


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("filt", ["bilinear", "nearest"])
@pytest.mark.parametrize("wrap", ["repeat", "mirror", "clamp"])
def test_bitmap_lookup_matches_numpy(wrap, filt, channels):
    r = np.random.default_rng(0)
    img = r.random((5, 7, channels)).astype(np.float32)
    uv = r.uniform(-2.5, 2.5, (3000, 2))
    uv[:8] = [[0, 0], [1, 1], [0.5, 0.5], [1, 0], [-1, -1], [0.999999, 0.0], [2.0, 3.0], [-0.0, 1e-8]]
    to_uv = np.array([[1.3, 0.2, 0.1], [-0.1, 0.7, 0.25]])
    m = np.vstack([to_uv, [0, 0, 1]])
    ours = lookup({"type": "bitmap", "bitmap": img, "wrap_mode": wrap, "filter_type": filt, "to_uv": m}, uv)
    ref = np_lookup(img.astype(np.float64), uv.astype(np.float32).astype(np.float64), wrap, filt, to_uv)
    if filt == "nearest":
        # A coordinate within float32 rounding of a texel edge may land on either side.
        assert np.mean(np.abs(ours - ref).max(1) > 1e-6) < 0.005
    else:
        np.testing.assert_allclose(ours, ref, atol=2e-5)


def test_checkerboard_rule_and_scalar_order():
    r = np.random.default_rng(1)
    uv = r.uniform(-3, 3, (2000, 2))
    c0, c1 = [0.9, 0.5, 0.1], [0.2, 0.3, 0.4]
    spec = {"type": "checkerboard", "color0": {"type": "rgb", "value": c0}, "color1": {"type": "rgb", "value": c1},
            "to_uv": Transform().scale([2.0, 3.0, 1.0])}
    ours = lookup(spec, uv)
    u, v = 2.0 * uv[:, 0].astype(np.float32), 3.0 * uv[:, 1].astype(np.float32)
    same = ((u - np.floor(u)) > 0.5) == ((v - np.floor(v)) > 0.5)
    away = (np.abs(u - np.round(2 * u) / 2) > 1e-5) & (np.abs(v - np.round(2 * v) / 2) > 1e-5)
    np.testing.assert_allclose(ours[away], np.where(same, 1, 0)[away, None] * c0 + np.where(same, 0, 1)[away, None] * c1,
                               atol=1e-6)
    # For a scalar field Mitsuba's eval_1 picks color0 where the sides differ.
    s = lookup({"type": "checkerboard", "color0": 0.7, "color1": 0.1, "to_uv": Transform().scale([2.0, 3.0, 1.0])},
               uv, width=1)
    np.testing.assert_allclose(s[away, 0], np.where(same, 0.1, 0.7)[away], atol=1e-6)


@pytest.mark.parametrize("filt", ["bilinear", "nearest"])
@pytest.mark.parametrize("wrap", ["repeat", "mirror", "clamp"])
def test_bitmap_and_checkerboard_match_mitsuba(wrap, filt):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    r = np.random.default_rng(2)
    img = r.random((4, 6, 3)).astype(np.float32)
    uv = r.uniform(-1.7, 2.3, (400, 2)).astype(np.float32)
    specs = [{"type": "bitmap", "wrap_mode": wrap, "filter_type": filt,
              "to_uv": [[1.5, 0.3, 0.1, 0.2], [0.0, 0.8, 0, -0.3], [0, 0, 1, 0], [0, 0, 0, 1]]},
             {"type": "checkerboard", "color0": {"type": "rgb", "value": [0.9, 0.5, 0.1]},
              "to_uv": [[2.5, 0, 0.1], [0.5, 3.0, 0], [0, 0, 1]]}]
    for spec in specs:
        ours = lookup(dict(spec, **({"bitmap": img} if spec["type"] == "bitmap" else {})), uv)
        mspec = dict(spec)
        mspec["to_uv"] = (mi.ScalarTransform4f if len(spec["to_uv"]) == 4 else mi.ScalarTransform3f)(spec["to_uv"])
        if spec["type"] == "bitmap":
            mspec["bitmap"] = mi.Bitmap(img)
        t = mi.load_dict(mspec)
        si = mi.SurfaceInteraction3f()
        ref = []
        for q in uv:
            si.uv = [float(q[0]), float(q[1])]
            ref.append(np.array(t.eval(si), np.float64))
        err = np.abs(ours - np.array(ref)).max(1)
        assert np.mean(err > 1e-5) < 0.01, (spec["type"], err.max())


# ---------------------------------------------------------------------------
# Image files
# ---------------------------------------------------------------------------

def srgb(x):
    x = np.asarray(x, np.float64) / 255.0
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


def test_png_decoding_channels_and_raw(tmp_path):
    from PIL import Image
    r = np.random.default_rng(3)
    a = r.integers(0, 256, (3, 5, 3), dtype=np.uint8)
    Image.fromarray(a).save(tmp_path / "rgb.png")
    Image.fromarray(np.dstack([a, a[..., :1]])).save(tmp_path / "rgba.png")
    Image.fromarray(a[..., 1]).save(tmp_path / "grey.png")
    for name, expect in (("rgb", a), ("rgba", a), ("grey", a[..., 1:2])):
        f = str(tmp_path / f"{name}.png")
        np.testing.assert_allclose(tio.load_image(f, "k"), srgb(expect), atol=1e-6)
        np.testing.assert_allclose(tio.load_image(f, "k", raw=True), expect / 255.0, atol=1e-6)
    # Through load_dict: the key, the shape, float32 linear values.
    d = small_plane({"type": "bitmap", "filename": str(tmp_path / "grey.png")})
    scene = jaxrender.load_dict(d)
    data = scene.params["plane.bsdf.reflectance.data"]
    assert data.shape == (3, 5, 1) and data.dtype == np.float32


def test_image_data_matches_mitsuba():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    for name, raw in (("albedo16.png", False), ("albedo16.png", True), ("grey8.png", False), ("sky32x16.exr", False)):
        f = str(DATA / name)
        t = mi.load_dict({"type": "bitmap", "filename": f, "raw": raw, "format": "variant"})
        ref = np.array(mi.traverse(t)["data"])
        np.testing.assert_allclose(tio.load_image(f, "k", raw), ref, rtol=1e-5, atol=1e-6)


def test_exr_loads_linear_float(tmp_path):
    import OpenEXR
    img = np.random.default_rng(4).uniform(0, 20, (4, 3, 3)).astype(np.float32)
    OpenEXR.File({"type": OpenEXR.scanlineimage}, {"RGB": img}).write(str(tmp_path / "a.exr"))
    np.testing.assert_array_equal(tio.load_image(str(tmp_path / "a.exr"), "k"), img)
    OpenEXR.File({"type": OpenEXR.scanlineimage}, {"Y": img[..., 0].astype(np.float16)}).write(str(tmp_path / "y.exr"))
    y = tio.load_image(str(tmp_path / "y.exr"), "k")
    assert y.shape == (4, 3, 1)
    np.testing.assert_allclose(y[..., 0], img[..., 0].astype(np.float16), rtol=0)


# ---------------------------------------------------------------------------
# UVs
# ---------------------------------------------------------------------------

def mitsuba_uvs(shape: dict, points: np.ndarray, normals: np.ndarray) -> np.ndarray:
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    scene = mi.load_dict({"type": "scene", "s": shape})
    out = []
    for p, n in zip(points, normals):
        si = scene.ray_intersect(mi.Ray3f(mi.Point3f(*(p + 0.5 * n)), mi.Vector3f(*(-n))))
        out.append(np.array(si.uv))
    return np.array(out)


def our_uvs(scene, points: np.ndarray) -> np.ndarray:
    """UVs of world points on the scene's triangles, from tri_uv (numpy)."""
    tri = scene.triangles.reshape(-1, 3, 3).astype(np.float64)
    out = []
    for p in points:
        e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
        n = np.cross(e1, e2)
        d = p - tri[:, 0]
        nn = np.einsum("ij,ij->i", n, n)
        b1 = np.einsum("ij,ij->i", np.cross(d, e2), n) / nn
        b2 = np.einsum("ij,ij->i", np.cross(e1, d), n) / nn
        dist = np.abs(np.einsum("ij,ij->i", d, n)) / np.sqrt(nn)
        inside = (b1 >= -1e-6) & (b2 >= -1e-6) & (b1 + b2 <= 1 + 1e-6) & (dist < 1e-5)
        k = int(np.argmax(inside))
        assert inside[k]
        q = scene.tri_uv[k].astype(np.float64).reshape(3, 2)
        out.append((1 - b1[k] - b2[k]) * q[0] + b1[k] * q[1] + b2[k] * q[2])
    return np.array(out)


def scene_with(shape: dict):
    return jaxrender.load_dict({"type": "scene", "sensor": {"type": "perspective"},
                                "s": dict(shape, bsdf={"type": "diffuse", "reflectance": {
                                    "type": "checkerboard"}})})


def face_points(r, n=40):
    """Points on the faces of [-1, 1]^3 (and their outward normals)."""
    axis = r.integers(0, 3, n)
    sign = r.choice([-1.0, 1.0], n)
    p = r.uniform(-0.95, 0.95, (n, 3))
    p[np.arange(n), axis] = sign
    nrm = np.zeros((n, 3))
    nrm[np.arange(n), axis] = sign
    return p, nrm


def test_rectangle_and_cube_uvs_match_mitsuba():
    r = np.random.default_rng(5)
    T = Transform().translate([0.2, -0.1, 0.3]).rotate([0.0, 0.0, 1.0], 30.0).scale([1.5, 0.5, 2.0])
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    cube = face_points(r)
    rect = (np.c_[r.uniform(-0.95, 0.95, (20, 2)), np.zeros(20)], np.tile([0.0, 0.0, 1.0], (20, 1)))
    for kind, (p, n) in (("cube", cube), ("rectangle", rect)):
        shape = {"type": kind, "to_world": T}
        pts = p @ T.matrix[:3, :3].T + T.matrix[:3, 3]
        nrm = n @ np.linalg.inv(T.matrix[:3, :3])
        nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
        ours = our_uvs(scene_with(shape), pts)
        ref = mitsuba_uvs(dict(shape, to_world=mi.ScalarTransform4f(T.matrix)), pts, nrm)
        np.testing.assert_allclose(ours, ref, atol=1e-5, err_msg=shape["type"])


def test_mesh_file_uvs(tmp_path):
    obj = tmp_path / "quad.obj"
    obj.write_text("v -1 -1 0\nv 1 -1 0\nv 1 1 0\nv -1 1 0\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
                   "f 1/1 2/2 3/3 4/4\n")
    plain = tmp_path / "plain.obj"
    plain.write_text("v -1 -1 0\nv 1 -1 0\nv 1 1 0\nf 1 2 3\n")
    ply = tmp_path / "quad.ply"
    ply.write_text("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
                   "property float u\nproperty float v\nelement face 2\nproperty list uchar int vertex_indices\n"
                   "end_header\n-1 -1 0 0 0\n1 -1 0 0.5 0\n1 1 0 0.5 0.25\n-1 1 0 0 0.25\n3 0 1 2\n3 0 2 3\n")
    pts = np.array([[0.3, -0.4, 0.0], [-0.8, 0.9, 0.0], [0.5, -0.6, 0.0]])
    x, y = pts[:, 0], pts[:, 1]
    cases = [({"type": "obj", "filename": str(obj)}, np.c_[(x + 1) / 2, 1 - (y + 1) / 2]),   # vt flipped
             ({"type": "obj", "filename": str(obj), "flip_tex_coords": False}, np.c_[(x + 1) / 2, (y + 1) / 2]),
             ({"type": "ply", "filename": str(ply)}, np.c_[(x + 1) / 4, (y + 1) / 8])]
    for shape, expect in cases:
        np.testing.assert_allclose(our_uvs(scene_with(shape), pts), expect, atol=1e-6)
    # No texture coordinates: Mitsuba's uv is the barycentric (b1, b2).
    q = np.array([[0.5, -0.5, 0.0]])
    np.testing.assert_allclose(our_uvs(scene_with({"type": "obj", "filename": str(plain)}), q), [[0.5, 0.25]],
                               atol=1e-6)


# ---------------------------------------------------------------------------
# Texture slots: the BSDF row at a hit
# ---------------------------------------------------------------------------

ROW_INPUTS = ("bsdf_data", "tri_uv", "bsdf_tex", "tex_slots", "tex_meta", "tex_uv", "texels")


@functools.cache
def row_kernel(max_slots: int) -> ir.Kernel:
    """The BSDF row after apply_textures, for (bsdf, triangle, b1, b2) per item."""
    def body(query, **b):
        i = ir.item_index()
        bsdf, tri = ir.cast(query.read(i, 0), "i32"), ir.cast(query.read(i, 1), "i32")
        row = [b["bsdf_data"].read(bsdf, k) for k in range(layout.BSDF_ROW)]
        return tuple(ktex.apply_textures(b, bsdf, row, tri, query.read(i, 2), query.read(i, 3), True, max_slots))
    inputs = {k: layout.scene_inputs()[k] for k in ROW_INPUTS}
    inputs["query"] = ir.In("f32", (4,))
    return ir.trace(body, inputs, {"row": ir.Out("f32", (layout.BSDF_ROW,))}, name=f"texture_row_{max_slots}")


def small_plane(reflectance, size=8, **extra):
    """A textured rectangle seen from above, lit by a rectangle area light."""
    T = Transform()
    return {"type": "scene", "integrator": {"type": "path", "max_depth": 3},
            "sensor": {"type": "perspective", "fov": 60.0,
                       "to_world": T.look_at(origin=[0, 0, 2.2], target=[0, 0, 0], up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": size, "height": size, "rfilter": {"type": "box"}}},
            "plane": {"type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": reflectance}, **extra},
            "lamp": {"type": "rectangle", "to_world": T.translate([0.4, 0.3, 1.6]).rotate([1, 0, 0], 180)
                     .scale(0.4), "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [6, 5, 4]}}}}


def test_texture_slots_override_the_bsdf_row():
    grey = str(DATA / "grey8.png")
    d = small_plane({"type": "bitmap", "filename": str(DATA / "albedo16.png")})
    d["plane"]["bsdf"] = {"type": "roughconductor", "alpha": {"type": "bitmap", "filename": grey, "raw": True},
                          "specular_reflectance": {"type": "bitmap", "filename": str(DATA / "albedo16.png")},
                          "k": {"type": "rgb", "value": [2.0, 3.0, 4.0]}}
    d["other"] = {"type": "rectangle", "to_world": Transform().translate([0, 0, -1]),
                  "bsdf": {"type": "plastic", "specular_reflectance": {"type": "bitmap", "filename": grey}}}
    scene = jaxrender.load_dict(d)
    assert scene.structure == Structure(2, False, bsdfs=("diffuse", "roughconductor-beckmann", "plastic"))
    # alpha_u and alpha_v share one lookup; the one-channel texture fills both.
    types = [b[0] for b in scene.bsdfs]
    rc = types.index("roughconductor-beckmann")
    other = types.index("plastic")
    assert sorted(scene.bsdf_slots[rc]) == [(6, 3, 0, 0), (9, 2, 1, 0)]
    inputs = scene.kernel_inputs()
    plane_tris = np.nonzero(scene.tri_attr[:, 0] == rc)[0]
    q = np.array([[rc, plane_tris[0], 0.2, 0.3], [rc, plane_tris[1], 0.6, 0.1]], np.float32)
    q = np.vstack([q, [[other, np.nonzero(scene.tri_attr[:, 0] == other)[0][0], 0.25, 0.25]]]).astype(np.float32)
    rows = np.asarray(launch(row_kernel(2), (len(q),), query=q,
                             **{k: np.asarray(inputs[k]) for k in ROW_INPUTS})["row"], np.float64)
    albedo, g = tio.load_image(str(DATA / "albedo16.png"), "k"), tio.load_image(grey, "k", raw=True)
    for row, (_, tri, b1, b2) in zip(rows[:2], q[:2]):
        uv = scene.tri_uv[int(tri)].reshape(3, 2).astype(np.float64)
        uv = (1 - b1 - b2) * uv[0] + b1 * uv[1] + b2 * uv[2]
        np.testing.assert_allclose(row[3:6], [2.0, 3.0, 4.0])                          # k untouched
        np.testing.assert_allclose(row[6:9], np_lookup(albedo, uv[None], "repeat", "bilinear")[0], atol=1e-5)
        np.testing.assert_allclose(row[9:11], np_lookup(g, uv[None], "repeat", "bilinear")[0, :2], atol=1e-5)
    # The plastic's 1-channel texture fills its 3-wide field; the rest is untouched.
    other_row = np.asarray(inputs["bsdf_data"])[other]
    assert np.all(np.abs(rows[2, 3:6] - rows[2, 3]) == 0) and 40 / 255 < rows[2, 3] <= 1.0
    np.testing.assert_allclose(rows[2, :3], other_row[:3])
    np.testing.assert_allclose(rows[2, 6:], other_row[6:])


def test_three_channel_texture_for_a_scalar_is_its_luminance():
    d = small_plane(0.5)
    d["plane"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx",
                          "alpha": {"type": "bitmap", "filename": str(DATA / "albedo16.png"), "filter_type": "nearest"}}
    scene = jaxrender.load_dict(d)
    (slot,) = scene.bsdf_slots[0]
    assert slot[:2] == (9, 2) and slot[3] == 1
    inputs = scene.kernel_inputs()
    q = np.array([[0, 0, 0.3, 0.3]], np.float32)
    row = np.asarray(launch(row_kernel(1), (1,), query=q, **{k: np.asarray(inputs[k]) for k in ROW_INPUTS})["row"])[0]
    uv = scene.tri_uv[0].reshape(3, 2).astype(np.float64)
    uv = 0.4 * uv[0] + 0.3 * uv[1] + 0.3 * uv[2]
    rgb = np_lookup(tio.load_image(str(DATA / "albedo16.png"), "k"), uv[None], "repeat", "nearest")[0]
    np.testing.assert_allclose(row[9:11], [rgb @ LUM] * 2, rtol=1e-5)


def test_untextured_scenes_keep_the_plain_kernel_and_values_do_not_recompile():
    assert jaxrender.load_dict(jaxrender.cornell_box()).structure == Structure(bsdfs=("diffuse",), footprint=5)
    scene = jaxrender.load_dict(small_plane({"type": "bitmap", "filename": str(DATA / "albedo16.png")}))
    assert scene.structure == Structure(1, False, bsdfs=("diffuse",))
    key = "plane.bsdf.reflectance.data"
    a = np.asarray(jaxrender.render(scene, spp=2, seed=1))
    before = stats["compiled"] + stats["disk_hits"]
    b = np.asarray(jaxrender.render(scene, {key: scene.params[key] * 0.5}, spp=2, seed=1))
    np.testing.assert_allclose(b, 0.5 * a, rtol=1e-5, atol=1e-7)   # direct light: linear in albedo
    assert stats["compiled"] + stats["disk_hits"] == before


def test_xml_textures_relative_paths_and_shared_ids(tmp_path):
    import shutil
    shutil.copy(DATA / "albedo16.png", tmp_path / "wood.png")
    xml = tmp_path / "s.xml"
    xml.write_text("""<scene version="3.0.0">
      <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="4"/>
        <integer name="height" value="4"/></film></sensor>
      <texture type="bitmap" id="wood"><string name="filename" value="wood.png"/>
        <string name="wrap_mode" value="mirror"/></texture>
      <shape type="rectangle"><bsdf type="diffuse"><ref name="reflectance" id="wood"/></bsdf></shape>
      <shape type="cube" id="box"><bsdf type="plastic"><ref name="diffuse_reflectance" id="wood"/></bsdf></shape>
      <shape type="rectangle" id="floor"><bsdf type="diffuse">
        <texture type="checkerboard" name="reflectance"><rgb name="color1" value="0.1, 0.2, 0.3"/>
          <transform name="to_uv"><scale x="4" y="4"/></transform></texture></bsdf></shape>
    </scene>""")
    scene = jaxrender.load_file(str(xml))
    assert "wood.data" in scene.params and scene.params["wood.data"].shape == (16, 16, 3)
    assert len(scene.textures) == 2                       # the shared bitmap once, the checkerboard
    np.testing.assert_allclose(scene.params["floor.bsdf.reflectance.color1.value"], [0.1, 0.2, 0.3])
    np.testing.assert_allclose(scene.textures[1].to_uv, [[4, 0, 0], [0, 4, 0]])
    assert np.isfinite(np.asarray(jaxrender.render(scene, spp=1))).all()


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

def _bitmap(**kw):
    return dict({"type": "bitmap", "filename": str(DATA / "albedo16.png")}, **kw)


@pytest.mark.parametrize("reflectance, message", [
    (_bitmap(filename="/nonexistent/wood.png"), "plane.bsdf.reflectance.filename: image file '/nonexistent/wood.png' not found"),
    ("CORRUPT_PNG", "plane.bsdf.reflectance.filename: cannot read image"),
    ("CORRUPT_EXR", "plane.bsdf.reflectance.filename: cannot read OpenEXR image"),
    ("NAN_EXR", "contains NaN or infinite values"),
    (_bitmap(wrap_mode="wrap"), "plane.bsdf.reflectance.wrap_mode: 'wrap' is not supported (one of repeat, mirror, clamp)"),
    (_bitmap(filter_type="cubic"), "plane.bsdf.reflectance.filter_type: 'cubic' is not supported"),
    (_bitmap(to_uv=np.ones((2, 5))), "plane.bsdf.reflectance: to_uv must be a finite 3x3 or 4x4 matrix"),
    ({"type": "bitmap"}, "needs exactly one of 'filename' and 'bitmap'"),
    ({"type": "bitmap", "bitmap": np.zeros((2, 2, 5))}, "plane.bsdf.reflectance.bitmap: bitmap must have shape"),
    ({"type": "noise"}, "'noise' values are not supported here"),
    ({"type": "ref", "id": "nope"}, "plane.bsdf.reflectance: reference to unknown texture id 'nope'"),
    ({"type": "checkerboard", "color0": {"type": "checkerboard"}}, "color0: nested textures are not supported"),
])
def test_bad_texture_input_is_a_scene_error(tmp_path, reflectance, message):
    if reflectance == "CORRUPT_PNG":
        (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
        reflectance = _bitmap(filename=str(tmp_path / "bad.png"))
    elif reflectance == "CORRUPT_EXR":
        (tmp_path / "bad.exr").write_bytes(b"v/1\x01 garbage")
        reflectance = _bitmap(filename=str(tmp_path / "bad.exr"))
    elif reflectance == "NAN_EXR":
        import OpenEXR
        img = np.ones((2, 2, 3), np.float32)
        img[1, 1, 1] = np.nan
        OpenEXR.File({"type": OpenEXR.scanlineimage}, {"RGB": img}).write(str(tmp_path / "nan.exr"))
        reflectance = _bitmap(filename=str(tmp_path / "nan.exr"))
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(small_plane(reflectance))


def test_untexturable_and_too_many_textures():
    d = small_plane(0.5)
    d["plane"]["bsdf"] = {"type": "dielectric", "int_ior": _bitmap()}
    with pytest.raises(jaxrender.SceneError, match="plane.bsdf.int_ior"):
        jaxrender.load_dict(d)
    d["plane"]["bsdf"] = {"type": "roughconductor", **{k: _bitmap() for k in ("eta", "k", "specular_reflectance")},
                          "alpha_u": _bitmap(filename=str(DATA / "grey8.png")),
                          "alpha_v": _bitmap(filename=str(DATA / "grey8.png"), wrap_mode="clamp")}
    with pytest.raises(jaxrender.SceneError, match=r"plane.bsdf: at most 4 parameters of one BSDF can be textured"):
        jaxrender.load_dict(d)
    d["plane"]["emitter"] = {"type": "area", "radiance": _bitmap()}
    d["plane"]["bsdf"] = {"type": "diffuse"}
    with pytest.raises(jaxrender.SceneError, match="plane.emitter.radiance.value: 'bitmap' values are not supported"):
        jaxrender.load_dict(d)


def test_wrong_texture_parameter_shape_is_a_scene_error():
    scene = jaxrender.load_dict(small_plane(_bitmap()))
    with pytest.raises(jaxrender.SceneError, match=re.escape(
            "parameter 'plane.bsdf.reflectance.data' must have shape (16, 16, 3), got (16, 16)")):
        jaxrender.render(scene, {"plane.bsdf.reflectance.data": np.zeros((16, 16), np.float32)}, spp=1)


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------

SPP = 16


def grad_scene():
    return jaxrender.load_dict(small_plane(_bitmap(to_uv=Transform().scale([1.3, 0.8, 1.0]))))


def test_texel_gradient_matches_finite_differences():
    """Direct lighting (max_depth 3, no Russian roulette) of the only textured
    surface is linear in its texels and sampling does not depend on them, so
    for one seed the adjoint gradient is the exact derivative of the primal:
    central differences with the same seed agree to float rounding."""
    scene = grad_scene()
    key = "plane.bsdf.reflectance.data"
    x0 = jnp.asarray(scene.params[key])
    loss = lambda x: jnp.mean(jaxrender.render(scene, {key: x}, spp=SPP, seed=0, seed_grad=0))
    g = np.asarray(jax.grad(loss)(x0), np.float64)
    assert np.all(np.isfinite(g)) and np.abs(g).max() > 0
    flat = np.argsort(-np.abs(g).ravel())
    picks = [flat[0], flat[5], flat[40], flat[150]]
    h = 0.2
    for i in picks:
        e = np.zeros(g.size, np.float32)
        e[i] = h
        e = e.reshape(g.shape)
        fd = (float(loss(x0 + e)) - float(loss(x0 - e))) / (2 * h)
        assert abs(fd - g.ravel()[i]) <= 5e-4 * abs(g.ravel()[i]) + 3e-8, (np.unravel_index(i, g.shape), fd, g.ravel()[i])
    # Checkerboard colours: four texel copies each, gradients summed by JAX.
    d = small_plane({"type": "checkerboard", "to_uv": Transform().scale([3.0, 3.0, 1.0])})
    cscene = jaxrender.load_dict(d)
    ckey = "plane.bsdf.reflectance.color0.value"
    c0 = jnp.asarray(cscene.params[ckey])
    closs = lambda c: jnp.mean(jaxrender.render(cscene, {ckey: c}, spp=SPP, seed=0, seed_grad=0))
    gc = np.asarray(jax.grad(closs)(c0))
    for k in range(3):
        e = np.zeros(3, np.float32)
        e[k] = 0.05
        fd = (float(closs(c0 + e)) - float(closs(c0 - e))) / 0.1
        assert abs(fd - gc[k]) <= 5e-4 * abs(gc[k]) + 3e-8


def test_texel_dot_product_test(method="prb"):
    """<J dx, dy> == <dx, J^T dy> for the same seed_grad (forward-mode kernel
    against the adjoint kernel)."""
    scene = grad_scene()
    key = "plane.bsdf.reflectance.data"
    x0 = jnp.asarray(scene.params[key])
    f = lambda x: jaxrender.render(scene, {key: x}, spp=4, seed=0, seed_grad=3, method=method)
    _check_jvp_vjp_dot(f, x0, (8, 8, 3), seed=6)


def compare_in_expectation(scene, key, v, spp=16, spp_fd=64, h=0.02, n_seeds=8):
    """Detached-sampling gradient and central differences are different
    unbiased estimators of the same derivative (here sampling depends on the
    parameter): compare their means over independent seeds."""
    x0 = jnp.asarray(scene.params[key])
    v = jnp.asarray(v, jnp.float32)
    w = jnp.asarray(np.random.default_rng(9).uniform(0.5, 1.5, (scene.camera.height, scene.camera.width, 3)),
                    jnp.float32)

    def loss(x, seed, seed_grad, n):
        return jnp.mean(w * jaxrender.render(scene, {key: x}, spp=n, seed=seed, seed_grad=seed_grad))
    grad = jax.jit(jax.grad(lambda x, s: loss(x, s, 1000 + s, spp)))
    g = np.array([float(jnp.vdot(grad(x0, s), v)) for s in range(n_seeds)])
    fd = np.array([(float(loss(x0 + h * v, s, 0, spp_fd)) - float(loss(x0 - h * v, s, 0, spp_fd))) / (2 * h)
                   for s in range(n_seeds)])
    se = np.sqrt(g.var(ddof=1) / n_seeds + fd.var(ddof=1) / n_seeds)
    assert abs(g.mean() - fd.mean()) < 4.0 * se, (g.mean(), fd.mean(), se)
    assert abs(g.mean()) > 4 * g.std(ddof=1) / np.sqrt(n_seeds), g      # the test has power
    return g.mean(), fd.mean()


def test_textured_roughness_gradient_in_expectation():
    """A GGX floor whose roughness is a 2 x 2 nearest texture, reflecting a
    small light: the derivative with respect to one texel."""
    T = Transform()
    d = {"type": "scene", "integrator": {"type": "path", "max_depth": 2},
         "sensor": {"type": "perspective", "fov": 30,
                    "to_world": T.look_at(origin=[0, 1.5, 3], target=[0, 0, 0], up=[0, 1, 0]),
                    "film": {"type": "hdrfilm", "width": 8, "height": 8, "rfilter": {"type": "box"}}},
         "floor": {"type": "rectangle", "to_world": T.rotate([1, 0, 0], -90).scale([2, 2, 2]),
                   "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": {
                       "type": "bitmap", "bitmap": np.array([[[0.1], [0.2]], [[0.15], [0.3]]], np.float32),
                       "filter_type": "nearest"}}},
         "light": {"type": "rectangle",
                   "to_world": T.look_at(origin=[0, 1.5, -3], target=[0, 0, 0], up=[0, 1, 0]).scale([0.6, 0.6, 1]),
                   "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [10.0, 8.0, 6.0]}}}}
    scene = jaxrender.load_dict(d)
    key = "floor.bsdf.alpha.data"
    v = np.zeros((2, 2, 1), np.float32)
    v[1, 0] = 1.0          # the texel the camera sees the highlight in
    compare_in_expectation(scene, key, v)
