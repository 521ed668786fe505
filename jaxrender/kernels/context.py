"""What a rendering kernel is specialised on, and what it sees per work item.

:class:`Structure` is the trace-time description of a scene: which plugins
and features its kernels must contain. Everything else (geometry, parameter
values, the camera, seeds) is runtime data in the buffers of
``layout.scene_inputs``, so scenes of one structure share their kernels.
:class:`Context` is what plugin code receives while a kernel is traced:
the buffers, the scene geometry, the work item, its random numbers, the
colour type and whether the code is traced for derivatives.

Example::

    ctx = Context.create(buffers, Structure(bsdfs=("diffuse",)))
    x, y, a, b = ctx.rand(sample, group)         # a 2D and two 1D sampler dimensions
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import ir
from . import layout, media, samplers, textures
from .bsdfs import registry as bsdf_registry
from .bsdfs.base import MAX_NESTING
from .geometry import Instances, SceneGeometry
from .shapes import KIND as SHAPE_KIND, NAMES as SHAPE_NAMES
from .spectrum import RGB, SpectrumType


@dataclasses.dataclass(frozen=True)
class Structure:
    """Trace-time features of a scene, so that a scene without textures or
    an environment map gets the plain kernel (no texture code, no envmap
    dispatch branch): ``tex_slots`` is the most textured parameters any of
    its BSDFs has (0 to ``layout.MAX_TEX_SLOTS``), ``envmap`` whether it
    has an environment map (an envmap emitter, or the sampling map of a
    sunsky), ``sunsky`` whether that environment is a sunsky, ``analytic`` the analytic shapes it has
    (``shapes.NAMES``; True: all of them; empty: the BVH leaves hold only triangles and no shape code is
    traced; code for a kind it lacks is not traced either),
    ``shading_normals`` whether some mesh has vertex normals (else the
    shading frame is the geometric one), ``bsdfs`` the BSDF types its
    kernels dispatch over (registry names, in registry order; default: every
    built-in plain type), ``sensor`` the sensor type (``sensors.TYPES``),
    ``textures`` the texture plugins it uses (``textures.PLUGINS`` names),
    ``footprint`` the width in pixels of the square a sample is splatted
    into (odd: 1 for the box filter, 5 for Mitsuba's default Gaussian; see
    ``sensors/film.py``), ``sampler`` the sampler type (``samplers.TYPES``),
    ``bsdf_nesting`` how deep composite BSDFs nest (0: none; 1: e.g. a
    blend of plain BSDFs; at most ``bsdfs.base.MAX_NESTING``), ``media`` and
    ``phases`` the medium kinds and phase functions of its participating
    media (``media.KINDS``, ``media.phase.NAMES``; empty: no media, and only
    volumetric integrators read them), ``instanced`` whether meshes of
    shapegroups are shared by instances (then kernels also read
    ``layout.instance_inputs`` and walk the instances after the scene's own
    primitives)."""
    tex_slots: int = 0
    envmap: bool = False
    analytic: tuple = ()
    shading_normals: bool = False
    bsdfs: tuple = bsdf_registry.DEFAULT_NAMES
    sensor: str = "perspective"
    textures: tuple = ()
    footprint: int = 1
    sampler: str = "independent"
    bsdf_nesting: int = 0
    media: tuple = ()
    phases: tuple = ()
    sunsky: bool = False
    delta_lights: bool = False        # point, spot or directional lights (their shadows are hard)
    instanced: bool = False
    spectral_curves: bool = False     # (spectral) colours may be tabulated spectra
    dispersion: bool = False          # (spectral) a dielectric's IOR may be a tabulated spectrum

    def __post_init__(self):
        if not (isinstance(self.footprint, int) and self.footprint >= 1 and self.footprint % 2 == 1):
            raise ValueError(f"footprint must be a positive odd int, got {self.footprint!r}")
        if not 0 <= self.tex_slots <= layout.MAX_TEX_SLOTS:
            raise ValueError(f"tex_slots must be in 0..{layout.MAX_TEX_SLOTS}, got {self.tex_slots}")
        if not self.bsdfs:
            raise ValueError("a structure needs at least one BSDF type")
        object.__setattr__(self, "bsdfs", bsdf_registry.ordered(self.bsdfs))
        if not 0 <= self.bsdf_nesting <= MAX_NESTING:
            raise ValueError(f"bsdf_nesting must be in 0..{MAX_NESTING}, got {self.bsdf_nesting}")
        if any(t.composite for t in self.bsdf_types) != (self.bsdf_nesting > 0):
            raise ValueError("a structure with composite BSDF types needs bsdf_nesting >= 1, and only such a one")
        unknown = [t for t in self.textures if t not in textures.PLUGINS]
        if unknown:
            raise ValueError(f"unknown texture plugin(s) {unknown}")
        if bool(self.media) != bool(self.phases) or not set(self.media) <= set(media.KINDS):
            raise ValueError(f"media {self.media!r} need phase functions and kinds of {media.KINDS}")
        object.__setattr__(self, "media", tuple(k for k in media.KINDS if k in self.media))
        object.__setattr__(self, "phases", media.phase.ordered(self.phases))
        kinds = SHAPE_NAMES if self.analytic is True else () if self.analytic is False else tuple(self.analytic)
        if not set(kinds) <= set(SHAPE_NAMES):
            raise ValueError(f"unknown analytic shape(s) {sorted(set(kinds) - set(SHAPE_NAMES))} ({SHAPE_NAMES})")
        object.__setattr__(self, "analytic", tuple(n for n in SHAPE_NAMES if n in kinds))
        if self.sampler not in samplers.TYPES:
            raise ValueError(f"unknown sampler {self.sampler!r} ({', '.join(samplers.NAMES)})")

    @property
    def bsdf_types(self) -> list:
        """The BsdfType of each entry of ``bsdfs`` (a kernel's dispatch table)."""
        return [bsdf_registry.TYPES[n] for n in self.bsdfs]

    @property
    def tangents(self) -> bool:
        """Whether a BSDF type perturbs the shading frame (normalmap,
        bumpmap) or may be anisotropic: then hits carry Mitsuba's dp_du /
        dp_dv and UVs, and their shading frame is Mitsuba's (first axis
        along dp_du)."""
        return any(t.frame or t.anisotropic for t in self.bsdf_types)

    def suffix(self) -> str:
        """A short tag for kernel names."""
        return ((f"_tex{self.tex_slots}" if self.tex_slots else "") + ("_envmap" if self.envmap else "")
                + ("_sunsky" if self.sunsky else "") + ("_delta" if self.delta_lights else "")
                + ("_analytic" if self.analytic == SHAPE_NAMES else "".join(f"_{n}" for n in self.analytic))
                + ("_smooth" if self.shading_normals else "")
                + ("" if self.bsdfs == bsdf_registry.DEFAULT_NAMES else f"_{len(self.bsdfs)}bsdf")
                + (f"_nest{self.bsdf_nesting}" if self.bsdf_nesting else "")
                + ("" if self.sensor == "perspective" else f"_{self.sensor}")
                + "".join(f"_{t}" for t in self.textures)
                + ("" if self.footprint == 1 else f"_splat{self.footprint}")
                + ("" if self.sampler == "independent" else f"_{self.sampler}")
                + "".join(f"_{m}" for m in self.media + self.phases) + ("_instanced" if self.instanced else "")
                + ("_curves" if self.spectral_curves else "") + ("_dispersion" if self.dispersion else ""))


# The buffers whose derivatives move the scene's geometry (the triangles'
# vertices and vertex normals, the analytic shapes' transforms, shared
# instances' transforms: integrators/material.py) and, with the camera's,
# every buffer whose motion derivative kernels follow.
GEOMETRY = ("tris", "shape_data", "tri_normals", "instances")
MOVING = ("camera",) + GEOMETRY


def moving_buffers(active, structure: "Structure") -> tuple:
    """The buffers of ``active`` whose derivatives the kernels take in
    material form (``sensors/motion.py``, ``integrators/material.py``): the
    camera and the geometry, and, in scenes with tangent frames, the
    texture coordinates (``tri_uv``), which turn each triangle's dp_du /
    dp_dv as its moving vertices do."""
    return tuple(n for n in active if n in MOVING or (n == "tri_uv" and structure.tangents))


def moves_geometry(active, structure: "Structure") -> bool:
    """Whether derivatives along ``active`` (buffer names) move geometry,
    the surface frames included (:func:`moving`)."""
    return any(n != "camera" for n in moving_buffers(active, structure))


@dataclasses.dataclass
class Context:
    """The kernel's view of one work item (a pixel).

    ``pixel``: the item's place in the film's sample grid, what positions
    and random numbers depend on; ``item``: its row in the launch's own
    per-item buffers. A launch covers the grid items from ``item_offset``
    on (a tile or a device's shard of the image), so the two differ there,
    and an image rendered in pieces equals the whole one bit for bit.
    Items that pad a launch past the grid's last row trace rays just
    outside the film like any other; their outputs are dropped.
    ``diff``: traced for derivatives (forward mode, adjoint replay): then
    sampling is detached (:meth:`detach`) so that only BSDF values and
    emitted radiance carry derivatives (Zeltner et al. 2021).
    ``camera_motion``: the camera's buffer carries derivatives, so the
    primary vertex sees it move (``sensors/motion.py``);
    ``geometry_motion``: the triangles' and / or the analytic shapes'
    buffers do, and path points follow their surfaces
    (``integrators/material.py``); ``shared_traces``: a context without
    derivatives inside a derivative kernel (:meth:`primal`), whose paths
    the kernel traces from several places: an integrator runs them as one
    subroutine (``ReplayIntegrator.run``)."""
    b: dict                  # input name -> ir Buffer
    geo: SceneGeometry
    pixel: Any
    diff: bool
    structure: Structure
    spectrum: SpectrumType = RGB
    sampler: samplers.Sampler | None = None
    item: Any = None
    camera_motion: bool = False
    geometry_motion: bool = False
    shared_traces: bool = False

    @classmethod
    def create(cls, b: dict, structure: Structure = Structure(), diff: bool = False,
               spectrum: SpectrumType = RGB) -> "Context":
        instances = Instances(b) if structure.instanced else None
        analytic = structure.analytic
        geo = SceneGeometry(b["tris"], b["bvh_bounds"], b["bvh_links"], b["prim_shape"] if analytic else None,
                            b["shape_data"] if analytic else None, wide=(b["wide_nodes"], b["wide_leaves"]),
                            instances=instances, kinds=tuple(SHAPE_KIND[n] for n in analytic) if analytic else None)
        item = ir.item_index()
        pixel = item + b["item_offset"].value
        return cls(b, geo, pixel, diff, structure, spectrum,
                   samplers.create(structure.sampler, b, pixel), item)

    def primal(self) -> "Context":
        """This context traced without derivatives."""
        return dataclasses.replace(self, diff=False, camera_motion=False, geometry_motion=False,
                                   shared_traces=self.shared_traces or self.diff)

    def rand(self, s, group):
        """(x, y, a, b) of sample ``s``, dimension group ``group`` from the
        scene's sampler: (x, y) one 2D dimension, a and b two 1D ones (see
        ``samplers``). The same numbers whenever they are asked for again."""
        return self.sampler.rand(s, group)

    def detach(self, x):
        """``x`` without derivatives where derivatives are traced."""
        return ir.detach(x) if self.diff else x

    @property
    def n_emitters(self):
        return ir.cast(self.b["emitter_meta"].len, "i32")
