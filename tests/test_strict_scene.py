"""Strict scene loading, checked against Mitsuba 3.9.1 (``scalar_rgb``).

* A property no loader reads is an error naming the plugin type, its key
  and the property (and, from XML, the file and line), for every plugin
  type jaxrender loads; Mitsuba rejects the same property, so a valid
  Mitsuba scene is never refused for it.
* Every property Mitsuba's plugin reads is honoured or refused as "not
  supported yet" (never "unreferenced"), and Mitsuba reads it indeed.
* Values jaxrender honours that it used to ignore (filter shapes, the
  sampler's seed, ply texture flips, conductor presets) load as Mitsuba's.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import jaxrender
from jaxrender.ir import Vec
from jaxrender.kernels import textures as ktex
from jaxrender.kernels.bsdfs import base, diffuse
from jaxrender.kernels.bsdfs import registry as bsdf_registry
from jaxrender.scene.conductors import complex_ior
from jaxrender.scene.loaders.registry import MITSUBA_PLUGINS
from jaxrender.scene.transform import Transform

DATA = Path(__file__).resolve().parent / "data"
SKY = str(DATA / "textures" / "sky32x16.exr")
PNG = str(DATA / "textures" / "grey8.png")
OBJ = str(DATA / "meshes" / "lowpoly_sphere.obj")
PLY = str(DATA / "meshes" / "lowpoly_torus.ply")


@pytest.fixture(scope="module")
def mi():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    return mi


def small_box() -> dict:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 8
    return d


# Every plugin type jaxrender loads: (key path in the small Cornell box, a
# minimal dict of it (None: the box's own), a misspelt property name).
PLUGINS = {
    "diffuse": ("floor.bsdf", {"type": "diffuse"}, "reflectanse"),
    "conductor": ("floor.bsdf", {"type": "conductor"}, "specular_reflectanse"),
    "roughconductor": ("floor.bsdf", {"type": "roughconductor"}, "alpah"),
    "plastic": ("floor.bsdf", {"type": "plastic"}, "nonlinaer"),
    "roughplastic": ("floor.bsdf", {"type": "roughplastic"}, "diffuse_reflectence"),
    "dielectric": ("floor.bsdf", {"type": "dielectric"}, "int_ir"),
    "thindielectric": ("floor.bsdf", {"type": "thindielectric"}, "ext_ir"),
    "roughdielectric": ("floor.bsdf", {"type": "roughdielectric"}, "distributoin"),
    "principled": ("floor.bsdf", {"type": "principled"}, "base_colour"),
    "principledthin": ("floor.bsdf", {"type": "principledthin"}, "diff_tran"),
    "twosided": ("floor.bsdf", {"type": "twosided", "inner": {"type": "diffuse"}}, "two_sided"),
    "blendbsdf": ("floor.bsdf", {"type": "blendbsdf", "weight": 0.3, "a": {"type": "diffuse"},
                                 "b": {"type": "conductor"}}, "wieght"),
    "mask": ("floor.bsdf", {"type": "mask", "inner": {"type": "diffuse"}}, "opacty"),
    "area": ("floor.emitter", {"type": "area"}, "radiancee"),
    "point": ("bulb", {"type": "point"}, "intensty"),
    "spot": ("bulb", {"type": "spot"}, "cutoff"),
    "directional": ("bulb", {"type": "directional"}, "irradiance_"),
    "constant": ("bulb", {"type": "constant"}, "radiance_scale"),
    "envmap": ("bulb", {"type": "envmap", "filename": SKY}, "scales"),
    "rectangle": ("thing", {"type": "rectangle"}, "flip_normal"),
    "cube": ("thing", {"type": "cube"}, "face_normal"),
    "obj": ("thing", {"type": "obj", "filename": OBJ}, "flip_texcoords"),
    "ply": ("thing", {"type": "ply", "filename": PLY}, "filename_"),
    "sphere": ("thing", {"type": "sphere"}, "raduis"),
    "disk": ("thing", {"type": "disk"}, "radius"),
    "perspective": ("sensor", None, "fov_axes"),
    "hdrfilm": ("sensor.film", None, "widht"),
    "box": ("sensor.film.rfilter", {"type": "box"}, "radius"),
    "tent": ("sensor.film.rfilter", {"type": "tent"}, "stddev"),
    "gaussian": ("sensor.film.rfilter", {"type": "gaussian"}, "radius"),
    "lanczos": ("sensor.film.rfilter", {"type": "lanczos"}, "lobe"),
    "mitchell": ("sensor.film.rfilter", {"type": "mitchell"}, "b"),
    "catmullrom": ("sensor.film.rfilter", {"type": "catmullrom"}, "radius"),
    "independent": ("sensor.sampler", None, "sample_cont"),
    "stratified": ("sensor.sampler", {"type": "stratified"}, "jiter"),
    "multijitter": ("sensor.sampler", {"type": "multijitter"}, "strength"),
    "orthogonal": ("sensor.sampler", {"type": "orthogonal"}, "strenght"),
    "ldsampler": ("sensor.sampler", {"type": "ldsampler"}, "jitter"),
    "path": ("integrator", {"type": "path"}, "max_dept"),
    "direct": ("integrator", {"type": "direct"}, "max_depth"),
    "aov": ("integrator", {"type": "aov", "aovs": "dd:depth"}, "aov"),
    "bitmap": ("floor.bsdf.reflectance", {"type": "bitmap", "filename": PNG}, "filter"),
    "checkerboard": ("floor.bsdf.reflectance", {"type": "checkerboard"}, "color2"),
}
MITSUBA_DEFAULTS = {"perspective": {"type": "perspective", "fov": 40.0}, "hdrfilm": {"type": "hdrfilm"},
                    "independent": {"type": "independent"}}


def with_plugin(d: dict, path: str, spec: dict | None, **props) -> dict:
    """``d`` with the plugin at ``path`` replaced by ``spec`` (None: kept)
    plus ``props``."""
    *parents, name = path.split(".")
    node = d
    for p in parents:
        if node.get(p, {}).get("type") == "ref":
            node[p] = {"type": "diffuse"}
        node = node.setdefault(p, {"type": "diffuse"})
    node[name] = dict(node[name] if spec is None else spec, **props)
    return d


def mitsuba_dict(plugin: str, **props) -> dict:
    path, spec, _ = PLUGINS[plugin]
    return dict(spec or MITSUBA_DEFAULTS[plugin], **props)


# ---------------------------------------------------------------------------
# Mitsuba XML from a scene dict (each property on a line of its own)
# ---------------------------------------------------------------------------
def _tag(plugin: str) -> str:
    return next((c for c, names in MITSUBA_PLUGINS.items() if plugin in names), "bsdf")


def to_xml(d: dict) -> str:
    lines = ['<scene version="3.0.0">']
    for k, v in d.items():
        if k != "type":
            lines += _entry(k, v, "  ", top=True)
    return "\n".join(lines + ["</scene>"])


def _entry(name: str, v, indent: str, top: bool = False) -> list[str]:
    if isinstance(v, dict) and v["type"] == "ref":
        return [f'{indent}<ref id="{v["id"]}" name="{name}"/>']
    if isinstance(v, dict) and v["type"] == "rgb":
        return [f'{indent}<rgb name="{name}" value="{", ".join(map(str, v["value"]))}"/>']
    if isinstance(v, dict):
        tag, attr = _tag(v["type"]), ("id" if top else "name")
        inner = [line for k, x in v.items() if k != "type" for line in _entry(k, x, indent + "  ")]
        return [f'{indent}<{tag} type="{v["type"]}" {attr}="{name}">', *inner, f"{indent}</{tag}>"]
    if isinstance(v, Transform):
        m = ", ".join(str(float(x)) for x in np.asarray(v.matrix).reshape(-1))
        return [f'{indent}<transform name="{name}"><matrix value="{m}"/></transform>']
    if isinstance(v, bool):
        return [f'{indent}<boolean name="{name}" value="{str(v).lower()}"/>']
    if isinstance(v, int):
        return [f'{indent}<integer name="{name}" value="{v}"/>']
    if isinstance(v, float):
        return [f'{indent}<float name="{name}" value="{v!r}"/>']
    if isinstance(v, (list, tuple)):
        return [f'{indent}<point name="{name}" value="{", ".join(map(str, v))}"/>']
    return [f'{indent}<string name="{name}" value="{v}"/>']


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# ---------------------------------------------------------------------------
# Unreferenced properties
# ---------------------------------------------------------------------------
def unreferenced(plugin: str, key: str, name: str) -> str:
    return rf'{plugin} plugin "{re.escape(key)}": unreferenced property "{name}"'


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_unreferenced_property_in_a_dict_names_plugin_key_and_property(plugin, mi):
    path, spec, typo = PLUGINS[plugin]
    d = with_plugin(small_box(), path, spec, **{typo: 0.5})
    with pytest.raises(jaxrender.SceneError, match="^" + unreferenced(plugin, path, typo)):
        jaxrender.load_dict(d)
    with pytest.raises(RuntimeError, match="unreferenced property"):
        mi.load_dict(mitsuba_dict(plugin, **{typo: 0.5}))


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_unreferenced_property_in_a_file_names_file_and_line(plugin, tmp_path):
    path, spec, typo = PLUGINS[plugin]
    text = to_xml(with_plugin(small_box(), path, spec, **{typo: 0.5}))
    f = tmp_path / "scene.xml"
    f.write_text(text)
    line = line_of(text, f'name="{typo}"')
    with pytest.raises(jaxrender.SceneError, match="^" + re.escape(f"{f}, line {line}: ") +
                       unreferenced(plugin, path, typo)) as info:
        jaxrender.load_file(f)
    assert info.value.filename == str(f) and info.value.line == line


def test_the_xml_of_the_cornell_box_loads_as_its_dict():
    a = jaxrender.load_dict(small_box())
    b = jaxrender.load_file(to_xml(small_box()))
    assert list(a.params) == list(b.params)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])


def test_unread_nested_plugins_and_unknown_scene_values_are_errors(mi):
    d = with_plugin(small_box(), "sensor.film", None, bsdf={"type": "diffuse"})
    with pytest.raises(jaxrender.SceneError, match=r'hdrfilm plugin "sensor.film": unreferenced property "bsdf" '
                                                   r"\(a nested diffuse plugin\)"):
        jaxrender.load_dict(d)
    with pytest.raises(RuntimeError, match="unreferenced property"):
        mi.load_dict({"type": "hdrfilm", "bsdf": {"type": "diffuse"}})
    d = small_box()
    d["resolution"] = 3
    with pytest.raises(jaxrender.SceneError, match='scene plugin "scene": unreferenced property "resolution"'):
        jaxrender.load_dict(d)
    with pytest.raises(RuntimeError, match="unreferenced property"):
        mi.load_dict({"type": "scene", "resolution": 3})


def test_several_unread_properties_are_all_named_and_close_names_suggested():
    d = with_plugin(small_box(), "floor.bsdf", {"type": "diffuse"}, reflectanse=0.5, glossy=1.0)
    with pytest.raises(jaxrender.SceneError) as info:
        jaxrender.load_dict(d)
    lines = str(info.value).splitlines()
    assert lines == ['diffuse plugin "floor.bsdf": unreferenced property "reflectanse" (did you mean \'reflectance\'?)',
                     'diffuse plugin "floor.bsdf": unreferenced property "glossy"']


def test_an_unused_bsdf_is_checked_too():
    d = small_box()
    d["unused"] = {"type": "plastic", "int_iro": 1.5}
    with pytest.raises(jaxrender.SceneError, match=unreferenced("plastic", "unused", "int_iro")):
        jaxrender.load_dict(d)


def test_a_bsdf_nested_under_any_name_is_the_shape_bsdf():
    """As in Mitsuba, a shape finds its BSDF by kind, not by key (XML gives
    a nested <bsdf id="..."> its id as key)."""
    d = small_box()
    del d["floor"]["bsdf"]
    d["floor"]["finish"] = {"type": "diffuse", "reflectance": 0.25}
    scene = jaxrender.load_dict(d)
    np.testing.assert_array_equal(scene.params["floor.finish.reflectance.value"], [0.25] * 3)


# ---------------------------------------------------------------------------
# What Mitsuba reads: honoured or "not supported yet"
# ---------------------------------------------------------------------------
T30 = Transform().rotate([0.0, 1.0, 0.0], 30.0)
# (plugin, property, value, None: honoured | the "not supported yet" subject)
MITSUBA_PROPERTIES = [
    ("diffuse", "reflectance", 0.3, None),
    ("conductor", "eta", 0.5, None), ("conductor", "k", 2.0, None), ("conductor", "material", "Au", None),
    ("conductor", "specular_reflectance", 0.9, None),
    ("roughconductor", "alpha", 0.2, None), ("roughconductor", "distribution", "ggx", None),
    ("roughconductor", "sample_visible", False, None), ("roughconductor", "material", "Cu", None),
    ("plastic", "int_ior", 1.6, None), ("plastic", "ext_ior", "water", None), ("plastic", "nonlinear", True, None),
    ("plastic", "diffuse_reflectance", 0.2, None), ("plastic", "specular_reflectance", 0.8, None),
    ("roughplastic", "alpha", 0.3, None), ("roughplastic", "distribution", "GGX", None),
    ("dielectric", "specular_transmittance", 0.7, None), ("thindielectric", "int_ior", "bk7", None),
    ("roughdielectric", "alpha", 0.2, None), ("roughdielectric", "sample_visible", True, None),
    ("twosided", "allow_transmission", False, None),
    ("principled", "base_color", 0.3, None), ("principled", "spec_trans", 0.5, None),
    ("principled", "specular", 0.3, None), ("principled", "eta", 1.3, None), ("principled", "flatness", 0.4, None),
    ("principled", "sheen_tint", 0.5, None), ("principled", "clearcoat_gloss", 0.5, None),
    ("principled", "main_specular_sampling_rate", 2.0, None),
    ("principledthin", "diff_trans", 0.7, None), ("principledthin", "eta", 1.2, None),
    ("principledthin", "spec_trans", 0.5, None), ("principledthin", "specular_transmittance_sampling_rate", 2.0, None),
    ("blendbsdf", "weight", 0.7, None), ("mask", "opacity", 0.2, None),
    ("area", "radiance", 2.0, None), ("area", "sampling_weight", 1.0, None),
    ("area", "sampling_weight", 2.0, "an emitter sampling_weight other than 1"),
    ("point", "position", [0.1, 0.2, 0.3], None), ("point", "to_world", T30, None),
    ("point", "intensity", 3.0, None),
    ("spot", "cutoff_angle", 30.0, None), ("spot", "beam_width", 10.0, None), ("spot", "to_world", T30, None),
    ("spot", "texture", {"type": "bitmap", "filename": PNG}, "textured spot lights"),
    ("directional", "direction", [0.0, -1.0, 0.0], None), ("directional", "to_world", T30, None),
    ("constant", "radiance", 0.5, None), ("constant", "to_world", T30, None),
    ("envmap", "scale", 2.0, None), ("envmap", "to_world", T30, None), ("envmap", "mis_compensation", False, None),
    ("envmap", "mis_compensation", True, "mis_compensation"),
    ("rectangle", "to_world", T30, None), ("rectangle", "flip_normals", True, None),
    ("rectangle", "face_normals", True, None), ("rectangle", "silhouette_sampling_weight", 2.0, None),
    ("rectangle", "interior", {"type": "homogeneous"}, None),
    ("rectangle", "interior", {"type": "heterogeneous"}, None),
    ("rectangle", "sensor", {"type": "irradiancemeter"}, "sensors attached to shapes"),
    ("rectangle", "attribute", {"type": "checkerboard"}, "texture attributes on shapes"),
    ("cube", "face_normals", True, None), ("obj", "flip_tex_coords", False, None),
    ("obj", "face_normals", True, None), ("ply", "flip_tex_coords", True, None), ("ply", "flip_normals", True, None),
    ("sphere", "center", [0.0, 1.0, 0.0], None), ("sphere", "radius", 0.5, None),
    ("sphere", "flip_normals", True, None), ("disk", "flip_normals", True, None),
    ("perspective", "far_clip", 50.0, None), ("perspective", "near_clip", 0.1, None),
    ("perspective", "focus_distance", 3.0, None), ("perspective", "fov_axis", "Y", None),
    ("perspective", "principal_point_offset_x", 0.0, None),
    ("perspective", "principal_point_offset_y", 0.1, "principal_point_offset_y = 0.1"),
    ("perspective", "shutter_open", 0.0, None), ("perspective", "shutter_close", 0.5, None),
    ("perspective", "medium", {"type": "homogeneous"}, None),
    ("hdrfilm", "pixel_format", "RGB", None), ("hdrfilm", "pixel_format", "rgba", None),
    ("hdrfilm", "pixel_format", "luminance_alpha", None),
    ("hdrfilm", "component_format", "float32", None),
    ("hdrfilm", "component_format", "float16", "component_format 'float16'"),
    ("hdrfilm", "file_format", "openexr", None), ("hdrfilm", "file_format", "pfm", "file_format 'pfm'"),
    ("hdrfilm", "crop_width", 8, None), ("hdrfilm", "crop_width", 4, None),
    ("hdrfilm", "crop_offset_y", 0, None), ("hdrfilm", "sample_border", False, None),
    ("hdrfilm", "sample_border", True, None), ("hdrfilm", "banner", False, None),
    ("tent", "radius", 1.5, None), ("gaussian", "stddev", 0.3, None), ("lanczos", "lobes", 2, None),
    ("mitchell", "B", 0.5, None), ("mitchell", "C", 0.2, None),
    ("independent", "sample_count", 16, None), ("independent", "seed", 7, None),
    ("stratified", "sample_count", 16, None), ("stratified", "seed", 7, None), ("stratified", "jitter", False, None),
    ("multijitter", "sample_count", 12, None), ("multijitter", "seed", 7, None),
    ("multijitter", "jitter", False, None), ("orthogonal", "sample_count", 25, None),
    ("orthogonal", "seed", 7, None), ("orthogonal", "jitter", False, None), ("orthogonal", "strength", 3, None),
    ("ldsampler", "sample_count", 64, None), ("ldsampler", "seed", 7, None),
    ("path", "max_depth", 3, None), ("path", "rr_depth", 2, None), ("path", "hide_emitters", True, None),
    ("path", "timeout", -1.0, None), ("path", "timeout", 5.0, "a render time limit"),
    ("path", "block_size", 16, None), ("path", "samples_per_pass", 4, None),
    ("direct", "shading_samples", 1, None), ("direct", "emitter_samples", 2, "emitter_samples = 2"),
    ("direct", "bsdf_samples", 4, "bsdf_samples = 4"), ("direct", "hide_emitters", True, None),
    ("aov", "hide_emitters", False, None), ("aov", "block_size", 8, None),
    ("bitmap", "raw", True, None), ("bitmap", "accel", False, None), ("bitmap", "wrap_mode", "clamp", None),
    ("bitmap", "filter_type", "nearest", None), ("bitmap", "to_uv", Transform().scale([2.0, 2.0, 1.0]), None),
    ("checkerboard", "color0", 0.9, None), ("checkerboard", "to_uv", Transform().scale([2.0, 2.0, 1.0]), None),
]


def _mitsuba_value(mi, value):
    return mi.ScalarTransform4f(np.asarray(value.matrix).tolist()) if isinstance(value, Transform) else value


@pytest.mark.parametrize("plugin, name, value, refused", MITSUBA_PROPERTIES,
                         ids=[f"{p}-{n}-{v}" for p, n, v, _ in MITSUBA_PROPERTIES])
def test_every_property_mitsuba_reads_is_honoured_or_refused_as_not_supported(plugin, name, value, refused, mi):
    path, spec, _ = PLUGINS[plugin]
    d = with_plugin(small_box(), path, spec, **{name: value})
    if refused is None:
        jaxrender.load_dict(d)
    else:
        with pytest.raises(jaxrender.SceneError, match=re.escape(f"{path}.{name}: {refused}")) as info:
            jaxrender.load_dict(d)
        assert "is not supported yet" in str(info.value) or "are not supported yet" in str(info.value)
    try:
        mi.load_dict(mitsuba_dict(plugin, **{name: _mitsuba_value(mi, value)}))
    except RuntimeError as exc:     # e.g. a medium needs a scene: only "unreferenced" would be wrong
        assert "unreferenced" not in str(exc)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["floor"].update(bsdf={"type": "twosided", "front": {"type": "diffuse"},
                                       "back": {"type": "hair"}}),
     "floor.bsdf.brdf_1: bsdf type 'hair' is not supported yet"),
    (lambda d: d["floor"].update(bsdf={"type": "twosided", "a": {"type": "mask", "b": {"type": "diffuse"}}}),
     "floor.bsdf: twosided cannot hold a transmissive BSDF (mask) unless allow_transmission is set"),
    (lambda d: d["floor"].update(bsdf={"type": "blendbsdf", "weight": 0.5, "b": {"type": "diffuse"}}),
     "floor.bsdf: blendbsdf takes 2 nested BSDFs, got 1"),
    (lambda d: d["floor"].update(bsdf={"type": "blendbsdf", "b": {"type": "diffuse"}, "c": {"type": "diffuse"}}),
     "floor.bsdf: the blendbsdf plugin needs the property 'weight'"),
    (lambda d: d["floor"].update(bsdf={"type": "mask", "b": {"type": "diffuse"}, "c": {"type": "diffuse"}}),
     "floor.bsdf: mask takes one nested BSDF, got 2"),
    (lambda d: d["floor"].update(bsdf={"type": "mask", "a": {"type": "mask", "a": {"type": "mask", "a": {
        "type": "mask", "a": {"type": "diffuse"}}}}}),
     "floor.bsdf: composite BSDFs nest 4 deep here; at most 3 levels are supported"),
    (lambda d: d.update(loop={"type": "mask", "a": {"type": "ref", "id": "loop"}}),
     "loop: the BSDF contains itself"),
    (lambda d: d["floor"].update(bsdf={"type": "twosided", "a": {"type": "dielectric"}}),
     "floor.bsdf: twosided cannot hold a transmissive BSDF (dielectric) unless allow_transmission is set"),
    (lambda d: d["floor"].update(bsdf={"type": "twosided", "a": {"type": "principled", "spec_trans": 0.4}}),
     "floor.bsdf: twosided cannot hold a transmissive BSDF (principled) unless allow_transmission is set"),
    (lambda d: d["floor"].update(bsdf={"type": "principled", "eta": 1.4, "specular": 0.5}),
     "floor.bsdf.specular: give either eta or specular, not both"),
    (lambda d: d.update(bulb={"type": "point", "position": [0, 0, 0], "to_world": T30}),
     "bulb: give either position or to_world, not both"),
    (lambda d: d["floor"]["emitter"].update(to_world=T30) if "emitter" in d["floor"] else
     d["floor"].update(emitter={"type": "area", "to_world": T30}),
     "floor.emitter.to_world: an area emitter takes the transform of its shape"),
    (lambda d: d["floor"].update(bsdf={"type": "roughconductor", "alpha_u": 0.1}),
     "floor.bsdf: give all of alpha_u, alpha_v (or alpha alone), not only alpha_u"),
    (lambda d: d["floor"].update(bsdf={"type": "roughconductor", "alpha": 0.1, "alpha_u": 0.1, "alpha_v": 0.2}),
     "floor.bsdf: give either alpha or alpha_u, alpha_v, not both"),
    (lambda d: d["integrator"].update(type="direct", shading_samples=1, bsdf_samples=1),
     "integrator: give either shading_samples or emitter_samples / bsdf_samples, not both"),
    (lambda d: d.update(integrator2={"type": "path"}), "only one integrator can be given per scene"),
    (lambda d: d["integrator"].update(max_depth=-2), "integrator.max_depth: must be -1 (infinite) or >= 0"),
    (lambda d: d["integrator"].update(rr_depth=0), "integrator.rr_depth: must be greater than zero"),
    (lambda d: d["sensor"]["film"].update(pixel_format="cmyk"), "sensor.film.pixel_format: 'cmyk' is not one of"),
    (lambda d: d["sensor"].update(srf={"type": "d65"}), "sensor.srf: a spectral response function"),
    (lambda d: d["sensor"].update(to_world=d["sensor"]["to_world"] @ Transform().scale(2.0)),
     "sensor.to_world: the camera's to_world must not scale"),
    (lambda d: d["floor"].update(bsdf={"type": "diffuse", "reflectance": {"type": "spectrum",
                                                                          "value": [(600, 0.1), (400, 0.9)]}}),
     "floor.bsdf.reflectance.value: a spectrum's wavelengths must increase"),
    (lambda d: d.update(meter={"type": "radiancemeter"}),
     "meter: sensor type 'radiancemeter' is not supported yet (orthographic, perspective, thinlens)"),
    (lambda d: d.update(fog={"type": "heterogeneous", "sigma_t": {"type": "gridvolume", "grid": 1}}),
     "fog.sigma_t.grid: a VolumeGrid object is not supported yet"),
    (lambda d: d.update(fog={"type": "homogeneous", "sigma_t": -1.0}), "fog.sigma_t: must not be negative"),
    (lambda d: d["floor"].update(bsdf={"type": "diffuse",
                                       "reflectance": {"type": "bitmap", "data": np.ones((2, 2, 3))}}),
     "floor.bsdf.reflectance.data: a bitmap from a raw tensor ('data') is not supported yet"),
])
def test_mitsuba_rules_and_unsupported_values_raise(edit, message):
    d = small_box()
    edit(d)
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)


def test_value_errors_in_a_file_name_file_and_line(tmp_path):
    d = with_plugin(small_box(), "bulb", {"type": "spot"}, cutoff_angle="wide")
    text = to_xml(d)
    f = tmp_path / "spot.xml"
    f.write_text(text)
    line = line_of(text, 'name="cutoff_angle"')
    with pytest.raises(jaxrender.SceneError, match=re.escape(f"{f}, line {line}: bulb.cutoff_angle: expected a "
                                                             "finite float")):
        jaxrender.load_file(f)


# ---------------------------------------------------------------------------
# Values honoured as Mitsuba does
# ---------------------------------------------------------------------------
def test_the_defaults_every_mitsuba_scene_uses_load():
    scene = jaxrender.load_dict(jaxrender.cornell_box())   # far_clip, focus_distance, pixel/component formats...
    assert (scene.camera.spp, scene.camera.seed, scene.camera.far_clip) == (64, 0, 100.0)
    jaxrender.load_file(to_xml(jaxrender.cornell_box()))


def test_sampler_seed_is_kept_on_the_camera():
    d = with_plugin(small_box(), "sensor.sampler", None, seed=12345)
    assert jaxrender.load_dict(d).camera.seed == 12345


def test_filter_parameters_must_be_positive():
    d = with_plugin(small_box(), "sensor.film.rfilter", {"type": "gaussian"}, stddev=0.0)
    with pytest.raises(jaxrender.SceneError, match=r"sensor.film.rfilter.stddev: must be positive"):
        jaxrender.load_dict(d)


def test_ply_flip_tex_coords_flips_v(tmp_path, mi):
    ply = tmp_path / "quad.ply"
    ply.write_text("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
                   "property float u\nproperty float v\nelement face 2\nproperty list uchar int vertex_indices\n"
                   "end_header\n0 0 0 0 0.1\n1 0 0 1 0.2\n1 1 0 1 0.7\n0 1 0 0 0.9\n3 0 1 2\n3 0 2 3\n")
    uv = {}
    for flip in (False, True):
        scene = jaxrender.load_dict(with_plugin(small_box(), "thing", {"type": "ply", "filename": str(ply)},
                                                flip_tex_coords=flip))
        bsdf = next(i for i, (_, fields, _) in enumerate(scene.bsdfs) if fields[0][0] == "thing.bsdf.reflectance.value")
        mine = scene.tri_attr[:, 0] == bsdf
        uv[flip] = np.sort(scene.tri_uv[mine].reshape(-1, 2)[:, 1])
        ref = mi.traverse(mi.load_dict({"type": "ply", "filename": str(ply), "flip_tex_coords": flip}))
        np.testing.assert_allclose(np.sort(np.unique(uv[flip])), np.sort(np.array(ref["vertex_texcoords"])[1::2]),
                                   atol=1e-7)
    np.testing.assert_array_equal(np.sort(np.float32(1.0) - uv[False]), uv[True])


# ---------------------------------------------------------------------------
# Conductor presets
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("plugin", ["conductor", "roughconductor"])
def test_conductor_material_gives_the_preset_eta_and_k(plugin):
    d = small_box()
    d["floor"]["bsdf"] = {"type": plugin, "material": "Au"}
    scene = jaxrender.load_dict(d)
    eta, k = complex_ior("Au")
    np.testing.assert_array_equal(scene.params["floor.bsdf.eta.value"], eta)
    np.testing.assert_array_equal(scene.params["floor.bsdf.k.value"], k)


def test_roughconductor_gold_scene_loads_with_the_preset(tmp_path, mi):
    """End to end: an XML roughconductor material="Au" has Mitsuba's eta / k as its parameters."""
    text = to_xml(with_plugin(small_box(), "floor.bsdf", {"type": "roughconductor", "material": "Au",
                                                            "distribution": "ggx", "alpha": 0.2}))
    (tmp_path / "gold.xml").write_text(text)
    scene = jaxrender.load_file(tmp_path / "gold.xml")
    params = mi.traverse(mi.load_dict({"type": "roughconductor", "material": "Au"}))
    for name in ("eta", "k"):
        np.testing.assert_allclose(scene.params[f"floor.bsdf.{name}.value"], np.array(params[f"{name}.value"]),
                                   rtol=1e-6)


