"""The ``aov`` integrator (Mitsuba 3's arbitrary output variables): per pixel,
geometric quantities of the first surface the camera ray meets, averaged
over the pixel filter like any image (the filter offsets are importance
sampled exactly as in the path kernel, so the result equals Mitsuba's
filtered film in expectation).

Channel order is the order of the ``aovs`` string, as ``mi.render`` returns
it for an aov integrator without nested integrators. Supported types and
their channels (Mitsuba's names):

* ``depth`` (T): distance from the near-clip plane along the ray (Mitsuba
  starts camera rays there), 0 where nothing is hit;
* ``position`` (X, Y, Z): the hit point;
* ``geo_normal`` (X, Y, Z): the geometric normal (a triangle's face normal,
  a sphere's or disk's analytic one; not flipped towards the viewer);
* ``sh_normal`` (X, Y, Z): the shading normal: interpolated vertex normals
  on meshes that have them (Mitsuba computes them for obj / ply files
  without normals unless ``face_normals`` is set), else the geometric one;
* ``uv`` (U, V): Mitsuba's surface UVs (meshes' texture coordinates or
  barycentrics, the sphere's and disk's parameterisations) in textured
  scenes; 0 in scenes without textures (UVs reach the kernel only there);
* ``albedo`` (R, G, B): Mitsuba's ``BSDF::eval_diffuse_reflectance``: the
  diffuse reflectance of diffuse / plastic / roughplastic, else
  ``pi * eval(wi, normal)`` (0 for smooth conductors and dielectrics); a
  twosided BSDF answers as seen from its front.

Misses give 0 in every channel.

Example::

    spec = parse_aovs("dd:depth,nn:sh_normal")   # (("dd", "depth"), ("nn", "sh_normal"))
    names = channel_names(spec)                  # ["dd.T", "nn.X", "nn.Y", "nn.Z"]
    k = trace_aov(tuple(t for _, t in spec))     # inputs: path.INPUTS; output "image" (C,)
"""
from __future__ import annotations

import functools
import math

from .. import ir
from ..ir import Vec
from . import path, textures
from . import layout

# type -> channel suffixes (Mitsuba's)
AOV_TYPES = {
    "depth": ("T",),
    "position": ("X", "Y", "Z"),
    "uv": ("U", "V"),
    "geo_normal": ("X", "Y", "Z"),
    "sh_normal": ("X", "Y", "Z"),
    "albedo": ("R", "G", "B"),
}


class AovSpecError(ValueError):
    """A malformed ``aovs`` string (the scene loader reports it as SceneError)."""


def parse_aovs(spec: str) -> tuple:
    """``"name:type,name:type"`` -> ((name, type), ...), checked."""
    if not isinstance(spec, str) or not spec.strip():
        raise AovSpecError(f"expected a non-empty string 'name:type,...', got {spec!r}")
    out = []
    for token in spec.split(","):
        parts = token.strip().split(":")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise AovSpecError(f"{token.strip()!r} is not a 'name:type' pair")
        name, kind = parts[0].strip(), parts[1].strip()
        if kind not in AOV_TYPES:
            raise AovSpecError(f"unknown AOV type {kind!r} in {token.strip()!r} "
                               f"(supported: {', '.join(AOV_TYPES)})")
        out.append((name, kind))
    return tuple(out)


def channel_names(spec: tuple) -> list[str]:
    return [f"{name}.{c}" for name, kind in spec for c in AOV_TYPES[kind]]


def _albedo(c, h: path._Hit) -> Vec:
    b = c.b
    row = [b["bsdf_data"].read(h.attr_bsdf, k) for k in range(layout.BSDF_ROW)]
    if c.structure.tex_slots:
        row = textures.apply_textures(b, h.attr_bsdf, row, h.tri, h.b1, h.b2, h.hit, c.structure.tex_slots)
    table = path._TableRow(b["bsdf_table"], h.attr_bsdf)
    flip = (row[layout.TWOSIDED_SLOT] > 0.5) & (h.wi.z < 0.0)
    wi = Vec(h.wi.x, h.wi.y, ir.select(flip, -h.wi.z, h.wi.z))

    def branch(t):
        def run():
            if t.albedo is not None:
                k = t.slot(t.albedo)
                return Vec(row[k], row[k + 1], row[k + 2])
            params = path.make_params(t, row, table, b)
            return t.call("eval", params, wi, Vec(0.0, 0.0, 1.0)) * math.pi
        return run

    return ir.dispatch(b["bsdf_type"][h.attr_bsdf], [branch(t) for t in c.structure.bsdf_types])


def _channels(kinds: tuple, c, h: path._Hit, t_min) -> list:
    z = ir.Float(0.0)
    vals = []
    for kind in kinds:
        if kind == "depth":
            vals.append(h.t - t_min)
        elif kind == "position":
            vals.extend(h.p)
        elif kind == "geo_normal":
            vals.extend(h.ng)
        elif kind == "sh_normal":
            vals.extend(h.frame.n)
        elif kind == "uv":
            if c.structure.tex_slots:
                uv = textures.hit_uv(c.b, h.tri, h.b1, h.b2)
                vals.extend((uv.x, uv.y))
            else:
                vals.extend((z, z))  # texture coordinates reach the kernel only for textured scenes
        elif kind == "albedo":
            vals.extend(_albedo(c, h))
    return [ir.select(h.hit, v, 0.0) for v in vals]


def aov_kernel(kinds: tuple, structure: path.Structure, **b):
    c = path._context(b, b["seed"].value, False, structure)
    n = sum(len(AOV_TYPES[k]) for k in kinds)

    def one_sample(s, acc):
        o, d, t_min = path._camera_ray(c, s)
        h = path._intersect(c, o, d, t_min)
        return tuple(a + v for a, v in zip(acc, _channels(kinds, c, h, t_min)))

    spp = b["spp"].value
    total = ir.fori_loop(ir.UInt(0), spp, one_sample, tuple(ir.Float(0.0) for _ in range(n)))
    inv = 1.0 / ir.cast(spp, "f32")
    return {"image": tuple(v * inv for v in total)}


@functools.lru_cache(maxsize=None)
def trace_aov(kinds: tuple, structure: path.Structure = path.Structure()) -> ir.Kernel:
    """The AOV kernel for AOV types ``kinds`` (in channel order); inputs
    are the path kernel's, output ``image`` has one float per channel."""
    bad = [k for k in kinds if k not in AOV_TYPES]
    if bad or not kinds:
        raise ValueError(f"AOV types must be a non-empty tuple of {tuple(AOV_TYPES)}, got {kinds}")
    n = sum(len(AOV_TYPES[k]) for k in kinds)
    return ir.trace(functools.partial(aov_kernel, tuple(kinds), structure), path.INPUTS, {"image": ir.Out("f32", (n,))},
                    name="aov_" + "_".join(kinds) + path._suffix(structure))
