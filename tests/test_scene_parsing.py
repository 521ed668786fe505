"""Scene descriptions: transforms, Mitsuba 3 XML files, the built-in Cornell box.

Where Mitsuba 3 is installed (``pip install mitsuba``; its ``scalar_rgb``
variant runs on any CPU) it is the reference: transforms are compared with
``mitsuba.ScalarTransform4f``, parsed XML with ``mitsuba.parser`` (the
parser behind ``mitsuba.load_file``), the Cornell box with ``mi.cornell_box()``.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxrender.scene.cornell import cornell_box
from jaxrender.scene.errors import SceneError
from jaxrender.scene.transform import Transform, as_transform
from jaxrender.scene.xml_loader import parse_xml

DATA = Path(__file__).parent / "data" / "scene"
CORNELL_XML = DATA / "cornell_box.xml"


@pytest.fixture
def mi():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    return mi


def mat(t) -> np.ndarray:
    return np.array(getattr(t, "matrix", t), dtype=np.float64)


def scene(body: str, version: str = "3.0.0") -> str:
    return f'<scene version="{version}">{body}</scene>'


def assert_same_dict(a, b, path="", atol=1e-6):
    """Deep equality; Transforms (ours or Mitsuba's) compared as matrices."""
    if isinstance(a, Transform) or isinstance(b, Transform) or hasattr(b, "inverse_transpose"):
        np.testing.assert_allclose(mat(a), mat(b), atol=atol, err_msg=path)
    elif isinstance(a, dict):
        assert isinstance(b, dict), path
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same_dict(a[k], b[k], f"{path}.{k}", atol)
    elif isinstance(a, (list, tuple)) and a and isinstance(a[0], (int, float)):
        np.testing.assert_allclose(np.array(a, float), np.array(b, float), atol=atol, err_msg=path)
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"


# ==========================================================================
# Transform
# ==========================================================================
AXES = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [-0.3, 0.5, 2.0], [2, 1, 0]]
ANGLES = [0, 17.5, -90, 90, 180, 271.3]
LOOKATS = [
    ([0, 0, 3.9], [0, 0, 0], [0, 1, 0]),
    ([1, 2, 3], [-1, 0.5, 0], [0, 0, 1]),
    ([0, 0, 0], [0, -5, 0], [1, 0, 0]),          # looking straight down
    ([0, 1, 0], [0, 0, 0], [0, 0, -1]),
    ([3, 3, 3], [0, 0, 0], [0, 10, 0]),          # up not normalized
    ([3, -1, 2], [0, 0, 0], [0.2, 1, -0.4]),     # up not orthogonal to dir
    ([0, 0, 4], [0, 0, 0], [0, -1, 0]),          # upside down
    ([0, 0, 4], [0, 0, 0], [1e-3, 1, 1e3]),      # up almost parallel to dir
    ([1e3, -2e3, 5e2], [1e3 + 1, -2e3, 5e2], [0, 1, 0]),
]


def test_identity_and_matrix_inputs():
    assert np.array_equal(Transform().matrix, np.eye(4))
    rows = [[1, 2, 3, 4], [0, 1, 0, 5], [0, 0, 2, 6], [0, 0, 0, 1]]
    flat = [x for r in rows for x in r]
    for v in (rows, flat, np.array(rows), Transform(rows), Transform.from_matrix(flat)):
        t = Transform(v)
        np.testing.assert_array_equal(t.matrix, np.array(rows, float))
        np.testing.assert_allclose(t.matrix @ t.inverse_matrix, np.eye(4), atol=1e-12)
    t3 = Transform([2, 0, 0, 0, 3, 0, 0, 0, 4])  # 3x3: the linear part
    np.testing.assert_array_equal(t3.matrix, np.diag([2.0, 3, 4, 1]))
    assert as_transform(rows) == Transform(rows)
    with pytest.raises(ValueError):
        Transform([1, 2, 3])
    with pytest.raises(ValueError):
        Transform("not a matrix")
    with pytest.raises(AttributeError):
        Transform().matrix = np.eye(4)


def test_constructors_match_mitsuba(mi):
    T = mi.ScalarTransform4f
    cases = [
        (Transform.translate([1, -2, 3.5]), T().translate([1, -2, 3.5])),
        (Transform.scale(0.3), T().scale(0.3)),
        (Transform.scale([0.3, 0.61, -2]), T().scale([0.3, 0.61, -2])),
    ]
    cases += [(Transform.rotate(a, g), T().rotate(a, g)) for a in AXES for g in ANGLES]
    cases += [(Transform.look_at(o, t, u), T().look_at(origin=o, target=t, up=u)) for o, t, u in LOOKATS]
    rows = [[0.5, 1, 2, 3], [0, 2, 0, 4], [1, 0, 1, 5], [0, 0, 0, 1]]
    cases.append((Transform(rows), T(rows)))
    for ours, theirs in cases:
        np.testing.assert_allclose(ours.matrix, mat(theirs), atol=2e-6, rtol=2e-6)
        np.testing.assert_allclose(ours.matrix @ ours.inverse_matrix, np.eye(4), atol=1e-9)
        # Mitsuba stores R^T as the "inverse" of a rotation about a non-unit axis (which is
        # then not a rotation); we keep the true inverse.  Everything else must agree.
        r = ours.matrix[:3, :3]
        if np.allclose(r @ r.T, np.eye(3)) or np.allclose(r - np.diag(np.diag(r)), 0):
            np.testing.assert_allclose(ours.inverse_matrix, mat(theirs.inverse()), atol=1e-5, rtol=1e-5)


