"""The names of Mitsuba 3.9.1's plugins, for messages: what a name is, and
which known name a misspelled one was probably meant to be.

Example::

    did_you_mean("difuse", MITSUBA_PLUGINS["bsdf"])    # " (did you mean 'diffuse'?)"
"""
from __future__ import annotations

import difflib
from typing import Iterable

# Every plugin of Mitsuba 3.9.1, by category (src/<category>s/ and the
# Python integrators), so that messages can say what a plugin is.
MITSUBA_PLUGINS = {
    "bsdf": ("blendbsdf", "bumpmap", "circular", "conductor", "dielectric", "diffuse", "hair", "mask", "measured",
             "measured_polarized", "normalmap", "null", "plastic", "polarizer", "pplastic", "principled",
             "principledthin", "retarder", "roughconductor", "roughdielectric", "roughplastic", "thindielectric",
             "twosided"),
    "emitter": ("area", "constant", "directional", "directionalarea", "envmap", "point", "projector", "spot",
                "sunsky", "timed_sunsky"),
    "film": ("hdrfilm", "specfilm"),
    "integrator": ("aov", "depth", "direct", "moment", "path", "ptracer", "stokes", "volpath", "volpathmis",
                   "direct_projective", "prb", "prb_basic", "prb_projective", "prbvolpath", "volprim_rf_basic"),
    "medium": ("heterogeneous", "homogeneous"),
    "phase": ("blendphase", "hg", "isotropic", "rayleigh", "sggx", "tabphase"),
    "rfilter": ("box", "catmullrom", "gaussian", "lanczos", "mitchell", "tent"),
    "sampler": ("independent", "ldsampler", "multijitter", "orthogonal", "stratified"),
    "sensor": ("batch", "distant", "irradiancemeter", "orthographic", "perspective", "radiancemeter", "thinlens"),
    "shape": ("blender", "bsplinecurve", "cube", "cylinder", "disk", "ellipsoids", "ellipsoidsmesh", "instance",
              "linearcurve", "merge", "obj", "ply", "rectangle", "sdfgrid", "serialized", "shapegroup", "sphere"),
    "spectrum": ("blackbody", "d65", "irregular", "rawconstant", "regular", "srgb", "uniform"),
    "texture": ("bitmap", "checkerboard", "mesh_attribute", "volume"),
    "volume": ("const", "grid"),
}

ALL_PLUGINS = frozenset(n for names in MITSUBA_PLUGINS.values() for n in names)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidates, or nothing."""
    close = difflib.get_close_matches(str(name), sorted(set(candidates)), n=2, cutoff=0.7)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
