"""Mitsuba's ``stokes`` integrator: the polarization state at the sensor.

It runs its nested ``path`` (or ``direct``, ``volpath``, ``prbvolpath``)
integrator, whose estimate in a
polarized variant is a Stokes vector per colour channel (unpolarized
emission through the path's Mueller matrices), in the implicit Stokes
basis of the camera ray (``mueller.stokes_basis(-d)``);
as Mitsuba's, it is turned into the sensor's frame, whose x axis is
``cross(d, up)`` with ``up`` the sensor's y axis in the world. A pixel's
channels are Mitsuba's: the nested image (intensity), then S0, S1, S2 and
S3, three channels each (RGB; a mono value thrice): 3 + 12 channels (1 + 12
in ``mono_polarized``). Its images are differentiable as the nested
integrator's (forward mode and the rb adjoint).

Example::

    scene = jaxrender.load_dict({..., "integrator": {"type": "stokes", "nested": {"type": "path"}}},
                                variant="spectral_polarized")
    image = jaxrender.render(scene)            # (h, w, 15): R G B, S0.R ... S3.B
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ... import ir
from ...ir import Vec
from .. import layout, mueller, sensors
from ..sensors import film, motion
from ..context import Structure
from .path import PathIntegrator
from .volpath import VolpathIntegrator

STOKES_NAMES = tuple(f"S{i}.{c}" for i in range(4) for c in "RGB")


class StokesFilm:
    """What makes an integrator Mitsuba's ``stokes`` around it: the film's
    channels, their values from a sample's radiance and back (mixed into
    the nested integrator's class, ahead of it)."""

    film_moves = True     # (the sensor's frame: _seen_along)

    def settings(self, props: Mapping[str, Any]) -> dict:
        return super().settings(props["nested"])

    @property
    def channels(self) -> int:
        return self.film_width

    @property
    def film_width(self) -> int:
        return self.spectrum.film_channels + len(STOKES_NAMES)

    def kernel_name(self, structure: Structure) -> str:
        return self.name + self._variant(structure)

    def film_values(self, ctx, s, radiance: Vec, first=None) -> Vec:
        """The intensity's colour, then S0..S3 turned into the sensor's
        frame, each as the film's colour (a mono value thrice)."""
        return self.film_values_along(ctx, _seen_along(ctx, s, first), radiance)

    def film_values_along(self, ctx, d: Vec, radiance: Vec) -> Vec:
        if not self.spectrum.polarized:
            raise ValueError("the stokes integrator needs a polarized variant")
        S = ctx.spectrum
        cam = ctx.b["camera"]
        up = Vec(*(cam.read(0, layout.CAMERA_TO_WORLD + k) for k in (1, 5, 9)))  # the sensor's y axis in the world
        towards = -d
        r = mueller.rotate_stokes_basis(towards, mueller.stokes_basis(towards), ir.cross(d, up))
        n = S.channels
        per_channel = [mueller.apply(r, Vec(*radiance[c::n])) for c in range(n)]   # each channel's Stokes vector
        out = list(S.to_film(radiance))
        for i in range(4):
            rgb = S.to_film(S.radiance(Vec(*(per_channel[c][i] for c in range(n)))))
            out.extend(rgb if len(rgb) == 3 else (rgb[0],) * 3)
        return Vec(*out)

    def film_transpose(self, ctx, s, d_values: Vec) -> Vec:
        # film_values is linear in the radiance: its pullback at zero is its transpose
        zero = Vec(*(ir.Float(0.0) for _ in range(self.spectrum.radiance_width)))
        _, pullback = ir.vjp(lambda radiance: self.film_values(ctx, s, radiance), zero)
        return pullback(d_values)[0]


def _seen_along(ctx, s, first) -> Vec:
    """The direction of sample ``s``'s camera ray; in kernels of a moving
    camera or geometry (``first``: that ray's first hit) the direction
    from the camera to the point it sees, following both: the path's
    Stokes vector arrives in that direction's basis (its first vertex's
    incident direction follows the camera, ``motion.attach_primary_wi``),
    and the sensor's frame turns with the camera."""
    if first is None:
        return sensors.sample_ray(ctx, s)[1]
    hit, x, _, _ = motion.primary_point(ctx, s, first)
    cam = motion.CameraRow(ctx.b["camera"])
    eye = motion.eye_of_sample(ctx, cam, ctx.rand(s, film.POSITION_DIM)[2:])
    seen = -ir.normalize(motion.to_camera(ctx, x, cam, eye))
    # (a miss: a perspective camera's direction stays, an orthographic one's is its axis)
    missed = ir.normalize(motion.axis(cam)) if motion.orthographic(ctx) else ir.detach(x)
    return Vec(*(ir.select(hit, a, b) for a, b in zip(seen, missed)))


@dataclasses.dataclass(frozen=True)
class StokesIntegrator(StokesFilm, PathIntegrator):
    """The Stokes vector images of a nested path (or direct) tracer
    (polarized variants only), differentiable as its image is (the adjoint
    pulls each channel's cotangent back through the film's linear map)."""
    name = "stokes"


@dataclasses.dataclass(frozen=True)
class StokesVolpathIntegrator(StokesFilm, VolpathIntegrator):
    """The Stokes vector images of a nested volpath (or prbvolpath)."""
    name = "stokes_volpath"