def test_composition_order_matches_mitsuba(mi):
    T = mi.ScalarTransform4f
    ours = Transform().translate([0.0, 0.99, 0.01]).rotate([1, 0, 0], 90).scale([0.23, 0.19, 0.19])
    theirs = T().translate([0.0, 0.99, 0.01]).rotate([1, 0, 0], 90).scale([0.23, 0.19, 0.19])
    np.testing.assert_allclose(ours.matrix, mat(theirs), atol=1e-6)
    # Chained calls right-multiply: the call written last acts first on points.
    p = np.array([1.0, 0.0, 0.0])
    np.testing.assert_allclose(ours.transform_point(p), [0.23, 0.99, 0.01], atol=1e-12)
    # Class-level calls start from the identity, like mi.ScalarTransform4f.translate(...).
    assert Transform.translate([1, 2, 3]) == Transform().translate([1, 2, 3])
    np.testing.assert_allclose(mat(T.translate([1, 2, 3])), Transform.translate([1, 2, 3]).matrix)
    # A @ B applies B first; A.then(B) applies A first (XML order).
    a, b = Transform.rotate([0, 0, 1], 90), Transform.translate([1, 0, 0])
    np.testing.assert_allclose((a @ b).transform_point([0, 0, 0]), [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(a.then(b).transform_point([0, 0, 0]), [1, 0, 0], atol=1e-12)
    np.testing.assert_allclose((a @ b).matrix, mat(T().rotate([0, 0, 1], 90).translate([1, 0, 0])), atol=1e-6)
    # numpy arrays and Mitsuba transforms compose too.
    np.testing.assert_allclose((np.eye(4) @ a).matrix, a.matrix)
    np.testing.assert_allclose((a @ T().scale(2)).matrix, (a @ Transform.scale(2)).matrix, atol=1e-7)
    np.testing.assert_allclose(Transform(theirs).matrix, mat(theirs))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["translate", "scale", "rotate", "look_at"]),
                          st.lists(st.floats(-3, 3), min_size=9, max_size=9)),
                min_size=1, max_size=5))
def test_random_chains_match_mitsuba(ops):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    ours, theirs = Transform(), mi.ScalarTransform4f()
    for name, x in ops:
        if name == "translate":
            ours, theirs = ours.translate(x[:3]), theirs.translate(x[:3])
        elif name == "scale":
            s = [v if abs(v) > 0.1 else 1.0 for v in x[:3]]
            ours, theirs = ours.scale(s), theirs.scale(s)
        elif name == "rotate":
            axis = np.array(x[:3])
            if np.linalg.norm(axis) < 1e-2:
                continue
            axis = (axis / np.linalg.norm(axis)).tolist()
            ours, theirs = ours.rotate(axis, x[3] * 60), theirs.rotate(axis, x[3] * 60)
        else:
            o, t, u = np.array(x[:3]), np.array(x[3:6]), np.array(x[6:9])
            d = t - o
            if np.linalg.norm(d) < 1e-2 or np.linalg.norm(np.cross(u, d)) < 1e-2 * np.linalg.norm(d):
                continue
            ours = ours.look_at(o.tolist(), t.tolist(), u.tolist())
            theirs = theirs.look_at(origin=o.tolist(), target=t.tolist(), up=u.tolist())
    scale = max(1.0, np.abs(mat(theirs)).max())
    np.testing.assert_allclose(ours.matrix, mat(theirs), atol=2e-5 * scale, rtol=1e-4)


def test_points_vectors_normals_match_mitsuba(mi):
    t = Transform.translate([1, 2, 3]).rotate([0.3, 1, 0.2], 33).scale([0.5, 2, -1.5])
    mt = mi.ScalarTransform4f(t.matrix.tolist())
    rng = np.random.default_rng(1)
    pts = rng.normal(size=(5, 3))
    got_p, got_v, got_n = t.transform_point(pts), t.transform_vector(pts), t.transform_normal(pts)
    for i, p in enumerate(pts):
        np.testing.assert_allclose(got_p[i], list(mt @ mi.ScalarPoint3f(*p)), atol=1e-5)
        np.testing.assert_allclose(got_v[i], list(mt @ mi.ScalarVector3f(*p)), atol=1e-5)
        np.testing.assert_allclose(got_n[i], list(mt @ mi.ScalarNormal3f(*p)), atol=1e-5)
    # Normals stay perpendicular to transformed tangent vectors.
    a, b = rng.normal(size=3), rng.normal(size=3)
    n = np.cross(a, b)
    assert abs(np.dot(t.transform_normal(n), t.transform_vector(a))) < 1e-9
    # Projective matrices divide by w.
    proj = Transform([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]])
    np.testing.assert_allclose(proj.transform_point([2.0, 4.0, 2.0]), [1, 2, 1])


def test_degenerate_constructors_raise():
    with pytest.raises(ValueError, match="zero"):
        Transform.rotate([0, 0, 0], 10)
    with pytest.raises(ValueError, match="coincides"):
        Transform.look_at([1, 1, 1], [1, 1, 1], [0, 1, 0])
    with pytest.raises(ValueError, match="parallel"):
        Transform.look_at([0, 0, 4], [0, 0, 0], [0, 0, 2])
    with pytest.raises(ValueError):
        Transform.translate([1, 2])