@pytest.mark.parametrize("bsdf, message", [
    ({"material": "Au", "eta": 1.0}, "floor.bsdf.material: give either eta and k or material ('Au'), not both"),
    ({"material": "Au", "k": 1.0}, 'unreferenced property "k" (material \'Au\' sets eta and k)'),
    ({"material": "au"}, "floor.bsdf.material: unknown conductor material 'au'; did you mean 'Au'?"),
    ({"material": 3}, "floor.bsdf.material: expected a string"),
])
def test_conductor_material_errors_follow_mitsuba(bsdf, message, mi):
    d = small_box()
    d["floor"]["bsdf"] = {"type": "conductor", **bsdf}
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)
    with pytest.raises(RuntimeError):
        mi.load_dict({"type": "conductor", **bsdf})


def test_material_none_is_the_default_mirror():
    d = small_box()
    d["floor"]["bsdf"] = {"type": "conductor", "material": "none", "eta": 0.3}
    scene = jaxrender.load_dict(d)
    np.testing.assert_array_equal(scene.params["floor.bsdf.eta.value"], [0.3] * 3)
    np.testing.assert_array_equal(scene.params["floor.bsdf.k.value"], [1.0] * 3)


# ---------------------------------------------------------------------------
# A BSDF registered at runtime loads with no scene code
# ---------------------------------------------------------------------------
@pytest.fixture
def tinted():
    """A diffuse BSDF (the kernel code of ``diffuse``) whose albedo is
    ``reflectance`` times three ``gains`` (an ARRAY), with a string OPTION,
    registered as plugin "tinted"."""
    t = base.BsdfType("tinted", "tinted",
                      (base.Param("mode", base.OPTION, "plain", choices=("plain",)),
                       base.Param("reflectance", base.COLOR, 0.5),
                       base.Param("gains", base.ARRAY, (1.0, 1.0, 1.0))),
                      lambda v: diffuse.DiffuseParams(v.reflectance * Vec(v.gains[0], v.gains[1], v.gains[2])),
                      diffuse.eval, diffuse.pdf, diffuse.sample, options=(("mode", "plain"),))
    bsdf_registry.register(t)
    yield t
    del bsdf_registry.TYPES[t.name]
    for hook in bsdf_registry._on_change:
        hook()


