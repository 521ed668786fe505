"""The ``aov`` integrator (Mitsuba 3's arbitrary output variables): per pixel,
geometric quantities of the first surface the camera ray meets, averaged
over the pixel filter like any image (the film samples exactly as for the
path tracer, so the result equals Mitsuba's filtered film in expectation).

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
    k = AovIntegrator(tuple(t for _, t in spec)).primal_kernel()   # output "image" (C,)
"""
from __future__ import annotations

import dataclasses

from ... import ir
from ...ir import Vec
from .. import sensors, textures
from ..bsdfs.surface import SurfaceBsdf
from ..context import Structure
from ..interaction import intersect
from .base import Integrator

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


def _channels(kinds: tuple, ctx, si, t_min) -> list:
    z = ir.Float(0.0)
    vals = []
    for kind in kinds:
        if kind == "depth":
            vals.append(si.t - t_min)
        elif kind == "position":
            vals.extend(si.p)
        elif kind == "geo_normal":
            vals.extend(si.ng)
        elif kind == "sh_normal":
            vals.extend(si.frame.n)
        elif kind == "uv":
            if ctx.structure.tex_slots:
                uv = textures.hit_uv(ctx.b, si.prim, si.b1, si.b2)
                vals.extend((uv.x, uv.y))
            else:
                vals.extend((z, z))  # texture coordinates reach the kernel only for textured scenes
        elif kind == "albedo":
            vals.extend(_as_rgb(ctx.spectrum, SurfaceBsdf(ctx, si).albedo()))
    return [ir.select(si.hit, v, 0.0) for v in vals]


def _as_rgb(spectrum, value: Vec) -> Vec:
    """A colour AOV's three channels, as Mitsuba's aov integrator writes
    them: a mono value repeated, a spectrum through the film's conversion."""
    if spectrum.name == "mono":
        return Vec(value[0], value[0], value[0])
    return spectrum.to_film(value)


@dataclasses.dataclass(frozen=True)
class AovIntegrator(Integrator):
    """The AOVs ``kinds`` (AOV types in channel order) of the first surface
    each camera ray meets. Not differentiable."""
    name = "aov"
    kinds: tuple = ("depth",)

    def __post_init__(self):
        bad = [k for k in self.kinds if k not in AOV_TYPES]
        if bad or not self.kinds:
            raise ValueError(f"AOV types must be a non-empty tuple of {tuple(AOV_TYPES)}, got {self.kinds}")

    @property
    def channels(self) -> int:
        return sum(len(AOV_TYPES[k]) for k in self.kinds)

    def kernel_name(self, structure: Structure) -> str:
        return "aov_" + "_".join(self.kinds) + self._spectrum_suffix() + structure.suffix()

    def _value(self, ctx, s) -> Vec:
        # (the channels are geometry and RGB already: no film conversion of the whole)
        return self.sample(ctx.spectrum.bind(ctx, s), s)

    def sample(self, ctx, s) -> Vec:
        o, d, t_min, t_max = sensors.sample_ray(ctx, s)
        si = intersect(ctx, o, d, t_min, t_max)
        return Vec(*_channels(self.kinds, ctx, si, t_min))
