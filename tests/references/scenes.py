"""Scene variants rendered by Mitsuba 3 for the reference images and by
jaxrender in tests/test_render_reference.py. Each variant edits a copy of a
Cornell box dictionary (Mitsuba's own ``mi.cornell_box()`` for the
references, ``jaxrender.cornell_box()`` in the tests: identical content)."""
from __future__ import annotations

from pathlib import Path

TEXTURES = Path(__file__).resolve().parent.parent / "data" / "textures"   # made by make_test_images.py
MESHES = TEXTURES.parent / "meshes"                                       # (idem)
VOLUMES = TEXTURES.parent / "volumes"                                     # (idem)

SIZE = 32          # small images keep the test fast; noise is judged per pixel
SPP = 128          # samples per pixel of each reference render
RENDERS = 8        # independent Mitsuba renders per reference (for the standard error)


def _copy(x):
    """Copy nested dicts; leave leaves (transforms, arrays) shared."""
    return {k: _copy(v) for k, v in x.items()} if isinstance(x, dict) else x


def _base(d, size=SIZE):
    d = _copy(d)
    d["sensor"]["film"]["width"] = size
    d["sensor"]["film"]["height"] = size
    return d


def cbox_gaussian(d):
    return _base(d)


def cbox_box_direct(d):
    d = _base(d)
    d["sensor"]["film"]["rfilter"] = {"type": "box"}
    d["integrator"] = {"type": "direct"}
    return d


def cbox_tent_depth3_hidden(d):
    d = _base(d)
    d["sensor"]["film"]["rfilter"] = {"type": "tent"}
    d["integrator"] = {"type": "path", "max_depth": 3, "hide_emitters": True}
    return d


def cbox_rect_wide(d):
    d = _base(d)
    d["sensor"]["film"]["width"] = 40
    d["sensor"]["film"]["height"] = 24
    d["sensor"]["fov_axis"] = "x"
    d["integrator"] = {"type": "path", "max_depth": 6, "rr_depth": 2}
    return d


def cbox_point_and_env(d):
    """Three emitter kinds at once: chosen uniformly, MIS against the environment."""
    d = _base(d)
    d["bulb"] = {"type": "point", "position": [0.3, 0.2, 0.3], "intensity": {"type": "rgb", "value": [0.8, 0.6, 0.3]}}
    d["sky"] = {"type": "constant", "radiance": {"type": "rgb", "value": [0.3, 0.4, 0.6]}}
    d["integrator"] = {"type": "path", "max_depth": 4}
    return d


def cbox_directional(d):
    d = _base(d)
    d["sun"] = {"type": "directional", "direction": [0.3, -0.5, -1.0],
                "irradiance": {"type": "rgb", "value": [2.0, 1.8, 1.5]}}
    d["integrator"] = {"type": "path", "max_depth": 4}
    return d


def cbox_metals(d):
    """Conductor, rough conductors (GGX, Beckmann anisotropic) and a twosided BSDF."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2,
                              "eta": {"type": "rgb", "value": [0.2, 0.45, 1.2]},
                              "k": {"type": "rgb", "value": [3.6, 2.4, 1.8]}}
    d["small-box"]["bsdf"] = {"type": "conductor", "specular_reflectance": {"type": "rgb", "value": [0.9, 0.8, 0.7]}}
    d["back"]["bsdf"] = {"type": "twosided", "material": {
        "type": "roughconductor", "distribution": "beckmann", "alpha_u": 0.1, "alpha_v": 0.4}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def cbox_plastics(d):
    d = _base(d)
    d["floor"]["bsdf"] = {"type": "plastic", "diffuse_reflectance": {"type": "rgb", "value": [0.3, 0.5, 0.7]}}
    d["large-box"]["bsdf"] = {"type": "plastic", "int_ior": 1.7, "ext_ior": "air", "nonlinear": True,
                              "diffuse_reflectance": {"type": "rgb", "value": [0.8, 0.3, 0.2]}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def cbox_glass(d):
    d = _base(d)
    d["small-box"]["bsdf"] = {"type": "dielectric"}
    d["large-box"]["bsdf"] = {"type": "roughdielectric", "distribution": "ggx", "alpha": 0.15, "int_ior": 1.33}
    d["integrator"] = {"type": "path", "max_depth": 8}
    return d


def cbox_roughplastics(d):
    """roughplastic: both distributions, nonlinear, tinted specular, IOR below and above the default,
    inside twosided."""
    d = _base(d)
    d["floor"]["bsdf"] = {"type": "roughplastic", "distribution": "ggx", "alpha": 0.25,
                          "diffuse_reflectance": {"type": "rgb", "value": [0.3, 0.5, 0.7]}}
    d["large-box"]["bsdf"] = {"type": "roughplastic", "int_ior": 1.7, "nonlinear": True,
                              "diffuse_reflectance": {"type": "rgb", "value": [0.8, 0.3, 0.2]}}
    d["small-box"]["bsdf"] = {"type": "twosided", "material": {
        "type": "roughplastic", "distribution": "ggx", "alpha": 0.5, "int_ior": 1.33,
        "specular_reflectance": {"type": "rgb", "value": [0.6, 0.8, 1.0]}}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def _transform(d):
    """The transform class of the dictionary's library (mi.ScalarTransform4f
    or jaxrender's Transform: same chained constructors)."""
    return type(d["sensor"]["to_world"])