def test_a_registered_bsdf_loads_by_type_name(tinted):
    d = with_plugin(small_box(), "floor.bsdf", {"type": "tinted", "reflectance": 0.4, "gains": [0.5, 1.0, 2.0]})
    scene = jaxrender.load_dict(d)
    assert [k for k in scene.params if k.startswith("floor.bsdf")] == ["floor.bsdf.reflectance.value",
                                                                       "floor.bsdf.gains"]
    np.testing.assert_array_equal(scene.params["floor.bsdf.gains"], [0.5, 1.0, 2.0])
    index = [b[0] for b in scene.bsdfs].index("tinted")
    texture = int(scene.bsdfs[index][1][1][0])          # the gains field: the texture's index
    t = scene.textures[texture]
    assert (t.kind, t.keys, t.width, t.height, t.channels) == (ktex.DATA, ("floor.bsdf.gains",), 3, 1, 1)
    inputs = scene.kernel_inputs()
    assert float(inputs["bsdf_data"][index][tinted.slot("gains")]) == texture
    offset = inputs["tex_meta"][texture][0]
    np.testing.assert_array_equal(inputs["texels"][offset:offset + 3], [0.5, 1.0, 2.0])


@pytest.mark.parametrize("props, message", [
    ({"gain": [1.0, 1.0, 1.0]}, 'tinted plugin "floor.bsdf": unreferenced property "gain" (did you mean \'gains\'?)'),
    ({"gains": [1.0, 2.0]}, "floor.bsdf.gains: expected 3 finite floats"),
    ({"gains": [1.0, np.nan, 2.0]}, "floor.bsdf.gains: expected 3 finite floats"),
    ({"mode": "fancy"}, "floor.bsdf.mode: unknown tinted mode 'fancy' (plain)"),
])
def test_a_registered_bsdf_is_read_strictly(tinted, props, message):
    d = with_plugin(small_box(), "floor.bsdf", {"type": "tinted"}, **props)
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)


