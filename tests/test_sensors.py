"""The ``thinlens`` and ``orthographic`` sensors against Mitsuba 3: the ray
of each film position and aperture sample (Mitsuba's ``sample_ray``),
images within noise of Mitsuba's renders, and bad properties.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.kernels import layout, sensors
from jaxrender.primitives import launch
from jaxrender.scene.transform import Transform
from test_film import _agree, _mitsuba_renders, _ours_renders
from test_scene_parsing import to_mitsuba

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

LOOK = Transform().look_at([0.3, 0.2, 3.9], [0.0, -0.1, 0.0], [0.0, 1.0, 0.0])
SENSORS = {
    "thinlens": {"type": "thinlens", "fov": 39.3, "aperture_radius": 0.15, "focus_distance": 3.0},
    "orthographic": {"type": "orthographic", "to_world": LOOK @ Transform().scale([1.2, 1.2, 1.0])},
    "perspective": {"type": "perspective", "fov": 39.3, "near_clip": 0.5},
}


def _scene(kind: str, width=20, height=14, **extra) -> dict:
    d = jaxrender.cornell_box()
    sensor = dict(SENSORS[kind], **extra)
    sensor.setdefault("to_world", LOOK)
    d["sensor"] = dict(sensor, film={"type": "hdrfilm", "width": width, "height": height,
                                      "rfilter": {"type": "gaussian"}},
                       sampler={"type": "independent", "sample_count": 16})
    d["integrator"] = {"type": "path", "max_depth": 3}
    return d


@functools.cache
def ray_kernel(kind: str) -> ir.Kernel:
    def body(camera, u):
        i = ir.item_index()
        ctx = type("Ctx", (), {"b": {"camera": camera}})()
        o, d, t_min, t_max = sensors.TYPES[kind].sample_ray(ctx, u.read(i, 0), u.read(i, 1),
                                                            (u.read(i, 2), u.read(i, 3)))
        start = o + d * t_min
        return {"o": (start.x, start.y, start.z), "d": (d.x, d.y, d.z), "length": t_max - t_min}
    return ir.trace(body, {"camera": ir.In("f32", (layout.CAMERA_ROW,)), "u": ir.In("f32", (4,))},
                    {"o": ir.Out("f32", (3,)), "d": ir.Out("f32", (3,)), "length": ir.Out("f32")},
                    name=f"sensor_rays_{kind}")


@pytest.mark.parametrize("kind", sorted(SENSORS))
def test_rays_match_mitsubas_sample_ray(kind):
    """Where each ray starts (on the near plane), its direction and its
    length, for film positions and aperture samples over the whole square."""
    d = _scene(kind)
    scene = jaxrender.load_dict(d)
    sensor = mi.load_dict(to_mitsuba(mi, d)["sensor"])
    u = np.random.default_rng(1).random((300, 4)).astype(np.float32)
    u[:4, :2] = [[0, 0], [1, 1], [0, 1], [0.5, 0.5]]          # corners and centre of the film
    out = launch(ray_kernel(kind), (len(u),), camera=np.asarray(scene.kernel_inputs()["camera"]), u=u)
    ref_o, ref_d, ref_len = [], [], []
    for q in u.astype(np.float64):
        ray, _ = sensor.sample_ray(0.0, 0.5, mi.Point2f(q[0], q[1]), mi.Point2f(q[2], q[3]))
        ref_o.append(np.array(ray.o))
        ref_d.append(np.array(ray.d))
        ref_len.append(float(ray.maxt))
    np.testing.assert_allclose(np.asarray(out["d"]), np.array(ref_d), atol=2e-5)
    np.testing.assert_allclose(np.asarray(out["o"]), np.array(ref_o), atol=2e-4)
    np.testing.assert_allclose(np.asarray(out["length"]), np.array(ref_len), rtol=1e-4)


def test_thin_lens_rays_of_a_film_position_meet_on_the_focal_plane():
    d = _scene("thinlens")
    scene = jaxrender.load_dict(d)
    u = np.random.default_rng(2).random((200, 4)).astype(np.float32)
    u[:, :2] = [0.3, 0.7]
    out = launch(ray_kernel("thinlens"), (len(u),), camera=np.asarray(scene.kernel_inputs()["camera"]), u=u)
    m = np.asarray(d["sensor"]["to_world"].matrix)
    inv = np.linalg.inv(m)
    o = np.asarray(out["o"]) @ inv[:3, :3].T + inv[:3, 3]          # camera space
    dirs = np.asarray(out["d"]) @ inv[:3, :3].T
    focal = o + dirs * ((3.0 - o[:, 2]) / dirs[:, 2])[:, None]
    assert np.ptp(focal[:, :2], axis=0).max() < 1e-4             # one point in focus
    apertures = o - dirs * (o[:, 2] / dirs[:, 2])[:, None]        # back to the lens plane z = 0
    r = np.linalg.norm(apertures[:, :2], axis=1)
    assert r.max() <= 0.15 + 1e-5 and r.max() > 0.12             # they fill the aperture


@pytest.mark.parametrize("kind", ["thinlens", "orthographic"])
def test_images_match_mitsuba_within_noise(kind):
    d = _scene(kind)
    _agree(_ours_renders(d, 16, 6), _mitsuba_renders(d, 16, 6, seed0=50))


def test_thin_lens_with_a_crop_window_and_alpha():
    d = _scene("thinlens")
    d["sensor"]["film"].update(crop_offset_x=4, crop_offset_y=3, crop_width=10, crop_height=8, pixel_format="rgba")
    ours, theirs = _ours_renders(d, 16, 6), _mitsuba_renders(d, 16, 6, seed0=50)
    assert ours.shape[1:] == (8, 10, 4)
    _agree(ours, theirs)


@pytest.mark.parametrize("kind, edit, match", [
    ("thinlens", lambda s: s.pop("aperture_radius"), "thinlens needs an aperture_radius"),
    ("thinlens", lambda s: s.update(focus_distance=-1.0), "focus_distance"),
    ("thinlens", lambda s: s.update(to_world=Transform().scale([2.0, 2.0, 2.0])), "must not scale"),
    ("orthographic", lambda s: s.update(fov=30.0), 'unreferenced property "fov"'),
    ("orthographic", lambda s: s.update(to_world=Transform().scale([1.0, 0.0, 1.0])), "singular"),
    ("orthographic", lambda s: s.update(near_clip=2.0, far_clip=1.0), "near_clip"),
])
def test_bad_sensor_properties_raise(kind, edit, match):
    d = _scene(kind)
    edit(d["sensor"])
    with pytest.raises(jaxrender.SceneError, match=match):
        jaxrender.load_dict(d)


def test_an_orthographic_camera_may_scale_in_params_a_perspective_one_may_not():
    ortho = jaxrender.load_dict(_scene("orthographic"))
    m = np.asarray(ortho.params["sensor.to_world"]) @ np.diag([2.0, 2.0, 1.0, 1.0])
    wide = np.asarray(jaxrender.render(ortho, {"sensor.to_world": m}, spp=4))
    assert np.isfinite(wide).all()
    persp = jaxrender.load_dict(_scene("perspective"))
    with pytest.raises(jaxrender.SceneError, match="rotation and translation"):
        jaxrender.render(persp, {"sensor.to_world": m}, spp=1)
