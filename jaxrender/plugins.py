"""BSDFs and textures written in the kernel language, from your own script.

A registered plugin is used by its type name in Mitsuba XML files and
``load_dict`` dictionaries like a built-in one; its parameters appear in
``scene.params`` under Mitsuba-style keys (``<id>.<name>.value`` for colours
and floats, ``<id>.<name>`` for arrays) and ``jax.grad`` of a render works
with respect to them. Its code is traced into the scene's megakernels (the
primal, forward-mode and adjoint ones), so it runs at the speed of the
built-in plugins and its derivatives come from the kernel IR's autodiff.

A BSDF is three functions of a parameter view ``p`` (``p.<name>``: a
``Vec`` for COLOR, a ``Float`` for FLOAT / SCALAR, an array reader for
ARRAY) and local directions (z = the shading normal), as in Mitsuba:

* ``eval(p, wi, wo) -> Vec``: the BSDF times ``|cos theta_o|``;
* ``pdf(p, wi, wo) -> Float``: the density ``sample`` draws ``wo`` with;
* ``sample(p, wi, u1, u2) -> (wo, pdf, weight, is_delta)``: ``weight`` is
  eval / pdf (0 where sampling fails).

Colours (``p.<colour>``, what ``eval`` returns) are the colour type of the
scene's variant: three channels in rgb, one in mono, four wavelengths in
spectral. Write colour constants with :func:`black` / :func:`uniform` (not
``Vec(0.0, 0.0, 0.0)``) and the plugin works in every variant.

Example (a Lambertian BSDF under a new name)::

    import math
    import jaxrender
    from jaxrender import ir, plugins
    from jaxrender.kernels import sampling

    def eval(p, wi, wo):
        ok = (wi.z > 0.0) & (wo.z > 0.0)
        return ir.select(ok, p.albedo * (wo.z / math.pi), plugins.black())

    def pdf(p, wi, wo):
        return ir.select((wi.z > 0.0) & (wo.z > 0.0), sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)

    def sample(p, wi, u1, u2):
        wo = sampling.square_to_cosine_hemisphere(u2)
        ok = wi.z > 0.0
        return wo, sampling.square_to_cosine_hemisphere_pdf(wo), ir.select(ok, p.albedo, plugins.black()), ir.Bool(False)

    plugins.register_bsdf("matte", [plugins.Param("albedo", plugins.COLOR, 0.5)], eval, pdf, sample)
    d = jaxrender.cornell_box()
    d["white"] = {"type": "matte", "albedo": {"type": "rgb", "value": [0.8, 0.8, 0.8]}}
    scene = jaxrender.load_dict(d)                 # scene.params["white.albedo.value"]
"""
from __future__ import annotations

from typing import Callable, Sequence

from .kernels.bsdfs import registry as _bsdf_registry
from .kernels.bsdfs.base import BsdfType
from .kernels.params import ARRAY, COLOR, FLAG, FLOAT, OPTION, SCALAR, Param
from .kernels.spectrum import black, uniform
from .kernels.textures import TextureType
from .kernels.textures import register as _register_texture

__all__ = ["ARRAY", "COLOR", "FLAG", "FLOAT", "OPTION", "SCALAR", "Param", "black", "register_bsdf",
           "register_texture", "uniform"]


def register_bsdf(name: str, params: Sequence[Param], eval: Callable, pdf: Callable, sample: Callable, *,
                  make: Callable | None = None, albedo: str | None = None, transmissive: bool = False,
                  replace: bool = False) -> BsdfType:
    """Register a BSDF plugin under the Mitsuba type name ``name``.

    ``params``: its parameters (:class:`Param` with kinds COLOR, FLOAT,
    SCALAR, FLAG or ARRAY), in the order they fill a row of the scene's
    BSDF buffer (at most ``layout.TWOSIDED_SLOT`` = 17 floats; larger
    parameters are ARRAYs).
    ``make(view)``: builds the object ``eval`` / ``pdf`` / ``sample`` receive
    (default: the view itself). ``albedo``: the colour parameter the albedo
    AOV reports (default: pi times eval towards the normal).
    ``transmissive``: it transmits light (``wo`` below the surface), which
    Mitsuba's ``twosided`` refuses unless ``allow_transmission`` is set.
    Registering a name again needs ``replace=True``. Returns the
    registered type."""
    for p in params:
        if p.kind == OPTION:
            raise ValueError(f"{name}: OPTION parameters select built-in variants; register one BSDF per choice")
    t = BsdfType(name, name, tuple(params), make or (lambda view: view), eval, pdf, sample, albedo=albedo,
                 transmissive=transmissive)
    return _bsdf_registry.register(t, replace=replace)


def register_texture(name: str, params: Sequence[Param], eval: Callable, *, channels: int = 3,
                     replace: bool = False) -> TextureType:
    """Register a texture plugin under the Mitsuba type name ``name``.

    ``params``: COLOR, FLOAT or ARRAY parameters, stored in the scene's
    texel buffer; ``eval(view, uv) -> Vec`` its value (``channels``: 1 or
    3) at texture coordinates ``uv`` (after the texture's ``to_uv``). A BSDF
    parameter given such a texture reads it at every hit, as a bitmap."""
    return _register_texture(TextureType(name, tuple(params), eval, channels), replace=replace)