def cbox_textured(d):
    """Bitmap (sRGB PNG, bilinear, repeat, to_uv) on the floor, a checkerboard
    on the back wall, a grey nearest/mirror bitmap in a plastic, and a
    textured roughness (one-channel bitmap for the scalar alpha)."""
    d = _base(d)
    T = _transform(d)
    d["floor"]["bsdf"] = {"type": "diffuse", "reflectance": {
        "type": "bitmap", "filename": str(TEXTURES / "albedo16.png"),
        "to_uv": T().scale([2.0, 1.5, 1.0]).translate([0.1, 0.0, 0.0])}}
    d["back"]["bsdf"] = {"type": "diffuse", "reflectance": {
        "type": "checkerboard", "color0": {"type": "rgb", "value": [0.8, 0.7, 0.2]},
        "color1": {"type": "rgb", "value": [0.1, 0.3, 0.6]}, "to_uv": T().scale([3.0, 3.0, 1.0])}}
    d["large-box"]["bsdf"] = {"type": "plastic", "diffuse_reflectance": {
        "type": "bitmap", "filename": str(TEXTURES / "grey8.png"), "filter_type": "nearest",
        "wrap_mode": "mirror", "to_uv": T().scale([1.7, 1.7, 1.0])}}
    d["small-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": {
        "type": "bitmap", "filename": str(TEXTURES / "grey8.png"), "raw": True, "wrap_mode": "clamp"}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def cbox_spots(d):
    """Two spot lights (default beam width; a wide linear transition), aimed with look_at, besides the
    area light."""
    d = _base(d)
    T = type(d["sensor"]["to_world"])
    d["spot"] = {"type": "spot", "cutoff_angle": 30.0,
                 "to_world": T().look_at(origin=[-0.3, 0.9, 0.2], target=[0.2, -1.0, -0.1], up=[0, 0, 1]),
                 "intensity": {"type": "rgb", "value": [8.0, 6.0, 4.0]}}
    d["spot2"] = {"type": "spot", "cutoff_angle": 25.0, "beam_width": 5.0,
                  "to_world": T().look_at(origin=[0.5, 0.0, 0.9], target=[-0.4, 0.2, -1.0], up=[0, 1, 0]),
                  "intensity": {"type": "rgb", "value": [1.5, 4.0, 6.0]}}
    d["integrator"] = {"type": "path", "max_depth": 4}
    return d


def env_lit(d):
    """Lit only by an environment map (EXR, rotated, scaled): a diffuse
    floor and a rough conductor cube, background visible."""
    T = _transform(d)
    sensor = d["sensor"]
    sensor["film"]["width"] = sensor["film"]["height"] = SIZE
    sensor["film"]["rfilter"] = {"type": "box"}
    return {
        "type": "scene",
        "integrator": {"type": "path", "max_depth": 4},
        "sensor": sensor,
        "sky": {"type": "envmap", "filename": str(TEXTURES / "sky32x16.exr"), "scale": 1.5,
                "to_world": T().rotate([0.0, 1.0, 0.0], 30.0)},
        "floor": {"type": "rectangle", "to_world": T().translate([0.0, -1.0, 0.0]).rotate([1.0, 0.0, 0.0], -90.0)
                  .scale([1.5, 1.5, 1.0]),
                  "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.6, 0.5, 0.4]}}},
        "box": {"type": "cube", "to_world": T().translate([0.0, -0.55, 0.0]).rotate([0.0, 1.0, 0.0], 35.0)
                .scale([0.45, 0.45, 0.45]),
                "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.25,
                         "specular_reflectance": {"type": "rgb", "value": [0.9, 0.8, 0.6]}}},
    }


def cbox_spheres(d):
    """Analytic spheres instead of the boxes: a rough conductor, a glass ball
    and a rotated diffuse sphere with a checkerboard (its UVs), plus a
    textured disk on the floor."""
    d = _base(d)
    T = _transform(d)
    del d["small-box"], d["large-box"]
    d["metal"] = {"type": "sphere", "center": [-0.45, -0.6, -0.35], "radius": 0.4,
                  "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2,
                           "specular_reflectance": {"type": "rgb", "value": [0.9, 0.8, 0.6]}}}
    d["glass"] = {"type": "sphere", "center": [0.5, -0.7, 0.35], "radius": 0.3, "bsdf": {"type": "dielectric"}}
    d["checks"] = {"type": "sphere", "to_world": T().translate([0.35, 0.15, -0.4]).rotate([0.0, 0.6, 0.8], 60.0)
                   .scale(0.3),
                   "bsdf": {"type": "diffuse", "reflectance": {
                       "type": "checkerboard", "color0": {"type": "rgb", "value": [0.8, 0.7, 0.2]},
                       "color1": {"type": "rgb", "value": [0.1, 0.3, 0.6]}, "to_uv": T().scale([6.0, 3.0, 1.0])}}}
    d["mat"] = {"type": "disk", "to_world": T().translate([-0.2, -0.999, 0.45]).rotate([1.0, 0.0, 0.0], -90.0)
                .scale([0.45, 0.3, 1.0]),
                "bsdf": {"type": "diffuse", "reflectance": {
                    "type": "checkerboard", "color0": {"type": "rgb", "value": [0.9, 0.9, 0.9]},
                    "color1": {"type": "rgb", "value": [0.6, 0.1, 0.1]}, "to_uv": T().scale([4.0, 8.0, 1.0])}}}
    d["integrator"] = {"type": "path", "max_depth": 6}
    return d