def test_transform_misc():
    t = Transform.translate([1, 2, 3]) @ Transform.scale([2, 4, 8])
    np.testing.assert_allclose(t.inverse().matrix, np.linalg.inv(t.matrix))
    np.testing.assert_allclose(t.inverse_transpose, np.linalg.inv(t.matrix).T)
    assert np.asarray(t).shape == (4, 4)
    assert t.allclose(t.matrix + 1e-9) and not t.allclose(Transform())
    import pickle
    assert pickle.loads(pickle.dumps(t)) == t
    assert "Transform(" in repr(t)
    assert Transform.lookat([0, 0, 1], [0, 0, 0], [0, 1, 0]) == Transform.look_at([0, 0, 1], [0, 0, 0], [0, 1, 0])


# ==========================================================================
# XML -> dict
# ==========================================================================
FULL_SCENE = """<?xml version="1.0"?>
<scene version="3.0.0">
    <default name="spp" value="16"/>
    <default name="max_depth" value="5"/>
    <integrator type="path">
        <integer name="max_depth" value="$max_depth"/>
        <boolean name="hide_emitters" value="True"/>
    </integrator>
    <sensor type="perspective" id="cam">
        <float name="fov" value="45"/>
        <string name="fov_axis" value="x"/>
        <transform name="to_world">
            <lookat origin="0, 0, 5" target="0, 0, 0" up="0, 1, 0"/>
        </transform>
        <sampler type="independent"><integer name="sample_count" value="$spp"/></sampler>
        <film type="hdrfilm">
            <integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="tent"/>
        </film>
    </sensor>
    <bsdf type="twosided" id="mat">
        <bsdf type="diffuse"><rgb name="reflectance" value="0.2 0.4 0.6"/></bsdf>
    </bsdf>
    <texture type="checkerboard" id="checks">
        <rgb name="color0" value="0.1"/>
        <rgb name="color1" value="0.9"/>
    </texture>
    <shape type="sphere" id="ball">
        <point name="center" x="1" y="2" z="3"/>
        <float name="radius" value="0.5"/>
        <bsdf type="diffuse"><ref name="reflectance" id="checks"/></bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world">
            <scale value="2"/>
            <rotate x="1" angle="-90"/>
            <translate y="-1"/>
        </transform>
        <ref id="mat"/>
    </shape>
    <shape type="rectangle">
        <ref id="mat"/>
        <emitter type="area"><spectrum name="radiance" value="400:1, 500:2.5,600:3"/></emitter>
    </shape>
    <emitter type="constant"><spectrum name="radiance" value="0.25"/></emitter>
    <emitter type="point">
        <vector name="position" value="1"/>
        <rgb name="intensity" value="5, 6, 7"/>
    </emitter>
</scene>
"""