def test_a_registered_bsdf_loads_from_xml_and_renders_its_array(tinted, tmp_path):
    text = to_xml(with_plugin(small_box(), "floor.bsdf", {"type": "tinted", "reflectance": 0.4}, gain=1.0))
    line = line_of(text, 'name="gain"')
    with pytest.raises(jaxrender.SceneError, match=re.escape(f'<string>, line {line}: tinted plugin "floor.bsdf"')):
        jaxrender.load_file(text)
    d = with_plugin(small_box(), "floor.bsdf", {"type": "tinted", "reflectance": 0.4, "gains": [0.5, 1.0, 2.0]})
    ours = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=2, seed=1))
    d["floor"]["bsdf"] = {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.2, 0.4, 0.8]}}
    ref = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=2, seed=1))
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["red"].update(type="difuse"), "'red': unknown plugin type 'difuse' (did you mean 'diffuse'?)"),
    (lambda d: d.update(ball={"type": "spher"}), "unknown plugin type 'spher' (did you mean 'sphere'?)"),
    (lambda d: d["sensor"]["film"]["rfilter"].update(type="gausian"),
     "a type Mitsuba does not know (did you mean 'gaussian'?)"),
    (lambda d: d["sensor"]["sampler"].update(type="stratifed"), "(did you mean 'stratified'?)"),
    (lambda d: d["red"].update(type="zzzz"), "'red': unknown plugin type 'zzzz'"),
])
def test_misspelled_plugin_types_get_a_suggestion(edit, message):
    d = jaxrender.cornell_box()
    edit(d)
    with pytest.raises(jaxrender.SceneError, match=re.escape(message)):
        jaxrender.load_dict(d)


