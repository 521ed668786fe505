"""The aov integrator against Mitsuba 3 (reference made by
tests/references/make_references.py), channel by channel, judged against
Monte Carlo noise (the pixel filter mixes values across edges); its channel
layout; and its errors."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "references"))

from scenes import AOV_VARIANTS, AOVS, SHAPE_AOVS  # noqa: E402

import jaxrender  # noqa: E402

NAMES = ["dd.T", "pp.X", "pp.Y", "pp.Z", "uv.U", "uv.V", "nn.X", "nn.Y", "nn.Z", "sh.X", "sh.Y", "sh.Z",
         "al.R", "al.G", "al.B"]
UV = [NAMES.index("uv.U"), NAMES.index("uv.V")]


def scene(name="cbox_aovs", **integrator):
    d = AOV_VARIANTS[name](jaxrender.cornell_box())
    d["integrator"].update(integrator)
    return jaxrender.load_dict(d)


def our_renders(s, k=16, spp=64) -> np.ndarray:
    return np.stack([np.asarray(jaxrender.render(s, spp=spp, seed=10 + i), np.float64) for i in range(k)])


def disagreements(renders, ref, channels, names=NAMES) -> list[str]:
    k = len(renders)
    ours = renders.mean(0)[..., channels]
    mean = ref["mean"].astype(np.float64)[..., channels]
    se = np.sqrt(ref["stderr"].astype(np.float64)[..., channels] ** 2 + renders.var(0, ddof=1)[..., channels] / k)
    se = np.maximum(se, 1e-4 * (1.0 + np.abs(mean)))
    z = (ours - mean) / se
    problems = []
    beyond = np.mean(np.abs(z) > 5, axis=(0, 1))
    for c, frac in zip(channels, beyond):
        if frac >= 0.02:   # edge pixels mix faces through the filter: heavy-tailed
            problems.append(f"{names[c]}: {frac:.1%} of pixels beyond 5 sigma")
    # channel means over the image (Mitsuba's splatting correlates its pixel errors: x2)
    diff = ours.mean((0, 1)) - mean.mean((0, 1))
    se_img = np.sqrt(renders.mean((1, 2))[..., channels].var(0, ddof=1) / k
                     + (2 * np.sqrt((ref["stderr"][..., channels].astype(np.float64) ** 2).mean((0, 1))
                                    / mean[..., 0].size)) ** 2) + 1e-6
    for c, dz in zip(channels, np.abs(diff) / se_img):
        if dz > 5:
            problems.append(f"{names[c]}: image means differ by {dz:.1f} standard errors")
    return problems


@pytest.fixture(scope="module")
def renders_and_ref():
    s = scene()
    return our_renders(s), np.load(HERE / "data" / "references" / "cbox_aovs.npz")


def test_channels_are_mitsubas():
    s = scene()
    assert jaxrender.aov_names(s) == NAMES
    img = jaxrender.render(s, spp=1)
    assert img.shape == (24, 24, len(NAMES)) and img.dtype == np.float32
    ref = np.load(HERE / "data" / "references" / "cbox_aovs.npz")
    assert ref["mean"].shape == img.shape      # what mi.render returned for the same integrator


def test_aovs_match_mitsuba_within_noise(renders_and_ref):
    renders, ref = renders_and_ref
    channels = [c for c in range(len(NAMES)) if c not in UV]
    assert disagreements(renders, ref, channels) == []


def test_uv_is_zero_until_jaxrender_has_uvs(renders_and_ref):
    renders, _ = renders_and_ref
    assert np.all(renders[..., UV] == 0)


def test_a_wrong_aov_is_detected(renders_and_ref):
    """Control: depth 1% too large, or normals from the wrong side, fail."""
    renders, ref = renders_and_ref
    deeper = renders.copy()
    deeper[..., 0] *= 1.01
    assert disagreements(deeper, ref, [0]) != []
    flipped = renders.copy()
    flipped[..., 6:9] *= -1
    assert disagreements(flipped, ref, [6, 7, 8]) != []


SHAPE_NAMES = ["dd.T", "nn.X", "nn.Y", "nn.Z", "sh.X", "sh.Y", "sh.Z", "uv.U", "uv.V"]


def test_shape_aovs_match_mitsuba_within_noise():
    """Spheres (rotated: their UVs; flipped: their normals), a disk, a smooth
    OBJ, a PLY with computed normals and the Cornell box's rectangles: depth,
    both normals and UVs (the scene is textured, so jaxrender computes them)."""
    s = scene("shapes_aovs")
    assert jaxrender.aov_names(s) == SHAPE_NAMES and s.integrator["aovs"] == SHAPE_AOVS
    renders = our_renders(s, k=8)
    ref = np.load(HERE / "data" / "references" / "shapes_aovs.npz")
    assert disagreements(renders, ref, list(range(9)), SHAPE_NAMES) == []
    # Controls: geometric normals for shading normals, or UVs off by 2%, fail.
    faceted = renders.copy()
    faceted[..., 4:7] = renders[..., 1:4]
    assert disagreements(faceted, ref, [4, 5, 6], SHAPE_NAMES) != []
    shifted = renders.copy()
    shifted[..., 7:9] *= 1.02
    assert disagreements(shifted, ref, [7, 8], SHAPE_NAMES) != []


def test_jit_and_misses():
    d = AOV_VARIANTS["cbox_aovs"](jaxrender.cornell_box())
    d["integrator"]["aovs"] = "d:depth,n:geo_normal"
    d["sensor"]["fov"] = 80.0       # sees past the box: nothing there
    # The box seen at 24x24 is a few pixels per face: only a one-pixel
    # filter leaves pixels that see one face alone.
    d["sensor"]["film"]["rfilter"] = {"type": "box"}
    s = jaxrender.load_dict(d)
    img = np.asarray(jax.jit(lambda seed: jaxrender.render(s, spp=2, seed=seed))(np.uint32(3)))
    assert img.shape == (24, 24, 4)
    assert np.all(img[0, 0] == 0)                      # a miss: 0 in every channel
    norm = np.linalg.norm(img[..., 1:], axis=-1)
    assert np.all(norm <= 1 + 1e-5)                    # filtered unit normals
    inside = norm > 0.999                              # pixels seeing one face only
    assert inside.mean() > 0.1 and np.all(img[..., 0][inside] > 1.0)


def test_aov_is_not_differentiable():
    s = scene()
    key = "small-box.bsdf.diffuse_reflectance.value"
    f = lambda x: jnp.sum(jaxrender.render(s, {key: x}, spp=1))
    with pytest.raises(jaxrender.NotDifferentiableError, match="aov integrator is not differentiable"):
        jax.grad(f)(jnp.asarray(s.params[key]))


@pytest.mark.parametrize("aovs, message", [
    ("dd:depth,xx:prim_index", "integrator.aovs: unknown AOV type 'prim_index'"),
    ("dd:depth,nonsense", "integrator.aovs: 'nonsense' is not a 'name:type' pair"),
    ("", "integrator.aovs: expected a non-empty string"),
    (3, "integrator.aovs: expected a non-empty string"),
])
def test_bad_aov_specs_raise(aovs, message):
    d = jaxrender.cornell_box()
    d["integrator"] = {"type": "aov", "aovs": aovs}
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)


def test_nested_integrator_is_refused():
    d = jaxrender.cornell_box()
    d["integrator"] = {"type": "aov", "aovs": AOVS, "image": {"type": "path"}}
    with pytest.raises(jaxrender.SceneError, match="integrator.image: integrators nested in an aov"):
        jaxrender.load_dict(d)
    with pytest.raises(jaxrender.SceneError, match="not 'aov'"):
        jaxrender.aov_names(jaxrender.load_dict(jaxrender.cornell_box()))


def test_cli_writes_named_aov_channels(tmp_path, capsys):
    from jaxrender import cli
    xml = tmp_path / "a.xml"
    xml.write_text("""<scene version="3.0.0">
      <integrator type="aov"><string name="aovs" value="dd:depth,nn:geo_normal"/></integrator>
      <sensor type="perspective">
        <transform name="to_world"><lookat origin="0, 0, 4" target="0, 0, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="6"/><integer name="height" value="6"/></film>
      </sensor>
      <shape type="rectangle" id="wall"/>
    </scene>""")
    cli.main(["render", str(xml), "-o", str(tmp_path / "a.exr"), "--spp", "2", "-q"])
    import OpenEXR
    ch = OpenEXR.File(str(tmp_path / "a.exr")).channels()
    assert {"dd.T", "nn.X", "nn.Y", "nn.Z"} <= set(ch)
    assert abs(ch["dd.T"].pixels[3, 3] - 4.0) < 0.05     # the wall, about 4 away along the ray
    assert np.isclose(ch["nn.Z"].pixels[3, 3], 1.0)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        cli.main(["render", str(xml), "-o", str(tmp_path / "a.png"), "--spp", "1", "-q"])
    assert exc.value.code == 2 and "named channels" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


@pytest.mark.parametrize("camera, size", [
    ({}, (8, 8)),                                   # Mitsuba's default: 50mm lens, diagonal field of view
    ({}, (10, 6)),
    ({"focal_length": "28mm"}, (6, 9)),
    ({"fov": 30.0, "fov_axis": "y"}, (9, 6)),
    ({"fov": 50.0, "fov_axis": "diagonal"}, (8, 5)),
    ({"fov": 25.0, "fov_axis": "smaller"}, (5, 8)),
])
def test_camera_field_of_view_matches_mitsuba(camera, size):
    """Where each pixel looks (positions on a wall filling the view) equals
    Mitsuba's, for its default lens and every fov_axis."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")

    def scene_dict(transform):
        return {"type": "scene", "integrator": {"type": "aov", "aovs": "p:position"},
                "sensor": {"type": "perspective", **camera,
                           "to_world": transform().look_at(origin=[0, 0, 3], target=[0, 0, 0], up=[0, 1, 0]),
                           "film": {"type": "hdrfilm", "width": size[0], "height": size[1],
                                    "rfilter": {"type": "box"}}},
                "wall": {"type": "rectangle", "to_world": transform().scale([10.0, 10.0, 1.0])}}

    from jaxrender.scene.transform import Transform
    ours = np.asarray(jaxrender.render(jaxrender.load_dict(scene_dict(Transform)), spp=1024, seed=1))
    ref = np.array(mi.render(mi.load_dict(scene_dict(mi.ScalarTransform4f)), spp=1024))
    assert ours.shape == ref.shape == (size[1], size[0], 3)
    # pixel means of a linear function: noise ~1% of a pixel; a wrong field
    # of view moves border pixels by a large fraction of one
    spacing = abs(float(ours[0, 1, 0] - ours[0, 0, 0]))
    np.testing.assert_allclose(ours[..., :2], ref[..., :2], atol=0.08 * spacing)


@pytest.mark.parametrize("camera, message", [
    ({"fov": 30.0, "focal_length": "50mm"}, "sensor: give either fov or focal_length"),
    ({"focal_length": "long"}, "sensor.focal_length: expected '<x>mm'"),
    ({"focal_length": "-5mm"}, "sensor.focal_length: must be positive"),
])
def test_bad_camera_lens_raises(camera, message):
    d = jaxrender.cornell_box()
    d["sensor"].pop("fov")
    d["sensor"].update(camera)
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)