def cbox_shape_lights(d):
    """Area lights on analytic shapes: a sphere light (sampled by its cone),
    a disk light facing down through flip_normals, and a faint flipped
    sphere light enclosing everything (sampled by area from inside); a
    flipped diffuse sphere (black: its outside is its back) and the
    rectangle light turned off."""
    d = _base(d)
    T = _transform(d)
    del d["light"]["emitter"], d["small-box"]
    d["bulb"] = {"type": "sphere", "center": [0.35, 0.55, 0.1], "radius": 0.12,
                 "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [9.0, 7.0, 4.0]}}}
    d["lamp"] = {"type": "disk", "flip_normals": True,       # faces +z unflipped: rotated to face up, flipped down
                 "to_world": T().translate([-0.45, 0.97, -0.2]).rotate([1.0, 0.0, 0.0], -90.0).scale(0.2),
                 "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [3.0, 5.0, 8.0]}}}
    d["dome"] = {"type": "sphere", "radius": 20.0, "flip_normals": True,
                 "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [0.3, 0.3, 0.4]}}}
    d["inside-out"] = {"type": "sphere", "center": [0.4, -0.7, 0.3], "radius": 0.3, "flip_normals": True,
                       "bsdf": {"type": "ref", "id": "white"}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def cbox_smooth_meshes(d):
    """Vertex normals: a low-poly OBJ sphere with its file's normals (rough
    conductor), a PLY torus whose normals Mitsuba computes (plastic), and
    the OBJ again with face_normals (faceted)."""
    d = _base(d)
    T = _transform(d)
    del d["small-box"], d["large-box"]
    d["smooth"] = {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"),
                   "to_world": T().translate([-0.45, -0.55, -0.3]).scale(0.45),
                   "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.15}}
    d["torus"] = {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"),
                  "to_world": T().translate([0.3, -0.75, 0.3]).rotate([1.0, 0.0, 0.0], 20.0).scale(0.4),
                  "bsdf": {"type": "plastic", "diffuse_reflectance": {"type": "rgb", "value": [0.2, 0.5, 0.8]}}}
    d["faceted"] = {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"), "face_normals": True,
                    "to_world": T().translate([0.4, 0.2, -0.45]).scale(0.3),
                    "bsdf": {"type": "ref", "id": "white"}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def _medium(sigma_t, albedo, phase=None, scale=1.0):
    """A homogeneous medium (isotropic unless ``phase`` is given)."""
    m = {"type": "homogeneous", "sigma_t": sigma_t, "albedo": albedo, "scale": scale}
    if phase is not None:
        m["phase"] = phase
    return m


def _rgb(*v):
    return {"type": "rgb", "value": list(v)}


def cbox_medium_slab(d):
    """The large box as a null-bounded slab of dense, bright, coloured
    homogeneous medium (optical depth about 2 to 4 across: light reaches
    the far side mostly by multiple scattering)."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "null"}
    d["large-box"]["interior"] = _medium(_rgb(0.6, 0.8, 1.0), _rgb(0.95, 0.85, 0.6), scale=6.0)
    d["integrator"] = {"type": "volpath", "max_depth": 12}
    return d


def cbox_medium_smoke(d):
    """A 16^3 smoke grid (tests/data/volumes/smoke16.vol) filling the small
    box (lifted a little), behind null boundaries: trilinear lookups, delta and ratio
    tracking against the grid's majorant."""
    d = _base(d)
    T = _transform(d)
    # Lifted off the floor: a null face coplanar with the floor would make
    # which of the two a ray meets first (and so the medium it is in) a
    # matter of rounding.
    d["small-box"]["to_world"] = T().translate([0.0, 0.03, 0.0]) @ d["small-box"]["to_world"]
    d["small-box"]["bsdf"] = {"type": "null"}
    d["small-box"]["interior"] = {
        "type": "heterogeneous", "scale": 25.0, "albedo": 0.9,
        "sigma_t": {"type": "gridvolume", "filename": str(VOLUMES / "smoke16.vol"),
                    "to_world": d["small-box"]["to_world"].translate([-1.0, -1.0, -1.0]).scale(2.0)}}
    d["integrator"] = {"type": "volpath", "max_depth": 10}
    return d


def cbox_medium_in_glass(d):
    """A smooth glass sphere holding a coloured, mostly absorbing medium:
    media entered and left through refraction (a low albedo keeps the
    in-scattered light, which only finds the lamp through the glass by
    chance, from dominating the noise)."""
    d = _base(d)
    del d["small-box"]
    d["ball"] = {"type": "sphere", "center": [0.35, -0.6, 0.3], "radius": 0.38, "bsdf": {"type": "dielectric"},
                 "interior": _medium(_rgb(0.25, 0.6, 1.0), _rgb(0.5, 0.5, 0.5), scale=5.0)}
    d["integrator"] = {"type": "volpath", "max_depth": 12}
    return d


def cbox_medium_hg(d):
    """Three null-bounded spheres of the same medium hanging between the
    lamp and the camera, HG phase functions with g = -0.5, 0.3 and 0.8:
    the lamp's light reaches the camera scattered by about 40 degrees, so
    forward- and back-scattering look different (the sign of g shows)."""
    d = _base(d)
    del d["small-box"]
    for name, x, g in (("back-scatter", -0.5, -0.5), ("mild", 0.0, 0.3), ("forward", 0.5, 0.8)):
        d[name] = {"type": "sphere", "center": [x, 0.45, 0.5], "radius": 0.22, "bsdf": {"type": "null"},
                   "interior": _medium(6.0, 0.95, {"type": "hg", "g": g})}
    d["integrator"] = {"type": "volpath", "max_depth": 10}
    return d


# Plugins added after the first references (issue 16): each scene several of them.

def _tex(name, **kw):
    """A bitmap of tests/data/textures."""
    return {"type": "bitmap", "filename": str(TEXTURES / name), **kw}


def cbox_principled(d):
    """principled four ways: a plain dielectric-like floor (specular, spec_tint), a metallic
    box with clearcoat and sheen, a rough glass box (spec_trans, eta), and the back wall as
    anisotropic principledthin (glossy and diffuse transmission)."""
    d = _base(d)
    d["floor"]["bsdf"] = {"type": "principled", "base_color": _rgb(0.3, 0.5, 0.7), "roughness": 0.35,
                          "specular": 0.7, "spec_tint": 0.4}
    d["large-box"]["bsdf"] = {"type": "principled", "base_color": _rgb(0.9, 0.6, 0.2), "metallic": 0.8,
                              "roughness": 0.3, "clearcoat": 0.5, "clearcoat_gloss": 0.7,
                              "sheen": 0.4, "sheen_tint": 0.5}
    d["small-box"]["bsdf"] = {"type": "principled", "base_color": _rgb(0.7, 0.9, 1.0), "spec_trans": 0.8,
                              "roughness": 0.2, "eta": 1.4}
    d["back"]["bsdf"] = {"type": "principledthin", "base_color": _rgb(0.8, 0.3, 0.3), "roughness": 0.4,
                         "spec_trans": 0.3, "diff_trans": 0.4, "eta": 1.3, "anisotropic": 0.3}
    d["integrator"] = {"type": "path", "max_depth": 6}
    return d


def cbox_anisotropic(d):
    """Anisotropic BSDFs on the cubes: principled (metallic, anisotropic) and a roughconductor
    with alpha_u != alpha_v. Mitsuba orients their roughness along dp_du (the shading frame's
    s is dp_du made orthogonal to n); on a cube's faces that is not the frame of the normal
    alone (on the back wall the two agree), so this checks jaxrender builds Mitsuba's."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "principled", "base_color": _rgb(0.9, 0.6, 0.2), "metallic": 0.9,
                              "roughness": 0.3, "anisotropic": 0.8}
    d["small-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha_u": 0.05, "alpha_v": 0.3}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def _card(T, x, y, angle, bsdf):
    """A small square card at (x, y, 0.3), turned by ``angle`` degrees about y."""
    return {"type": "rectangle", "bsdf": bsdf,
            "to_world": T().translate([x, y, 0.3]).rotate([0.0, 1.0, 0.0], angle).scale(0.22)}


def cbox_composites(d):
    """blendbsdf (a checkerboard weight between diffuse and a rough conductor), mask (a bitmap
    opacity over a plastic: the box's inner faces show through) and twosided with two different
    BSDFs on two cards, one facing the camera with its front, the other with its back."""
    d = _base(d)
    T = _transform(d)
    d["large-box"]["bsdf"] = {"type": "blendbsdf", "weight": {
        "type": "checkerboard", "color0": 0.15, "color1": 0.8, "to_uv": T().scale([3.0, 3.0, 1.0])},
        "bsdf_0": {"type": "diffuse", "reflectance": _rgb(0.05, 0.1, 0.6)},
        "bsdf_1": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2,
                   "specular_reflectance": _rgb(0.95, 0.85, 0.3)}}
    d["small-box"]["bsdf"] = {"type": "mask", "opacity": _tex("grey8.png", raw=True, filter_type="nearest"),
                              "bsdf": {"type": "plastic", "diffuse_reflectance": _rgb(0.2, 0.6, 0.3)}}
    sides = {"type": "twosided", "front": {"type": "diffuse", "reflectance": _rgb(0.9, 0.8, 0.1)},
             "back": {"type": "roughplastic", "alpha": 0.2, "diffuse_reflectance": _rgb(0.1, 0.3, 0.8)}}
    d["card-front"] = _card(T, -0.5, 0.35, 30.0, {"type": "ref", "id": "sides"})
    d["card-back"] = _card(T, 0.5, 0.35, 150.0, {"type": "ref", "id": "sides"})
    d = {"sides": sides, **d}
    d["integrator"] = {"type": "path", "max_depth": 6}
    return d


def cbox_bumpy(d):
    """normalmap (tests/data/textures/normals16.png, raw, repeated) under a rough plastic floor
    and a diffuse large box; bumpmap (grey8.png as the height, scaled) under a rough conductor
    back wall and, nested in a normal map's BSDF, the small box."""
    d = _base(d)
    T = _transform(d)
    normals = _tex("normals16.png", raw=True, to_uv=T().scale([2.0, 2.0, 1.0]))
    d["floor"]["bsdf"] = {"type": "normalmap", "normalmap": normals,
                          "bsdf": {"type": "roughplastic", "alpha": 0.15, "diffuse_reflectance": _rgb(0.3, 0.5, 0.7)}}
    d["large-box"]["bsdf"] = {"type": "normalmap", "normalmap": normals, "bsdf": {"type": "ref", "id": "white"}}
    d["back"]["bsdf"] = {"type": "bumpmap", "scale": 3.0, "height": _tex("grey8.png", raw=True),
                         "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.25}}
    d["small-box"]["bsdf"] = {"type": "bumpmap", "scale": 2.0,
                              "height": _tex("grey8.png", raw=True, to_uv=T().scale([0.5, 0.5, 1.0])),
                              "bsdf": {"type": "plastic", "diffuse_reflectance": _rgb(0.7, 0.4, 0.1)}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def cbox_thinlens_cylinders(d):
    """A thin-lens camera focused on the front of the checkered large box (the back wall a few
    pixels out of focus); a rough conductor cylinder (open: its inside shows) instead of the
    small box, and a thin cylinder light under the ceiling, the only light."""
    d = _base(d)
    T = _transform(d)
    d["sensor"]["type"] = "thinlens"
    d["sensor"]["aperture_radius"] = 0.3
    d["sensor"]["focus_distance"] = 3.5
    del d["small-box"], d["light"]["emitter"]
    d["large-box"]["bsdf"] = {"type": "diffuse", "reflectance": {
        "type": "checkerboard", "color0": _rgb(0.9, 0.9, 0.9), "color1": _rgb(0.1, 0.1, 0.4),
        "to_uv": T().scale([4.0, 4.0, 1.0])}}
    d["can"] = {"type": "cylinder", "p0": [0.35, -1.0, 0.35], "p1": [0.3, -0.35, 0.3], "radius": 0.25,
                "bsdf": {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2,
                         "specular_reflectance": _rgb(0.9, 0.7, 0.5)}}
    d["tube"] = {"type": "cylinder", "p0": [-0.7, 0.8, -0.6], "p1": [0.7, 0.75, -0.5], "radius": 0.04,
                 "emitter": {"type": "area", "radiance": _rgb(8.0, 10.0, 14.0)}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


def cbox_ortho_instances(d):
    """An orthographic camera (scaled to_world: its view) over instances of a shapegroup (a
    tilted torus, a cylinder off its centre and a faceted ball: asymmetric, and the ball's
    face normals turn inwards unless a mirrored copy's vertex order is reversed), three
    times, one mirrored in x,
    and a serialized mesh (tests/data/meshes/lowpoly_sphere.serialized: an egg with its own
    normals and uvs) under a checkerboard."""
    d = _base(d)
    T = _transform(d)
    d["sensor"]["type"] = "orthographic"
    for k in ("fov", "fov_axis", "focus_distance"):
        del d["sensor"][k]
    d["sensor"]["to_world"] = T().look_at(origin=[0.0, 0.0, 3.9], target=[0.0, 0.0, 0.0], up=[0.0, 1.0, 0.0]) \
        .scale([1.02, 1.02, 1.0])
    del d["small-box"], d["large-box"]
    group = {"type": "shapegroup",
             "torus": {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"),
                       "to_world": T().translate([0.15, 0.0, 0.0]).rotate([1.0, 0.0, 0.0], 50.0).scale(0.7),
                       "bsdf": {"type": "plastic", "diffuse_reflectance": _rgb(0.2, 0.5, 0.8)}},
             "post": {"type": "cylinder", "p0": [-0.6, -0.3, 0.2], "p1": [-0.4, 0.9, 0.1], "radius": 0.15,
                      "bsdf": {"type": "diffuse", "reflectance": _rgb(0.8, 0.5, 0.1)}},
             "ball": {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"), "face_normals": True,
                      "to_world": T().translate([0.7, 0.6, 0.3]).scale(0.3),
                      "bsdf": {"type": "ref", "id": "white"}}}
    d = {"group": group, **d}
    for name, to_world in (("copy-a", T().translate([-0.45, 0.35, -0.3]).scale(0.35)),
                           ("copy-b", T().translate([0.1, -0.7, 0.1]).rotate([0.0, 1.0, 0.0], 40.0).scale(0.3)),
                           ("mirrored", T().translate([0.5, 0.35, -0.3]).scale([-0.35, 0.35, 0.35]))):
        d[name] = {"type": "instance", "shapegroup": {"type": "ref", "id": "group"}, "to_world": to_world}
    d["egg"] = {"type": "serialized", "filename": str(MESHES / "lowpoly_sphere.serialized"),
                "to_world": T().translate([-0.4, -0.5, 0.3]).rotate([0.0, 0.0, 1.0], 25.0).scale(0.36),
                "bsdf": {"type": "diffuse", "reflectance": {
                    "type": "checkerboard", "color0": _rgb(0.9, 0.9, 0.9), "color1": _rgb(0.6, 0.1, 0.1),
                    "to_uv": T().scale([4.0, 2.0, 1.0])}}}
    d["integrator"] = {"type": "path", "max_depth": 5}
    return d


PLUGIN_VARIANTS = {f.__name__: f for f in (cbox_principled, cbox_anisotropic, cbox_composites, cbox_bumpy,
                                           cbox_thinlens_cylinders, cbox_ortho_instances)}


MEDIA_VARIANTS = {f.__name__: f for f in (cbox_medium_slab, cbox_medium_smoke, cbox_medium_in_glass,
                                          cbox_medium_hg)}


VARIANTS = {**{f.__name__: f for f in (cbox_gaussian, cbox_box_direct, cbox_tent_depth3_hidden, cbox_rect_wide,
                                       cbox_point_and_env, cbox_directional, cbox_metals, cbox_plastics, cbox_glass,
                                       cbox_roughplastics, cbox_spots, cbox_textured, env_lit, cbox_spheres,
                                       cbox_shape_lights, cbox_smooth_meshes)},
            **MEDIA_VARIANTS, **PLUGIN_VARIANTS}


# Mitsuba's samplers: references rendered with the scene's own sampler and
# sample count (not SPP), compared by tests/test_samplers.py.
def _sampled(d, sampler, integrator=None, rfilter=None):
    d = _base(d)
    d["sensor"]["sampler"] = sampler
    if integrator is not None:
        d["integrator"] = integrator
    if rfilter is not None:
        d["sensor"]["film"]["rfilter"] = {"type": rfilter}
    return d


def cbox_stratified(d):
    return _sampled(d, {"type": "stratified", "sample_count": 64}, {"type": "direct"}, "box")


def cbox_multijitter(d):
    return _sampled(d, {"type": "multijitter", "sample_count": 48}, {"type": "path", "max_depth": 4}, "tent")


def cbox_orthogonal(d):
    return _sampled(d, {"type": "orthogonal", "sample_count": 49}, {"type": "path", "max_depth": 3})


def cbox_orthogonal_strength3(d):
    """Bush's construction (p^3 rows, of which a pixel takes p^2, as in Mitsuba)."""
    return _sampled(d, {"type": "orthogonal", "sample_count": 25, "strength": 3}, {"type": "direct"}, "box")


def cbox_ldsampler(d):
    return _sampled(d, {"type": "ldsampler", "sample_count": 64, "seed": 5})


SAMPLER_VARIANTS = {f.__name__: f for f in (cbox_stratified, cbox_multijitter, cbox_orthogonal,
                                            cbox_orthogonal_strength3, cbox_ldsampler)}

# AOV integrator references: (H, W, C) images, channels in the order of the
# "aovs" string (compared by tests/test_aov.py; uv is not, see there).
AOVS = "dd:depth,pp:position,uv:uv,nn:geo_normal,sh:sh_normal,al:albedo"


def cbox_aovs(d):
    """Every AOV type over BSDFs whose albedo comes from their diffuse reflectance (diffuse, plastic,
    twosided roughplastic), from pi * eval (rough conductor) or is 0 (dielectric)."""
    d = _base(d, 24)
    d["sensor"]["film"]["rfilter"] = {"type": "tent"}
    d["large-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.4}
    d["small-box"]["bsdf"] = {"type": "plastic", "diffuse_reflectance": {"type": "rgb", "value": [0.2, 0.6, 0.3]}}
    d["back"]["bsdf"] = {"type": "twosided", "material": {
        "type": "roughplastic", "diffuse_reflectance": {"type": "rgb", "value": [0.7, 0.4, 0.1]}}}
    d["floor"]["bsdf"] = {"type": "dielectric"}
    d["integrator"] = {"type": "aov", "aovs": AOVS}
    return d


SHAPE_AOVS = "dd:depth,nn:geo_normal,sh:sh_normal,uv:uv"


def shapes_aovs(d):
    """Depth, normals and UVs of spheres (rotated, flipped), a disk and
    smooth / faceted meshes (a checkerboard makes the scene textured, so
    jaxrender computes UVs)."""
    d = cbox_spheres(d)
    T = _transform(d)
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 24
    d["sensor"]["film"]["rfilter"] = {"type": "box"}
    d["glass"]["flip_normals"] = True
    d["smooth"] = {"type": "obj", "filename": str(MESHES / "lowpoly_sphere.obj"),
                   "to_world": T().translate([0.5, -0.65, 0.3]).scale(0.3)}
    del d["glass"]["bsdf"]
    d["glass"]["center"] = [-0.5, 0.3, 0.0]
    d["torus"] = {"type": "ply", "filename": str(MESHES / "lowpoly_torus.ply"),
                  "to_world": T().translate([0.0, -0.2, 0.3]).rotate([1.0, 0.0, 0.0], 60.0).scale(0.25)}
    d["integrator"] = {"type": "aov", "aovs": SHAPE_AOVS}
    return d


AOV_VARIANTS = {f.__name__: f for f in (cbox_aovs, shapes_aovs)}


# Colour variants other than rgb: name -> (jaxrender / Mitsuba variant, scene).
# Mitsuba renders mono with llvm_ad_mono (it has no scalar_mono), spectral
# with scalar_spectral; tests/test_variants.py compares.
def cbox_conductors(d):
    """Named and default conductors (mono: luminances of their RGB constants)."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2, "material": "Au"}
    d["small-box"]["bsdf"] = {"type": "conductor", "material": "Cu"}
    return d


def cbox_spectral_mix(d):
    """Glass, plastic, a mirror and uniform-spectrum colours: what the
    spectral variant renders without textures."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "roughplastic", "distribution": "ggx", "alpha": 0.15,
                              "diffuse_reflectance": {"type": "rgb", "value": [0.1, 0.3, 0.8]}}
    d["small-box"]["bsdf"] = {"type": "dielectric", "int_ior": 1.5}
    d["back"]["bsdf"] = {"type": "diffuse", "reflectance": {"type": "spectrum", "value": 0.6}}
    d["floor"]["bsdf"] = {"type": "conductor"}
    d["integrator"] = {"type": "path", "max_depth": 6}
    return d


SPECTRA = TEXTURES.parent / "spectra"


def cbox_spectrum_lists(d):
    """Tabulated spectra: a wavelength:value list and an .spd file as
    reflectances, a list as the light's radiance (Mitsuba integrates them to
    RGB in rgb and mono, evaluates them per wavelength in spectral)."""
    d = _base(d)
    d["back"]["bsdf"] = {"type": "diffuse", "reflectance": {
        "type": "spectrum", "value": [(400, 0.1), (450, 0.3), (500, 0.6), (550, 0.5), (600, 0.4), (650, 0.8),
                                      (700, 0.2)]}}
    d["large-box"]["bsdf"] = {"type": "diffuse", "reflectance": {"type": "spectrum",
                                                                 "filename": str(SPECTRA / "leaf.spd")}}
    d["light"]["emitter"]["radiance"] = {"type": "spectrum",
                                         "value": [(380, 5.0), (500, 20.0), (600, 10.0), (780, 30.0)]}
    return d


def cbox_principled(d):
    """Both principled models (their many lobes, a glassy thin sheet)."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "principled", "base_color": {"type": "rgb", "value": [0.7, 0.3, 0.2]},
                              "metallic": 0.4, "roughness": 0.35, "clearcoat": 0.5, "sheen": 0.3}
    d["small-box"]["bsdf"] = {"type": "principledthin", "base_color": {"type": "rgb", "value": [0.2, 0.5, 0.8]},
                              "roughness": 0.3, "spec_trans": 0.4, "diff_trans": 0.3}
    return d


def cbox_uniform_iors(d):
    """Conductors whose eta and k are floats above 1: Mitsuba's uniform
    spectra, beyond reflectances (spectral: not upsampled colours)."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2, "eta": 2.2, "k": 1.5}
    d["small-box"]["bsdf"] = {"type": "conductor", "eta": 1.8, "k": 3.0,
                              "specular_reflectance": {"type": "rgb", "value": [0.9, 0.6, 0.3]}}
    return d


def cbox_xyz(d):
    d = _base(d)
    d["sensor"]["film"]["pixel_format"] = "xyz"
    return d


def cbox_luminance_alpha(d):
    d = cbox_spectral_mix(d)
    d["sensor"]["film"]["pixel_format"] = "luminance_alpha"
    return d


COLOR_VARIANTS = {
    "spectral_xyz": ("spectral", cbox_xyz),
    "spectral_luminance_alpha": ("spectral", cbox_luminance_alpha),
    "spectral_uniform_iors": ("spectral", cbox_uniform_iors),
    "spectral_principled": ("spectral", cbox_principled),
    "mono_principled": ("mono", cbox_principled),
    "rgb_spectrum_lists": ("rgb", cbox_spectrum_lists),
    "mono_spectrum_lists": ("mono", cbox_spectrum_lists),
    "spectral_spectrum_lists": ("spectral", cbox_spectrum_lists),
    "spectral_conductors": ("spectral", cbox_conductors),
    "spectral_textured": ("spectral", cbox_textured),
    "spectral_env_lit": ("spectral", env_lit),
    "spectral_medium_slab": ("spectral", cbox_medium_slab),
    "spectral_medium_smoke": ("spectral", cbox_medium_smoke),
    "mono_medium_smoke": ("mono", cbox_medium_smoke),
    "mono_medium_in_glass": ("mono", cbox_medium_in_glass),
    "mono_cbox": ("mono", cbox_gaussian),
    "mono_conductors": ("mono", cbox_conductors),
    "mono_textured": ("mono", cbox_textured),
    "mono_env_lit": ("mono", env_lit),
    "spectral_cbox": ("spectral", cbox_gaussian),
    "spectral_mix": ("spectral", cbox_spectral_mix),
    "spectral_shape_lights": ("spectral", cbox_shape_lights),
}

def _glass_small_box(d, ior=1.5):
    """The small box as glass, lifted off the floor: its bottom face would
    coincide with the floor, where which of two coplanar surfaces a ray
    finds is each renderer's own (total internal reflection there turns
    polarization circular, a diffuse floor does not)."""
    T = _transform(d)
    d["small-box"]["to_world"] = T().translate([0.335, -0.68, 0.38]).rotate([0, 1, 0], -17).scale(0.3)
    d["small-box"]["bsdf"] = {"type": "dielectric", "int_ior": ior}


def cbox_stokes(d):
    """Polarization by reflection: a glass box, a gold box and a mirror
    floor, seen by the stokes integrator (S0-S3 of each surface's Fresnel
    matrices; the walls depolarize)."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "conductor", "material": "Au"}
    _glass_small_box(d)
    d["floor"]["bsdf"] = {"type": "conductor"}
    d["integrator"] = {"type": "stokes", "nested": {"type": "path", "max_depth": 5}}
    return d


def cbox_polarizers(d):
    """Sheets in front of the camera: a linear polarizer at 0 degrees over
    the whole view, then over the left half a second one at 60 degrees
    (Malus: cos^2 60 = 1/4 of what the first passes) and over the right half
    a quarter-wave retarder at 45 degrees (linear turned circular: S3); a
    tilted glass box reflects partly polarized light through them."""
    d = _base(d)
    T = _transform(d)
    _glass_small_box(d)
    d["sheet"] = {"type": "rectangle", "to_world": T().translate([0.0, 0.0, 2.6]).scale([2.0, 2.0, 1.0]),
                  "bsdf": {"type": "polarizer", "theta": 0.0}}
    d["left"] = {"type": "rectangle", "to_world": T().translate([-1.0, 0.0, 2.7]).scale([1.0, 2.0, 1.0]),
                 "bsdf": {"type": "polarizer", "theta": 60.0}}
    d["right"] = {"type": "rectangle", "to_world": T().translate([1.0, 0.0, 2.7]).scale([1.0, 2.0, 1.0]),
                  "bsdf": {"type": "retarder", "theta": 45.0, "delta": 90.0}}
    d["integrator"] = {"type": "stokes", "nested": {"type": "path", "max_depth": 8}}
    return d


def cbox_polarized_path(d):
    """The path integrator's intensity with polarizing surfaces: crossed
    polarizers (0 and 90 degrees) over the left half, parallel ones over
    the right half, a glass box and a gold one behind them."""
    d = _base(d)
    T = _transform(d)
    d["large-box"]["bsdf"] = {"type": "conductor", "material": "Au"}
    _glass_small_box(d, 1.33)
    d["sheet"] = {"type": "rectangle", "to_world": T().translate([0.0, 0.0, 2.6]).scale([2.0, 2.0, 1.0]),
                  "bsdf": {"type": "polarizer", "theta": 0.0}}
    d["left"] = {"type": "rectangle", "to_world": T().translate([-1.0, 0.0, 2.7]).scale([1.0, 2.0, 1.0]),
                 "bsdf": {"type": "polarizer", "theta": 90.0}}
    d["right"] = {"type": "rectangle", "to_world": T().translate([1.0, 0.0, 2.7]).scale([1.0, 2.0, 1.0]),
                  "bsdf": {"type": "polarizer", "theta": 0.0, "transmittance": 0.8}}
    d["integrator"] = {"type": "path", "max_depth": 9}
    return d


def cbox_stokes_rough(d):
    """Polarizing microfacets and composites: a rough gold box (GGX), a
    blend of copper and a diffuse white, and a twosided rough mirror floor
    (Beckmann), seen by the stokes integrator."""
    d = _base(d)
    T = _transform(d)
    d["large-box"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2, "material": "Au"}
    d["small-box"]["to_world"] = T().translate([0.335, -0.68, 0.38]).rotate([0, 1, 0], -17).scale(0.3)
    d["small-box"]["bsdf"] = {"type": "blendbsdf", "weight": 0.4,
                              "bsdf_0": {"type": "conductor", "material": "Cu"}, "bsdf_1": {"type": "diffuse"}}
    d["floor"]["bsdf"] = {"type": "twosided", "bsdf": {"type": "roughconductor", "alpha": 0.1}}
    d["integrator"] = {"type": "stokes", "nested": {"type": "path", "max_depth": 5}}
    return d


def cbox_circular(d):
    """Circular polarizers in front of the Cornell box: right-handed over
    the left half, left-handed (transmitting 0.7) over the right half, and
    a linear polarizer at 30 degrees behind both (S3 of either sign, and
    half of the linear light through each)."""
    d = _base(d)
    T = _transform(d)
    _glass_small_box(d)
    d["sheet"] = {"type": "rectangle", "to_world": T().translate([0.0, 0.0, 2.6]).scale([2.0, 2.0, 1.0]),
                  "bsdf": {"type": "polarizer", "theta": 30.0}}
    d["left"] = {"type": "rectangle", "to_world": T().translate([-1.0, 0.0, 2.7]).scale([1.0, 2.0, 1.0]),
                 "bsdf": {"type": "circular"}}
    d["right"] = {"type": "rectangle", "to_world": T().translate([1.0, 0.0, 2.7]).scale([1.0, 2.0, 1.0]),
                  "bsdf": {"type": "circular", "left_handed": True, "transmittance": 0.7}}
    d["integrator"] = {"type": "stokes", "nested": {"type": "path", "max_depth": 8}}
    return d


def brewster_periscope(d):
    """Two glass plates at Brewster's angle (tan = 1.5) whose planes of
    incidence are perpendicular: the first reflects only light polarized
    along its surface, which the second, seeing it as p-polarized, does not
    reflect. Polarized, the light seen in the second plate nearly vanishes
    (unpolarized it would not). The light passes a slab of fog on its way
    (volpath with a medium)."""
    import numpy as np
    T = _transform(d)
    th = np.arctan(1.5)
    d0 = np.array([np.sin(th), 0.0, -np.cos(th)])           # onto plate 1 (normal +z)
    d1 = np.array([np.sin(th), 0.0, np.cos(th)])            # reflected
    p2 = 3.0 * d1
    n2 = -np.cos(th) * d1 + np.array([0.0, np.sin(th), 0.0])
    d2 = d1 + 2.0 * np.cos(th) * n2                          # reflected off plate 2
    lp = p2 + 4.0 * d2

    def facing(origin, normal, size):
        up = [0.0, 0.0, 1.0] if abs(normal[2]) < 0.9 else [0.0, 1.0, 0.0]
        return T().look_at(origin=list(map(float, origin)), target=list(map(float, origin + normal)), up=up) \
            .scale([size, size, 1.0])

    sensor = d["sensor"]
    sensor["to_world"] = T().look_at(origin=list(map(float, -6.0 * d0)), target=[0.0, 0.0, 0.0], up=[0.0, 1.0, 0.0])
    sensor["fov"] = 4.0
    sensor["film"]["width"] = sensor["film"]["height"] = 16
    sensor["film"]["rfilter"] = {"type": "box"}
    return {
        "type": "scene", "integrator": {"type": "volpath", "max_depth": 6}, "sensor": sensor,
        "plate1": {"type": "rectangle", "to_world": T().scale([2.0, 2.0, 1.0]),
                   "bsdf": {"type": "dielectric", "int_ior": 1.5, "ext_ior": 1.0}},
        "plate2": {"type": "rectangle", "to_world": facing(p2, n2, 1.5),
                   "bsdf": {"type": "dielectric", "int_ior": 1.5, "ext_ior": 1.0}},
        "light": {"type": "rectangle", "to_world": facing(lp, -d2, 3.0),
                  "emitter": {"type": "area", "radiance": {"type": "rgb", "value": [10.0, 10.0, 10.0]}}},
        "fog": {"type": "cube", "to_world": T().translate(list(map(float, p2 + 2.0 * d2))).scale(0.8),
                "bsdf": {"type": "null"},
                "interior": {"type": "homogeneous", "sigma_t": 0.5, "albedo": 0.6}},
    }


def cbox_pplastic(d):
    """Mitsuba's polarized plastic (rough GGX and Beckmann coatings over
    coloured bases) on the boxes, seen by the stokes integrator where
    polarized (the path tracer elsewhere)."""
    d = _base(d)
    d["large-box"]["bsdf"] = {"type": "pplastic", "distribution": "ggx", "alpha": 0.15,
                              "diffuse_reflectance": {"type": "rgb", "value": [0.2, 0.4, 0.7]}}
    d["small-box"]["bsdf"] = {"type": "pplastic", "alpha": 0.3, "int_ior": 1.7,
                              "diffuse_reflectance": {"type": "rgb", "value": [0.7, 0.5, 0.2]},
                              "specular_reflectance": 0.8}
    d["integrator"] = {"type": "path", "max_depth": 6}
    return d


def cbox_pplastic_stokes(d):
    d = cbox_pplastic(d)
    d["integrator"] = {"type": "stokes", "nested": {"type": "path", "max_depth": 6}}
    return d


def brewster_stokes(d):
    """The Brewster periscope's Stokes images, volpath nested."""
    d = brewster_periscope(d)
    d["integrator"] = {"type": "stokes", "nested": d["integrator"]}
    return d


POLARIZED_VARIANTS = {
    "spectral_polarized_brewster_stokes": ("spectral_polarized", brewster_stokes),
    "rgb_pplastic": ("rgb", cbox_pplastic),
    "spectral_polarized_pplastic": ("spectral_polarized", cbox_pplastic_stokes),
    "spectral_polarized_brewster": ("spectral_polarized", brewster_periscope),
    "spectral_polarized_medium_in_glass": ("spectral_polarized", cbox_medium_in_glass),
    "mono_polarized_medium_smoke": ("mono_polarized", cbox_medium_smoke),
    "spectral_polarized_circular": ("spectral_polarized", cbox_circular),
    "spectral_polarized_stokes_rough": ("spectral_polarized", cbox_stokes_rough),
    "spectral_polarized_stokes": ("spectral_polarized", cbox_stokes),
    "spectral_polarized_sheets": ("spectral_polarized", cbox_polarizers),
    "spectral_polarized_path": ("spectral_polarized", cbox_polarized_path),
    "mono_polarized_stokes": ("mono_polarized", cbox_stokes),
}


# The aov integrator in the colour variants (compared as tests/test_aov.py does).
COLOR_AOV_VARIANTS = {"mono_aovs": ("mono", cbox_aovs), "spectral_aovs": ("spectral", cbox_aovs),
                      "spectral_polarized_aovs": ("spectral_polarized", cbox_aovs)}