def test_full_scene_conventions():
    d = parse_xml(FULL_SCENE)
    floor = Transform.translate([0, -1, 0]).rotate([1, 0, 0], -90).scale(2)
    expected = {
        "type": "scene",
        "integrator": {"type": "path", "max_depth": 5, "hide_emitters": True},
        "cam": {
            "type": "perspective", "fov": 45.0, "fov_axis": "x",
            "to_world": Transform.look_at([0, 0, 5], [0, 0, 0], [0, 1, 0]),
            "sampler": {"type": "independent", "sample_count": 16},
            "film": {"type": "hdrfilm", "width": 32, "height": 24, "rfilter": {"type": "tent"}},
        },
        "mat": {"type": "twosided",
                "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.2, 0.4, 0.6]}}},
        "checks": {"type": "checkerboard",
                   "color0": {"type": "rgb", "value": [0.1, 0.1, 0.1]},
                   "color1": {"type": "rgb", "value": [0.9, 0.9, 0.9]}},
        "ball": {"type": "sphere", "center": [1.0, 2.0, 3.0], "radius": 0.5,
                 "bsdf": {"type": "diffuse", "reflectance": {"type": "ref", "id": "checks"}}},
        "shape": {"type": "rectangle", "to_world": floor, "bsdf": {"type": "ref", "id": "mat"}},
        "shape_1": {"type": "rectangle", "bsdf": {"type": "ref", "id": "mat"},
                    "emitter": {"type": "area", "radiance": {
                        "type": "spectrum", "value": [(400.0, 1.0), (500.0, 2.5), (600.0, 3.0)]}}},
        "emitter": {"type": "constant", "radiance": {"type": "spectrum", "value": 0.25}},
        "emitter_1": {"type": "point", "position": [1.0, 1.0, 1.0],
                      "intensity": {"type": "rgb", "value": [5.0, 6.0, 7.0]}},
    }
    assert_same_dict(d, expected)
    assert isinstance(d["shape"]["to_world"], Transform)
    assert isinstance(d["integrator"]["max_depth"], int)
    # Overrides behave like mitsuba.load_file(path, spp=...): any value, str()'d.
    d2 = parse_xml(FULL_SCENE, spp=4, max_depth="2")
    assert d2["cam"]["sampler"]["sample_count"] == 4 and d2["integrator"]["max_depth"] == 2


# ---- agreement with Mitsuba's own parser ---------------------------------
def compare_with_mitsuba_state(mi, mine: dict, state, index: int = 0, key=None, base_dir=None):
    """Our dict against mitsuba.parser's node ``index`` (document order, unnamed = _arg_i)."""
    Type = mi.Properties.Type
    props = state.nodes[index].props
    assert props.plugin_name() == mine["type"]
    if props.id():
        assert mine.get("id", key) == props.id()
    entries = [(k, v) for k, v in mine.items() if k != "type" and not (k == "id" and isinstance(v, str))]
    keys = list(props.keys())
    assert len(entries) == len(keys), (entries, keys)
    for (k, v), mk in zip(entries, keys):
        if not mk.startswith("_arg_"):
            assert k == mk
        t = props.type(mk)
        mv = props[mk]
        if t == Type.ResolvedReference:
            compare_with_mitsuba_state(mi, v, state, mv.index(), k, base_dir)
        elif t == Type.Reference:
            assert v == {"type": "ref", "id": mv.id()}
        elif t == Type.Transform:
            np.testing.assert_allclose(mat(v), mat(mv), atol=1e-5)
        elif t == Type.Color:
            assert v["type"] == "rgb"
            np.testing.assert_allclose(v["value"], list(mv), rtol=1e-6)
        elif t == Type.Vector:
            np.testing.assert_allclose(v, list(mv), rtol=1e-6)
        elif t == Type.Spectrum:
            assert v["type"] == "spectrum"
            if mv.is_uniform():
                assert v["value"] == pytest.approx(mv.values[0])
            else:
                assert [w for w, _ in v["value"]] == pytest.approx(list(mv.wavelengths))
                assert [x for _, x in v["value"]] == pytest.approx(list(mv.values))
        elif t == Type.String and (mk == "filename" or mk.endswith("_filename")):
            assert v == os.path.normpath(os.path.join(base_dir or os.getcwd(), mv))
        elif t == Type.Float:
            assert v == pytest.approx(mv, rel=1e-12) and isinstance(v, float)
        else:
            assert v == mv and type(v) is type(mv), (k, v, mv)


MITSUBA_AGREEMENT = [
    FULL_SCENE,
    scene('<bsdf type="dielectric" id="glass"><float name="int_ior" value="1.5"/>'
          '<string name="ext_ior" value="air"/></bsdf>'
          '<shape type="obj"><string name="filename" value="meshes/bunny.obj"/><ref id="glass"/>'
          '<boolean name="face_normals" value="false"/></shape>'),
    scene('<shape type="sphere"><transform name="to_world">'
          '<matrix value="1 0 0 1  0 2 0 0  0 0 1 3  0 0 0 1"/><rotate value="0.2, 1, 0.1" angle="30"/>'
          '<scale x="2"/><translate value="1"/><lookat origin="1,1,1" target="0,0,0"/>'
          '<matrix value="2 0 0 0 2 0 0 0 2"/></transform></shape>'),
    scene('<shape type="sphere"><transform name="to_world"><lookat origin="0,0,4" target="0,0,0"/>'
          '</transform></shape><shape type="sphere"><transform name="to_world">'
          '<lookat origin="0,0,0" target="1,0,0" up="0,0,0"/></transform></shape>'
          '<shape type="sphere"><transform name="to_world"><lookat origin="0,2,0" target="1,-3,0.5"/>'
          '</transform></shape>'),
    scene('<shape type="sphere" id="a"/><shape type="sphere" name="named"><bsdf type="diffuse" id="inner"/>'
          '</shape><shape type="cube"><ref id="inner" name="bsdf"/></shape>'),
    scene('<default name="n" value="4"/><default name="nb" value="7"/><default name="n" value="9"/>'
          '<integrator type="path"><integer name="max_depth" value="$n"/><string name="tag" value="a$nb$n_x"/>'
          '</integrator>'),
    scene('<bsdf type="dielectric"><float name="intIOR" value="1.5"/><rgb name="specularReflectance" '
          'value="1"/></bsdf>', version="0.6.0"),
    '<bsdf version="3.0.0" type="diffuse"><rgb name="reflectance" value="0.5"/></bsdf>',
    scene('<emitter type="point"><spectrum type="blackbody" name="intensity">'
          '<float name="temperature" value="3000"/></spectrum></emitter>'),
]


@pytest.mark.parametrize("xml", MITSUBA_AGREEMENT, ids=range(len(MITSUBA_AGREEMENT)))
def test_matches_mitsuba_parser(mi, xml):
    config = mi.parser.ParserConfig("scalar_rgb")
    state = mi.parser.parse_string(config, xml)
    mi.parser.transform_upgrade(config, state)  # camelCase -> snake_case for old versions
    compare_with_mitsuba_state(mi, parse_xml(xml), state)


def to_mitsuba(mi, x):
    """Our dict -> what mitsuba.load_dict accepts (only Transforms need converting)."""
    if isinstance(x, Transform):
        return mi.ScalarTransform4f(x.matrix.tolist())
    if isinstance(x, dict):
        return {k: to_mitsuba(mi, v) for k, v in x.items()}
    return x


def _param_values(params, key):
    v = params[key]
    if hasattr(v, "matrix"):
        return mat(v)
    return np.array(v, dtype=np.float64)


@pytest.mark.parametrize("xml", [FULL_SCENE, CORNELL_XML.read_text()], ids=["full", "cornell"])
def test_dict_loads_in_mitsuba_like_the_xml(mi, xml):
    """mi.load_dict(parse_xml(x)) and mi.load_string(x) build the same scene parameters.

    Objects without an id get an address-based name from Mitsuba (object_0x...) and
    our automatic key from the dict, so those are matched by the rest of the key."""
    ours = mi.traverse(mi.load_dict(to_mitsuba(mi, parse_xml(xml))))
    theirs = mi.traverse(mi.load_string(xml))
    common = sorted(set(ours.keys()) & set(theirs.keys()))
    assert len(list(ours.keys())) == len(list(theirs.keys()))
    for k in common:
        np.testing.assert_allclose(_param_values(ours, k), _param_values(theirs, k), atol=1e-6, err_msg=k)
    rest = lambda keys: sorted(k.split(".", 1)[1] for k in keys if k not in common)
    assert rest(ours.keys()) == rest(theirs.keys())
    assert len(common) >= 10


def test_overrides_match_mitsuba(mi, tmp_path):
    p = tmp_path / "s.xml"
    p.write_text(FULL_SCENE)
    config = mi.parser.ParserConfig("scalar_rgb")
    for kw in ({}, {"spp": 3}, {"spp": "7", "max_depth": 1}):
        state = mi.parser.parse_file(config, str(p), **kw)
        compare_with_mitsuba_state(mi, parse_xml(p, **kw), state, base_dir=str(tmp_path))
    # Overriding a parameter that is referenced but never declared is accepted by both ...
    xml = scene('<sampler type="independent"><integer name="sample_count" value="$spp"/></sampler>')
    assert parse_xml(xml, spp=3)["sampler"]["sample_count"] == 3
    mi.parser.parse_string(config, xml, spp=3)
    # ... and an override that nothing uses is an error in both.
    with pytest.raises(RuntimeError, match="unused"):
        mi.parser.parse_string(config, FULL_SCENE, foo=3)
    with pytest.raises(SceneError, match=r"unused parameter.*\$foo=3"):
        parse_xml(FULL_SCENE, foo=3)


def test_parameters():
    xml = scene('<default name="n" value="4"/><default name="nb" value="7"/>'
                '<integrator type="$n"><string name="s_$n" value="$nb/$n.x/$n_y"/></integrator>')
    d = parse_xml(xml)
    assert d["integrator"] == {"type": "4", "s_4": "7/4.x/4_y"}  # longest declared name wins
    assert parse_xml(xml, n="x")["integrator"] == {"type": "x", "s_x": "7/x.x/x_y"}
    assert parse_xml(xml, n=True)["integrator"]["type"] == "true"
    # The first definition wins (later <default>s do not overwrite).
    assert parse_xml(scene('<default name="a" value="1"/><default name="a" value="2"/>'
                           '<integrator type="path"><integer name="d" value="$a"/></integrator>'))[
        "integrator"]["d"] == 1
    # A parameter must be defined before it is used.
    with pytest.raises(SceneError, match=r"undefined parameter: \$spp"):
        parse_xml(scene('<integer name="x" value="$spp"/><default name="spp" value="1"/>'))
    with pytest.raises(SceneError, match=r"undefined parameter: \$"):
        parse_xml(scene('<string name="x" value="cost: 5$"/>'))
    with pytest.raises(SceneError, match="invalid parameter name"):
        parse_xml(scene(""), **{"a-b": 1})


# ---- files: include, relative paths --------------------------------------
def test_include_and_relative_paths(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "m.obj").write_text("v 0 0 0\n")
    (tmp_path / "textures").mkdir()
    (tmp_path / "textures" / "t.png").write_bytes(b"")
    (tmp_path / "sub" / "part.xml").write_text(
        '<scene version="3.0.0">\n'
        '  <bsdf type="diffuse" id="wood"><texture type="bitmap" name="reflectance">'
        '<string name="filename" value="wood.png"/></texture></bsdf>\n'
        '  <include filename="deeper/more.xml"/>\n'
        '</scene>')
    (tmp_path / "sub" / "deeper" / "more.xml").write_text(
        '<scene version="3.0.0"><integer name="from_deeper" value="$spp"/></scene>')
    main = tmp_path / "main.xml"
    main.write_text(
        '<scene version="3.0.0">\n'
        '  <default name="spp" value="3"/>\n'
        '  <path value="textures"/>\n'
        '  <include filename="sub/part.xml"/>\n'
        '  <shape type="obj"><string name="filename" value="meshes/m.obj"/><ref id="wood"/>\n'
        '    <bsdf type="diffuse"><texture type="bitmap" name="reflectance">'
        '<string name="filename" value="t.png"/></texture></bsdf></shape>\n'
        '  <shape type="ply"><string name="filename" value="/abs/x.ply"/></shape>\n'
        '  <emitter type="envmap"><string name="filename" value="missing.exr"/></emitter>\n'
        '</scene>')
    d = parse_xml(str(main))
    assert list(d) == ["type", "wood", "from_deeper", "shape", "shape_1", "emitter"]
    assert d["from_deeper"] == 3
    # relative to the file that contains the element
    assert d["wood"]["reflectance"]["filename"] == str(tmp_path / "sub" / "wood.png")
    assert d["shape"]["filename"] == str(tmp_path / "meshes" / "m.obj")
    # found through <path>
    assert d["shape"]["bsdf_1"]["reflectance"]["filename"] == str(tmp_path / "textures" / "t.png")
    assert d["shape_1"]["filename"] == "/abs/x.ply"
    # not found anywhere: relative to the scene file (the loader of the asset reports it)
    assert d["emitter"]["filename"] == str(tmp_path / "missing.exr")
    assert parse_xml(main) == parse_xml(os.fspath(main))  # PathLike works
    assert parse_xml(FULL_SCENE.encode()) == parse_xml(FULL_SCENE)  # bytes = XML text
    # XML text has no folder: relative names resolve against the working directory.
    d = parse_xml(scene('<shape type="obj"><string name="filename" value="m.obj"/></shape>'))
    assert d["shape"]["filename"] == os.path.join(os.getcwd(), "m.obj")


def test_include_errors(tmp_path):
    a = tmp_path / "a.xml"
    a.write_text('<scene version="3.0.0">\n<include filename="a.xml"/>\n</scene>')
    with pytest.raises(SceneError, match="nested more than 15"):
        parse_xml(a)
    b = tmp_path / "b.xml"
    b.write_text('<scene version="3.0.0">\n\n<include filename="nope.xml"/></scene>')
    with pytest.raises(SceneError, match=r"b\.xml, line 3.*<include>.*nope\.xml.*not found"):
        parse_xml(b)
    c = tmp_path / "c.xml"
    (tmp_path / "bad.xml").write_text('<scene version="3.0.0">\n<float name="x" value="y"/></scene>')
    c.write_text('<scene version="3.0.0"><include filename="bad.xml"/></scene>')
    with pytest.raises(SceneError, match=r"bad\.xml, line 2.*could not parse floating point value \"y\""):
        parse_xml(c)
    (tmp_path / "notscene.xml").write_text('<bsdf version="3.0.0" type="diffuse"/>')
    c.write_text('<scene version="3.0.0"><include filename="notscene.xml"/></scene>')
    with pytest.raises(SceneError, match="<scene> root"):
        parse_xml(c)
    with pytest.raises(SceneError, match="scene file not found"):
        parse_xml(tmp_path / "does_not_exist.xml")


# ---- references ------------------------------------------------------------
def test_references():
    d = parse_xml(scene('<shape type="sphere"><ref id="later"/></shape>'
                        '<bsdf type="diffuse" id="later"/>'
                        '<alias id="later" as="other"/>'
                        '<shape type="cube"><ref id="other" name="bsdf"/></shape>'
                        '<shape type="cube"><bsdf type="diffuse" id="nested"/></shape>'
                        '<shape type="cube"><ref id="nested"/><ref id="later"/></shape>'))
    assert d["shape"]["bsdf"] == {"type": "ref", "id": "later"}         # forward reference
    assert d["shape_1"]["bsdf"] == {"type": "ref", "id": "later"}       # alias resolved
    assert d["shape_2"]["nested"] == {"type": "diffuse"}                 # keyed by its id
    assert d["shape_3"] == {"type": "cube", "bsdf": {"type": "ref", "id": "nested"},
                            "bsdf_1": {"type": "ref", "id": "later"}}
    with pytest.raises(SceneError, match=r'line 3, column 5: <ref id="ghost">: .*unknown id "ghost"'):
        parse_xml('<scene version="3.0.0">\n<shape type="sphere">\n    <ref id="ghost"/>\n</shape></scene>')
    with pytest.raises(SceneError, match='duplicate ID: "a"'):
        parse_xml(scene('<bsdf type="diffuse" id="a"/><shape type="sphere"><bsdf type="diffuse" id="a"/></shape>'))
    with pytest.raises(SceneError, match="reference cycle"):
        parse_xml(scene('<bsdf type="twosided" id="a"><bsdf type="mask"><ref id="b"/></bsdf></bsdf>'
                        '<bsdf type="twosided" id="b"><ref id="a"/></bsdf>'))
    with pytest.raises(SceneError, match='<alias> refers to an unknown id "zz"'):
        parse_xml(scene('<alias id="zz" as="yy"/>'))
    with pytest.raises(SceneError, match='key "x" is used twice'):
        parse_xml(scene('<bsdf type="diffuse" id="x"/><float name="x" value="1"/>'))


# ---- errors: file, line, element, what -------------------------------------
BAD = [
    # (xml body, line, message regex, also rejected by Mitsuba)
    ("<foo/>", 2, r"<foo>: encountered an unsupported XML element: <foo>", True),
    ('<shape type="sphere"><float name="radius" value="abc"/></shape>', 2,
     r'<float name="radius">: could not parse floating point value "abc"', True),
    ('<shape type="sphere"><float name="radius" value="1,5"/></shape>', 2, "could not parse floating", True),
    ('<shape type="sphere"><float name="radius" value="1_0"/></shape>', 2, "could not parse floating", True),
    ('<shape type="sphere"><float name="radius" value="nan"/></shape>', 2, "not a finite number", False),
    ('<integrator type="path"><integer name="max_depth" value="3.0"/></integrator>', 2,
     'could not parse integer value "3.0"', True),
    ('<integrator type="path"><integer name="max_depth" value="99999999999999999999"/></integrator>', 2,
     "out of range", True),
    ('<integrator type="path"><boolean name="hide_emitters" value="1"/></integrator>', 2,
     'could not parse boolean value "1"', True),
    ('<integrator type="path"><integer value="3"/></integrator>', 2,
     r'<integer>: missing required attribute "name"', True),
    ('<integrator type="path"><integer name="max_depth" value="3" foo="1"/></integrator>', 2,
     'unexpected attribute "foo"', True),
    ("<integrator/>", 2, r'missing required attribute "type" in <integrator>', True),
    ('<integrator type="path"><integer name="a" value="1"/>\n<integer name="a" value="2"/></integrator>', 3,
     r'property "a" was specified multiple times \(first at <string>, line 2\)', True),
    ('<bsdf type="diffuse"><rgb name="reflectance" value="0.1, 0.2"/></bsdf>', 2,
     'could not parse RGB value "0.1, 0.2"', True),
    ('<bsdf type="diffuse"><rgb name="reflectance" value="#ff0000"/></bsdf>', 2, "could not parse RGB", True),
    ('<bsdf type="diffuse"><spectrum name="reflectance"/></bsdf>', 2, 'requires either "value" or "filename"', True),
    ('<bsdf type="diffuse"><spectrum name="reflectance" value="400:0.1, 500"/></bsdf>', 2,
     "wavelength:value pairs", True),
    ('<shape type="sphere"><point name="center" x="1"/></shape>', 2, 'missing required attribute "y"', True),
    ('<shape type="sphere"><point name="center" value="1, 2"/></shape>', 2, "exactly 1 or 3 elements", True),
    ('<shape type="sphere"><point name="center" x="1" value="1,2,3"/></shape>', 2, 'cannot mix "value"', True),
    ('<shape type="sphere"><transform name="to_world"><foo/></transform></shape>', 2,
     r"<foo>: unexpected <foo> element inside <transform>", True),
    ('<shape type="sphere"><transform name="to_world"><rotate x="1"/></transform></shape>', 2,
     'missing required attribute "angle"', True),
    ('<shape type="sphere"><transform name="to_world"><rotate angle="3"/></transform></shape>', 2,
     "rotation axis cannot be zero", True),
    ('<shape type="sphere"><transform name="to_world"><matrix value="1 2"/></transform></shape>', 2,
     "matrix must have 9 or 16 values, got 2", True),
    (('<shape type="sphere"><transform name="to_world"><lookat origin="0,0,4" target="0,0,0" up="0,0,1"/>'
      '</transform></shape>'), 2, "invalid lookat transformation", True),
    ('<shape type="sphere"><transform name="to_world"><lookat origin="1" target="0,0,0"/></transform></shape>',
     2, "expected 3 values", True),
    ('<shape type="sphere"><transform name="to_world"><translate x="inf"/></transform></shape>', 2,
     "not a finite number", False),
    ('<shape type="sphere"><transform><translate x="1"/></transform></shape>', 2,
     r'missing required attribute "name" in <transform>', True),
    ('<shape type="sphere"><float name="x" value="1"><float name="y" value="1"/></float></shape>', 2,
     "cannot occur as child of <float>", True),
    ('<shape type="sphere"><ref/></shape>', 2, r'missing required attribute "id" in <ref>', True),
    ('<shape type="sphere"><scene version="3.0.0"/></shape>', 2, "root element", True),
    ('<default name="n"/>', 2, r'missing required attribute "value" in <default>', True),
    ('<translate x="1"/>', 2, "only occur inside <transform>", True),
    ('<tensor name="x"/>', 2, "unsupported XML element", True),
]


@pytest.mark.parametrize("body,line,message,mitsuba_rejects", BAD, ids=range(len(BAD)))
def test_errors_name_file_line_element(body, line, message, mitsuba_rejects):
    xml = f'<scene version="3.0.0">\n{body}\n</scene>'
    with pytest.raises(SceneError, match=message) as info:
        parse_xml(xml)
    err = info.value
    assert str(err).startswith(f"<string>, line {line}, column ")
    assert err.filename == "<string>" and err.line == line and err.element.startswith("<")
    if mitsuba_rejects:
        mi = pytest.importorskip("mitsuba")
        mi.set_variant("scalar_rgb")
        with pytest.raises(RuntimeError):
            state = mi.parser.parse_string(mi.parser.ParserConfig("scalar_rgb"), xml)
            mi.parser.transform_all(mi.parser.ParserConfig("scalar_rgb"), state)


def test_error_in_file_names_the_file(tmp_path):
    p = tmp_path / "broken.xml"
    p.write_text('<scene version="3.0.0">\n  <shape type="sphere">\n    <float name="radius" value="x"/>\n'
                 "  </shape>\n</scene>\n")
    with pytest.raises(SceneError) as info:
        parse_xml(p)
    assert str(info.value).startswith(f'{p}, line 3, column 5: <float name="radius">: could not parse')
    p.write_text('<scene version="3.0.0">\n  <shape type="sphere">\n</scene>\n')
    with pytest.raises(SceneError, match=rf"{p}, line 3, column \d+: malformed XML: mismatched tag"):
        parse_xml(p)


@pytest.mark.parametrize("xml,message", [
    ("<scene><bsdf type='diffuse'/></scene>", "missing version attribute"),
    ('<scene version="3.0"/>', 'invalid version number "3.0"'),
    ('<scene version="abc"/>', "invalid version number"),
    ('<scene version="4.0.0"/>', "unsupported scene version"),
    ('<float version="3.0.0" name="x" value="1"/>', "root element must be <scene>"),
    ("", "malformed XML"),
    ("<scene version='3.0.0'>", "malformed XML: no element found"),
    ('<scene version="3.0.0"><shape type="sphere"></scene>', "mismatched tag"),
    ('<scene version="3.0.0" version="3.0.0"/>', "duplicate attribute"),
    ('<!DOCTYPE s [<!ENTITY a "aaaa">]><scene version="3.0.0"/>', "entity declarations are not allowed"),
    ("\x00\x01garbage", "malformed XML"),
    ('<scene version="3.0.0" foo="1"/>', 'unexpected attribute "foo"'),
])
def test_document_level_errors(xml, message):
    with pytest.raises(SceneError, match=message):
        parse_xml(xml if xml.startswith("<") else xml.encode())


def test_version_upgrade_and_versions():
    d = parse_xml(scene('<bsdf type="dielectric"><float name="intIOR" value="1.5"/>'
                        '<rgb name="specularReflectance" value="1"/></bsdf>', "0.6.0"))
    assert list(d["bsdf"]) == ["type", "int_ior", "specular_reflectance"]
    d = parse_xml(scene('<bsdf type="dielectric"><float name="intIOR" value="1.5"/></bsdf>', "2.0.0"))
    assert list(d["bsdf"]) == ["type", "intIOR"]
    assert parse_xml(scene("", "3.6.1")) == {"type": "scene"}


def test_deep_nesting_is_an_error_not_a_crash():
    xml = '<scene version="3.0.0">' + '<bsdf type="x">' * 5000 + "</bsdf>" * 5000 + "</scene>"
    with pytest.raises(SceneError, match="nested more than"):
        parse_xml(xml)


# ---- fuzzing ------------------------------------------------------------------
_SEED = FULL_SCENE.encode()


def _only_scene_errors(data):
    try:
        d = parse_xml(data)
    except SceneError as exc:
        assert str(exc)
        return
    assert isinstance(d, dict) and "type" in d


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_mutations_raise_only_scene_error(data):
    kind = data.draw(st.sampled_from(["truncate", "bytes", "replace", "delete_attr", "delete_span",
                                      "dup_span", "attr_value"]))
    buf = bytearray(_SEED)
    if kind == "truncate":
        buf = buf[:data.draw(st.integers(0, len(buf)))]
    elif kind == "bytes":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(buf)))
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    elif kind == "replace":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] = data.draw(st.integers(0, 255))
    elif kind == "delete_attr":
        text = buf.decode()
        import re
        attrs = list(re.finditer(r'\s\w+="[^"]*"', text))
        for m in sorted(data.draw(st.lists(st.sampled_from(attrs), min_size=1, max_size=4, unique_by=lambda m: m.start())),
                        key=lambda m: -m.start()):
            text = text[:m.start()] + text[m.end():]
        buf = bytearray(text.encode())
    elif kind in ("delete_span", "dup_span"):
        i = data.draw(st.integers(0, len(buf)))
        j = data.draw(st.integers(i, min(len(buf), i + 200)))
        buf = buf[:i] + buf[j:] if kind == "delete_span" else buf[:j] + buf[i:j] + buf[j:]
    else:
        import re
        text = buf.decode()
        values = list(re.finditer(r'="([^"]*)"', text))
        m = data.draw(st.sampled_from(values))
        new = data.draw(st.sampled_from(["", "$spp", "$nope", "-1", "1e999", "nan", "0,0,0", "a b c",
                                         "999999999999999999999", "1 2 3 4 5 6 7 8 9", "&amp;", "\u00e9"]))
        text = text[:m.start(1)] + new + text[m.end(1):]
        buf = bytearray(text.encode())
    _only_scene_errors(bytes(buf))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_text_raises_only_scene_error(text):
    _only_scene_errors("<" + text)
    _only_scene_errors(scene(text))


