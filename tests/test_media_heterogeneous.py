"""Heterogeneous media (Mitsuba 3.9.1's ``heterogeneous`` with ``gridvolume``
and ``constvolume``) under volpath, against Mitsuba and a closed form; the
``.vol`` file format; keys and errors."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import jaxrender
from jaxrender.scene.errors import SceneError
from jaxrender.scene.transform import Transform as T
from jaxrender.scene.volumes import read_vol, write_vol
from test_media import medium_scene, mitsuba_image, our_renders, rgb, slab_scene
from test_render_reference import disagreements
from test_shapes import _to_mitsuba

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

RENDERS = 4
# The volume's unit cube onto medium_scene's box (a cube rotated by 30 degrees, half size 0.8).
BOX = T().rotate([0, 1, 0], 30).scale(0.8).translate([-1, -1, -1]).scale(2)


def smoke(n=(10, 12, 14)) -> np.ndarray:
    """A puff: a noisy Gaussian blob, off centre, (z, y, x)."""
    z, y, x = np.meshgrid(*(np.linspace(0, 1, k) for k in n), indexing="ij")
    blob = np.exp(-((x - 0.6) ** 2 + (y - 0.4) ** 2 + (z - 0.5) ** 2) / 0.08)
    return (blob * (0.6 + 0.4 * np.random.default_rng(1).random(n))).astype(np.float32)


def hetero_scene(medium: dict, **kw) -> dict:
    d = medium_scene(**kw)
    d["box"]["interior"] = medium
    return d


def to_mitsuba(x):
    return _to_mitsuba(mi, x)


def mitsuba_renders(d: dict) -> dict:
    scene = mi.load_dict(to_mitsuba(d))
    imgs = np.stack([np.asarray(mi.render(scene, seed=s), np.float64) for s in range(RENDERS)])
    return {"mean": imgs.mean(0), "stderr": imgs.std(0, ddof=1) / np.sqrt(RENDERS)}


def albedo_grid() -> np.ndarray:
    """A 2 x 3 x 2 rgb albedo (z, y, x, 3): strong colour changes along y."""
    rng = np.random.default_rng(2)
    return (0.3 + 0.7 * rng.random((2, 3, 2, 3))).astype(np.float32)


CASES = {
    # a .vol file (written per test), trilinear, clamped, filling the rotated box
    "smoke-file": lambda tmp: {"type": "heterogeneous", "scale": 6.0, "albedo": rgb(0.9, 0.7, 0.5),
                               "sigma_t": {"type": "gridvolume", "filename": _vol(tmp, smoke()), "to_world": BOX}},
    # an rgb albedo grid (nearest) and an rgb extinction grid (from arrays), hg phase
    "albedo-grid": lambda tmp: {"type": "heterogeneous", "scale": 3.0, "phase": {"type": "hg", "g": 0.4},
                                "sigma_t": {"type": "gridvolume", "data": np.stack([smoke(), 0.5 * smoke(),
                                                                                    smoke()[::-1]], -1),
                                            "to_world": BOX},
                                "albedo": {"type": "gridvolume", "data": albedo_grid(), "filter_type": "nearest",
                                           "to_world": BOX}},
    # a small, tilted, anisotropically scaled grid inside the box, repeating: the
    # medium ends at the world box of its unit cube (values repeat beyond the cube)
    "rotated-scaled": lambda tmp: {"type": "heterogeneous", "scale": 5.0, "albedo": 0.95,
                                   "sigma_t": {"type": "gridvolume", "data": smoke((4, 5, 6)), "wrap_mode": "repeat",
                                               "to_world": T().rotate([1, 0, 1], 35).translate([-0.5, -0.3, -0.4])
                                               .scale([0.9, 0.6, 0.5])}},
}


def _vol(tmp, values) -> str:
    path = str(tmp / "smoke.vol")
    write_vol(path, values)
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_image_matches_mitsuba_within_noise(name, tmp_path):
    d = hetero_scene(CASES[name](tmp_path))
    ref = mitsuba_renders(d)
    assert disagreements(our_renders(d), ref) == []


def test_constvolume_is_the_homogeneous_medium():
    """A constant heterogeneous medium whose box covers the shape renders
    as Mitsuba's homogeneous one (test_media's "spectral" case)."""
    const = {"type": "heterogeneous", "albedo": rgb(0.8, 0.6, 0.4), "phase": {"type": "hg", "g": 0.2},
             "sigma_t": {"type": "constvolume", "value": rgb(0.3, 0.6, 0.9),
                         "to_world": T().translate([-1.2, -1.2, -1.2]).scale(2.4)}}
    assert disagreements(our_renders(hetero_scene(const)), mitsuba_image("spectral")) == []


def test_transmittance_through_a_piecewise_constant_grid():
    """An absorbing slab of two layers (nearest lookups) in a null box of
    height 1: camera and shadow rays each cross both, so the floor's centre
    is rho / pi * I / h^2 * exp(-(s1 + s2) d / 2)^2 with d the grid's
    height; where the grid is thinner than the box, the rest of the box
    is empty (the medium ends at the grid's world box)."""
    s1, s2 = 0.9, 0.3
    for dz in (1.0, 0.4):
        d = slab_scene(0.0, 0.0, 1.0)
        d["slab"]["interior"] = {"type": "heterogeneous", "albedo": 0.0,
                                 "sigma_t": {"type": "gridvolume", "filter_type": "nearest",
                                             "data": np.array([s1, s2], np.float32).reshape(1, 2, 1),
                                             "to_world": T().translate([-10, 1.5 - dz / 2, -10]).scale([20, dz, 20])}}
        scene = jaxrender.load_dict(d)
        imgs = np.stack([np.asarray(jaxrender.render(scene, seed=k), np.float64) for k in range(8)])
        centre = imgs[:, 1:3, 1:3, 0].reshape(8, -1)
        expected = 0.5 / math.pi * math.exp(-(s1 + s2) * dz / 2) ** 2
        mean, se = centre.mean(), centre.mean(1).std(ddof=1) / math.sqrt(8)
        assert abs(mean - expected) < 4 * se + 2e-3 * expected, (dz, mean, expected, se)


# -- the .vol format, keys, errors ------------------------------------------------------------
def test_vol_files_round_trip_and_match_mitsubas(tmp_path):
    values = np.random.default_rng(3).random((3, 4, 5, 3)).astype(np.float32)
    ours = tmp_path / "ours.vol"
    write_vol(ours, values, [[0, -1, 0], [2, 1, 3]])
    back, bbox = read_vol(ours)
    assert np.array_equal(back, values) and np.array_equal(bbox, [[0, -1, 0], [2, 1, 3]])
    grid = mi.VolumeGrid(str(ours))                      # Mitsuba reads ours
    assert np.array_equal(np.asarray(grid), values) and math.isclose(grid.max(), values.max())
    theirs = tmp_path / "theirs.vol"
    mi.VolumeGrid(values[..., :1].copy()).write(str(theirs))   # and we read Mitsuba's
    assert np.array_equal(read_vol(theirs)[0], values[..., :1])


def test_params_keys_are_mitsubas(tmp_path):
    d = hetero_scene(CASES["albedo-grid"](tmp_path))
    d["fog"] = {"type": "heterogeneous", "sigma_t": {"type": "constvolume", "value": rgb(0.1, 0.2, 0.3)}}
    d["ball"] = {"type": "sphere", "radius": 0.2, "bsdf": {"type": "null"}, "exterior": {"type": "ref", "id": "fog"}}
    ours = jaxrender.load_dict(d).params
    theirs = mi.traverse(mi.load_dict(to_mitsuba(d)))
    keys = {k for k in theirs.keys() if "medium" in k or k.startswith("fog.")}
    assert keys == {k for k in ours if "medium" in k or k.startswith("fog.")}
    for k in keys:
        assert np.allclose(np.ravel(ours[k]) * np.ones(1), np.ravel(theirs[k]) * np.ones(1), rtol=1e-6), k


def test_grid_data_is_a_parameter():
    """Changing the grid through params changes the render (and its majorant)."""
    d = hetero_scene(CASES["rotated-scaled"](None))
    d["sensor"]["film"].update(width=8, height=8)
    scene = jaxrender.load_dict(d)
    key = "box.interior_medium.sigma_t.data"
    a = np.asarray(jaxrender.render(scene, seed=1))
    b = np.asarray(jaxrender.render(scene, {key: scene.params[key] * 0.0}, seed=1))
    c = np.asarray(jaxrender.render(scene, {key: scene.params[key] * 1.0}, seed=1))
    assert np.array_equal(a, c) and not np.allclose(a, b)


def test_majorant_has_headroom_or_is_max_value():
    """The majorant (scale times the grid bound, in the medium's row) lies
    1/8 above the grid's largest value, so null collisions sample sigma_t's
    derivative even at its peak; a max_value is taken as given while it
    bounds the values, and the automatic one takes over once parameter
    values pass it."""
    from jaxrender.kernels import layout
    grid = smoke((4, 4, 4))
    peak = float(grid.max())

    def majorant(max_value=None, data=None):
        sigma_t = {"type": "gridvolume", "data": grid, "to_world": BOX}
        if max_value is not None:
            sigma_t["max_value"] = max_value
        scene = jaxrender.load_dict(hetero_scene({"type": "heterogeneous", "scale": 2.0, "sigma_t": sigma_t}))
        params = dict(scene.params)
        if data is not None:
            params["box.interior_medium.sigma_t.data"] = data
        row = scene.param_buffers(params, media=True)["medium_data"][0]
        return row[layout.MEDIUM_MAJORANT:layout.MEDIUM_MAJORANT + 3]

    assert np.allclose(majorant(), 2.0 * peak * 1.125)
    assert np.allclose(majorant(max_value=1.5 * peak), 2.0 * 1.5 * peak)
    assert np.allclose(majorant(max_value=peak), 2.0 * peak)
    assert np.allclose(majorant(max_value=1.5 * peak, data=grid[..., None] * 2), 2.0 * 2 * peak * 1.125)


@pytest.mark.parametrize("sigma_t,match", [
    ({"type": "gridvolume", "data": np.zeros((2, 2, 2, 6), np.float32)}, "1 or 3 channels"),
    ({"type": "gridvolume", "filename": "missing.vol"}, "does not exist"),
    ({"type": "gridvolume", "data": np.ones((2, 2, 2), np.float32), "use_grid_bbox": True}, "needs a volume file"),
    ({"type": "gridvolume", "data": np.ones((2, 2, 2), np.float32), "filter_type": "cubic"}, "cubic"),
    ({"type": "gridvolume", "data": -np.ones((2, 2, 2), np.float32)}, "must not be negative"),
    ({"type": "gridvolume"}, "exactly one of 'filename' and 'data'"),
    ({"type": "bitmap", "filename": "x.png"}, "'bitmap' volume is not supported"),
    ({"type": "gridvolume", "data": np.ones((2, 2, 2), np.float32), "max_value": 0.5}, "max_value.*below"),
])
def test_unsupported_volumes_are_clear_errors(sigma_t, match):
    with pytest.raises(SceneError, match=match):
        jaxrender.load_dict(hetero_scene({"type": "heterogeneous", "sigma_t": sigma_t}))



# -- lookups against Mitsuba's gridvolume -------------------------------------------------------
@pytest.fixture(scope="module")
def lookup_kernel():
    from jaxrender import ir
    from jaxrender.ir import Vec
    from jaxrender.kernels.media import volume

    def body(tex_meta, texels, pts, tex):
        i = ir.item_index()
        p = Vec(*(pts.read(i, k) for k in range(3)))
        value, inside = volume.lookup({"tex_meta": tex_meta, "texels": texels}, tex.value, p)
        return {"out": (*value, ir.select(inside, 1.0, 0.0))}
    return ir.trace(body, {"tex_meta": ir.In("i32", (8,)), "texels": ir.In("f32"), "pts": ir.In("f32", (3,)),
                           "tex": ir.Scalar("i32")}, {"out": ir.Out("f32", (4,))}, name="volume_lookup")


@pytest.mark.parametrize("filt,wrap,channels,grid_bbox", [
    ("trilinear", "clamp", 1, False), ("nearest", "repeat", 3, False), ("trilinear", "mirror", 3, False),
    ("nearest", "clamp", 1, False), ("trilinear", "clamp", 3, True)])
def test_lookups_match_mitsubas_gridvolume(lookup_kernel, tmp_path, filt, wrap, channels, grid_bbox):
    """Values and world boxes at random points, in and around the volume:
    filters, wrap modes, to_world (and the file's box with use_grid_bbox)."""
    from jaxrender.primitives import launch
    rng = np.random.default_rng(4)
    data = rng.random((3, 4, 5, channels)).astype(np.float32)
    to_world = T().translate([0.2, -0.1, 0.3]).rotate([1, 2, 0], 40).scale([1.5, 0.7, 1.1])
    vol = {"type": "gridvolume", "data": data, "filter_type": filt, "wrap_mode": wrap, "to_world": to_world}
    if grid_bbox:
        del vol["data"]
        vol.update(filename=str(tmp_path / "g.vol"), use_grid_bbox=True)
        write_vol(vol["filename"], data, [[-0.5, 0.0, 0.2], [0.5, 0.8, 1.0]])
    scene = jaxrender.load_dict(hetero_scene({"type": "heterogeneous", "sigma_t": vol}))
    buffers = scene.kernel_inputs()
    tex = next(i for i, t in enumerate(scene.textures) if t.depth == 3)
    pts = rng.uniform(-1.5, 2.5, (300, 3)).astype(np.float32)
    out = np.asarray(launch(lookup_kernel, (len(pts),), tex_meta=buffers["tex_meta"], texels=buffers["texels"],
                            pts=pts, tex=np.int32(tex))["out"])
    ref = mi.load_dict(to_mitsuba(vol))
    it = mi.Interaction3f()
    expected = []
    for p in pts:
        it.p = mi.Point3f(*p)
        expected.append(np.asarray(ref.eval(it)) * np.ones(3))
    bbox = ref.bbox()
    inside = [bbox.contains(mi.Point3f(*p)) for p in pts]
    assert np.allclose(out[:, :3], np.array(expected), atol=1e-4)
    assert np.array_equal(out[:, 3] > 0.5, inside) and 0 < sum(inside) < len(pts)


def test_heterogeneous_and_homogeneous_media_in_one_scene(tmp_path):
    """Both kinds in one kernel (a branch on the medium's kind)."""
    d = hetero_scene(CASES["smoke-file"](tmp_path))
    d["ball"] = {"type": "sphere", "center": [0.0, -0.7, 1.4], "radius": 0.3, "bsdf": {"type": "null"},
                 "interior": {"type": "homogeneous", "sigma_t": 3.0, "albedo": rgb(0.2, 0.9, 0.2)}}
    assert disagreements(our_renders(d), mitsuba_renders(d)) == []


def test_grid_media_kernels_prefer_one_lane_packets(monkeypatch, tmp_path):
    """Delta tracking diverges per lane: volpath asks for one-lane code in
    scenes with a grid medium (the host's width elsewhere), and
    $JAXRENDER_SIMD_LANES still decides when set."""
    from jaxrender.kernels import integrators
    from jaxrender.lowering import cpu
    monkeypatch.delenv("JAXRENDER_SIMD_LANES", raising=False)
    scene = jaxrender.load_dict(hetero_scene(CASES["smoke-file"](tmp_path)))
    volpath = integrators.create(scene.integrator)
    assert volpath.simd_lanes(scene.structure) == 1 and cpu.simd_lanes(1) == 1
    homogeneous = dataclasses.replace(scene.structure, media=("homogeneous",))
    assert volpath.simd_lanes(homogeneous) is None
    monkeypatch.setenv("JAXRENDER_SIMD_LANES", "4")
    assert cpu.simd_lanes(1) == 4