def test_misspelled_parameter_keys_get_a_suggestion():
    scene = jaxrender.load_dict(jaxrender.cornell_box())
    with pytest.raises(jaxrender.SceneError, match=re.escape("(did you mean 'red.reflectance.value'")):
        jaxrender.render(scene, {"red.reflectance.valu": np.zeros(3)}, spp=1)


def test_a_transform_that_collapses_a_mesh_is_an_error_a_flattening_one_is_not():
    for m in (np.zeros((4, 4)), np.diag([1.0, 0.0, 0.0, 1.0])):
        d = jaxrender.cornell_box()
        d["floor"]["to_world"] = m
        with pytest.raises(jaxrender.SceneError, match="floor.to_world: the transform collapses the mesh"):
            jaxrender.load_dict(d)
    d = jaxrender.cornell_box()
    d["floor"]["to_world"] = np.diag([1.0, 1.0, 0.0, 1.0])      # a rectangle in the xy plane: unchanged
    jaxrender.load_dict(d)


def test_uniform_spectra_become_mitsubas_rgb_values():
    """In Mitsuba's RGB variants a uniform spectrum is its value for a
    reflectance and, for an emitter, that value times the sRGB colour of
    the equal-energy spectrum: the same parameter values as its traverse."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    spec = lambda v: {"type": "spectrum", "value": v}          # noqa: E731
    d = {"type": "scene", "sensor": {"type": "perspective"},
         "wall": {"type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": spec(0.3)},
                  "emitter": {"type": "area", "radiance": spec(2.0)}},
         "bulb": {"type": "point", "intensity": spec(5.0)},
         "sky": {"type": "constant", "radiance": spec(0.25)}}
    ours = jaxrender.load_dict(d).params
    theirs = mi.traverse(mi.load_dict(d))
    for key in ("wall.emitter.radiance.value", "bulb.intensity.value", "sky.radiance.value"):
        np.testing.assert_allclose(ours[key], np.array(theirs[key]), rtol=2e-5, err_msg=key)
    np.testing.assert_allclose(ours["wall.bsdf.reflectance.value"], np.full(3, float(theirs["wall.bsdf.reflectance.value"])))