# ==========================================================================
# Cornell box
# ==========================================================================
def test_cornell_box_matches_mitsuba(mi):
    ours, theirs = cornell_box(), mi.cornell_box()
    assert_same_dict(ours, theirs)
    for key, value in theirs.items():
        if isinstance(value, dict) and "to_world" in value:
            np.testing.assert_allclose(ours[key]["to_world"].matrix, mat(value["to_world"]), atol=1e-6)
            np.testing.assert_allclose(ours[key]["to_world"].inverse_matrix,
                                       mat(value["to_world"].inverse()), atol=1e-5)


def test_cornell_box_is_fresh_and_self_consistent():
    a, b = cornell_box(), cornell_box()
    a["white"]["reflectance"]["value"][0] = 0.0
    assert b["white"]["reflectance"]["value"][0] == 0.885809
    assert list(b) == ["type", "integrator", "sensor", "white", "green", "red", "light", "floor", "ceiling",
                       "back", "green-wall", "red-wall", "small-box", "large-box"]
    # The light sits just below the ceiling, facing down.
    light = b["light"]["to_world"]
    np.testing.assert_allclose(light.transform_point([0, 0, 0]), [0, 0.99, 0.01], atol=1e-12)
    n = light.transform_normal([0, 0, 1])
    np.testing.assert_allclose(n / np.linalg.norm(n), [0, -1, 0], atol=1e-12)


def test_cornell_box_xml_equals_dict():
    """The XML file in tests/data gives exactly cornell_box() (XML transform order, auto keys)."""
    assert_same_dict(parse_xml(CORNELL_XML), cornell_box(), atol=1e-12)
    d = parse_xml(CORNELL_XML, spp=4, res=32)
    assert d["sensor"]["sampler"]["sample_count"] == 4 and d["sensor"]["film"]["width"] == 32


def test_cornell_box_xml_matches_mitsuba(mi):
    config = mi.parser.ParserConfig("scalar_rgb")
    state = mi.parser.parse_file(config, str(CORNELL_XML))
    compare_with_mitsuba_state(mi, parse_xml(CORNELL_XML), state)
