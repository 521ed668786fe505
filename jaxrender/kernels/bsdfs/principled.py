"""Disney's principled BSDF as Mitsuba 3's ``principled`` plugin implements it.

Four lobes share one GGX microfacet distribution (roughness ``r``,
``alpha = max(0.001, r^2)`` stretched by ``anisotropic``):

* a specular reflection whose Fresnel term blends the dielectric one with
  Schlick terms for ``metallic`` (tinted by ``base_color``) and
  ``spec_tint``; seen from inside, only the dielectric part weighted by the
  transmission weight remains;
* a specular transmission of weight ``(1 - metallic) spec_trans``, tinted by
  ``sqrt(base_color)`` (only in the ``transmission`` variant);
* a clearcoat (GTR1 distribution, gloss mapped to alpha in [0.001, 0.1],
  Schlick Fresnel with R0 = 0.04, separable GGX masking with alpha 0.25);
* Burley's diffuse with retro-reflection, blended with the Hanrahan-Krueger
  "fake subsurface" term by ``flatness``, plus a ``sheen`` lobe, all of
  weight ``(1 - metallic)(1 - spec_trans)`` and front side only.

Sampling picks a lobe with probabilities proportional to the lobe weights
times the ``*_sampling_rate`` properties; ``pdf`` is Mitsuba's, which uses
the Fresnel term of the evaluated direction's half vector in those
probabilities (so it is the exact density of ``sample`` only where that term
does not enter them: no transmission, or no diffuse and clearcoat lobes).

The relative IOR comes from ``eta`` or from ``specular`` (Mitsuba accepts
one of them): ``eta = 2 / (1 - sqrt(0.08 specular)) - 1``. With transmission,
Mitsuba moves the degenerate values ``eta = 1`` and ``specular = 0`` away
from 1 (to 1.001 and 1e-3); :func:`relative_eta` does the same.

Trace-time keyword argument: ``transmission`` (Mitsuba's "has spec_trans":
``spec_trans`` given and not the float 0). Without it the transmission lobe
is absent and, seen from inside, all sampling goes to the reflection lobe;
its ``spec_trans`` parameter is then frozen at its loaded value (Mitsuba
would add the lobe on an update: a render refuses a new value).

Example::

    p = PrincipledParams(Vec(.8, .2, .1), roughness=0.3, anisotropic=0.0, metallic=0.0, spec_trans=0.0,
                         spec_tint=0.0, sheen=0.0, sheen_tint=0.0, flatness=0.0, clearcoat=0.5,
                         clearcoat_gloss=0.9, eta=1.5, diffuse_rate=1.0, specular_rate=1.0, clearcoat_rate=1.0)
    f = eval(p, wi, wo)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from .. import spectrum
from ..spectrum import uniform
from .. import sampling
from .base import COLOR, FLOAT, OPTION, SCALAR, BsdfType, Param, black
from .fresnel import fresnel, reflect_about, refract_about
from .microfacet import Microfacet

INV_PI = 1.0 / math.pi
CLEARCOAT_MASKING_ALPHA = 0.25


@dataclasses.dataclass
class PrincipledParams:
    base_color: Vec
    roughness: Any
    anisotropic: Any
    metallic: Any
    spec_trans: Any
    spec_tint: Any
    sheen: Any
    sheen_tint: Any
    flatness: Any
    clearcoat: Any
    clearcoat_gloss: Any
    eta: Any
    diffuse_rate: Any
    specular_rate: Any
    clearcoat_rate: Any


# ------------------------------------------------------------ pieces ----
def schlick_weight(c):
    m = ir.clamp(1.0 - c, 0.0, 1.0)
    m2 = m * m
    return m2 * m2 * m


def schlick(r0, cos_i, eta):
    """Schlick's Fresnel approximation with normal reflectance ``r0`` (a
    float or a Vec) at a microfacet seen under ``cos_i``; when the ray goes
    into the optically thinner side the transmitted angle is used."""
    outside = cos_i >= 0.0
    eta_it = ir.select(outside, eta, 1.0 / eta)
    eta_ti = ir.select(outside, 1.0 / eta, eta)
    cos_t = ir.safe_sqrt(1.0 - (1.0 - cos_i * cos_i) * (eta_ti * eta_ti))
    w = ir.select(eta_it > 1.0, schlick_weight(ir.abs(cos_i)), schlick_weight(cos_t))
    return r0 * (1.0 - w) + w


def lerp(a, b, t):
    """a + (b - a) t, rounded as Mitsuba's lerp: b t + (a - a t)."""
    return ir.fma(b, t, ir.fma(-a, t, a))


def tint(color: Vec) -> Vec:
    """``color`` over its luminance (white for a black colour)."""
    lum = spectrum.luminance(color)
    ok = lum > 0.0
    inv = 1.0 / ir.select(ok, lum, 1.0)
    one = ir.Float(1.0)
    return ir.select(ok, color * inv, uniform(one))


def _fresnel_reflect(p, F, cos_i, front, bsdf) -> Vec:
    """The specular reflection's Fresnel term (Mitsuba's principled_fresnel)."""
    eta_it = ir.select(cos_i >= 0.0, p.eta, 1.0 / p.eta)
    metal = schlick(p.base_color, cos_i, p.eta) * p.metallic
    tinted = tinted_schlick(p.base_color, eta_it, cos_i, p.eta) * ((1.0 - p.metallic) * p.spec_tint)
    front_f = metal + tinted + (1.0 - p.metallic) * (1.0 - p.spec_tint) * F
    inside = bsdf * F
    return ir.select(front, front_f, uniform(inside))


def tinted_schlick(color: Vec, eta_r0, cos_i, eta) -> Vec:
    """Schlick's Fresnel with normal reflectance ``tint(color)`` times that
    of a dielectric of IOR ``eta_r0``."""
    r0 = (eta_r0 - 1.0) / (eta_r0 + 1.0)
    return schlick(tint(color) * (r0 * r0), cos_i, eta)


def ggx(roughness, anisotropic) -> Microfacet:
    """The GGX distribution (visible normals sampled) of a principled
    ``roughness``: alpha = roughness^2 stretched by ``anisotropic``, at least 0.001."""
    r2 = roughness * roughness
    aspect = ir.sqrt(1.0 - 0.9 * anisotropic)
    return Microfacet("ggx", ir.maximum(0.001, r2 / aspect), ir.maximum(0.001, r2 * aspect), True)


def _ggx(p) -> Microfacet:
    return ggx(p.roughness, p.anisotropic)


class GTR1:
    """Burley's GTR1 distribution of the clearcoat (isotropic)."""

    def __init__(self, gloss):
        a = lerp(ir.Float(0.1), ir.Float(0.001), gloss)
        self.a2 = a * a

    def D(self, m: Vec):
        c2 = m.z * m.z
        d = (self.a2 - 1.0) / (math.pi * ir.log(self.a2) * (1.0 + (self.a2 - 1.0) * c2))
        return ir.select(d * m.z > 1e-20, d, 0.0)

    def pdf(self, m: Vec):
        return ir.select(m.z < 0.0, 0.0, m.z * self.D(m))

    def sample(self, u: Vec) -> Vec:
        phi = (2.0 * math.pi) * u.x
        c2 = (1.0 - ir.pow(self.a2, 1.0 - u.y)) / (1.0 - self.a2)
        s = ir.sqrt(ir.maximum(0.0, 1.0 - c2))
        return Vec(ir.cos(phi) * s, ir.sin(phi) * s, ir.sqrt(ir.maximum(0.0, c2)))


def _smith_ggx1(v: Vec, m: Vec, alpha: float):
    c2 = v.z * v.z
    tan2 = (1.0 - c2) / c2
    g = 2.0 / (1.0 + ir.sqrt(1.0 + (alpha * alpha) * tan2))
    g = ir.select(v.z == 1.0, 1.0, g)
    return ir.select(ir.dot(v, m) * v.z <= 0.0, 0.0, g)


def burley(roughness, flatness, aci, aco, cos_d):
    """Burley's diffuse shape with retro-reflection (``cos_d``: cosine
    between the half vector and wo), blended by ``flatness`` with the
    Hanrahan-Krueger fake subsurface term; times albedo / pi it is the BRDF."""
    Fo, Fi = schlick_weight(aco), schlick_weight(aci)
    f_diff = (1.0 - 0.5 * Fi) * (1.0 - 0.5 * Fo)
    Rr = 2.0 * roughness * cos_d * cos_d
    f_retro = Rr * (Fo + Fi + Fo * Fi * (Rr - 1.0))
    Fss90 = 0.5 * Rr
    Fss = lerp(ir.Float(1.0), Fss90, Fo) * lerp(ir.Float(1.0), Fss90, Fi)
    f_ss = 1.25 * (Fss * (1.0 / (aco + aci) - 0.5) + 0.5)
    return lerp(f_diff + f_retro, f_ss, flatness)


def sheen_color(base_color: Vec, sheen_tint) -> Vec:
    """White blended towards ``tint(base_color)`` by ``sheen_tint``."""
    one = ir.Float(1.0)
    return uniform(one) * (1.0 - sheen_tint) + tint(base_color) * sheen_tint


def compatible(m: Vec, wi: Vec, wo: Vec, cos_i, reflection: bool):
    """Both directions on the microfacet's side a reflection (or a
    refraction) needs, with m oriented towards wi's side of the surface."""
    ms = m * ir.copysign(1.0, cos_i)
    side = ir.dot(wo, ms) if reflection else -ir.dot(wo, ms)
    return (ir.dot(wi, ms) > 0.0) & (side > 0.0)


def _weights(p, transmission: bool):
    """(diffuse weight, transmission weight)."""
    brdf = (1.0 - p.metallic) * (1.0 - p.spec_trans)
    bsdf = (1.0 - p.metallic) * p.spec_trans if transmission else ir.Float(0.0)
    return brdf, bsdf


def _lobe_probs(p, F, front, brdf, bsdf, transmission: bool):
    """Unnormalised selection probabilities (reflection, transmission,
    clearcoat, diffuse) and the inverse of their sum."""
    refl = ir.select(front, p.specular_rate * (1.0 - bsdf * (1.0 - F)), F)
    trans = (ir.select(front, p.specular_rate * bsdf * (1.0 - F), 1.0 - F) if transmission
             else ir.Float(0.0))
    coat = ir.select(front, 0.25 * p.clearcoat * p.clearcoat_rate, 0.0)
    diff = ir.select(front, brdf * p.diffuse_rate, 0.0)
    return refl, trans, coat, diff, 1.0 / (refl + trans + coat + diff)


def _half_vector(p, wi: Vec, wo: Vec):
    """(reflect, refract, front side, eta seen from wi's side, half vector in the upper hemisphere)."""
    ci, co = wi.z, wo.z
    front = ci > 0.0
    eta_path = ir.select(front, p.eta, 1.0 / p.eta)
    reflect = ci * co > 0.0
    h = wi + wo * ir.select(reflect, 1.0, eta_path)
    h = h * ir.rsqrt(ir.dot(h, h))
    return reflect, ci * co < 0.0, front, eta_path, h * ir.copysign(1.0, h.z)


# ------------------------------------------------------ eval / pdf ----
def eval(params: PrincipledParams, wi: Vec, wo: Vec, transmission: bool = False) -> Vec:  # noqa: A001
    p = params
    ci, co = wi.z, wo.z
    aco = ir.abs(co)
    active = ci != 0.0
    brdf, bsdf = _weights(p, transmission)
    reflect, refract, front, eta_path, h = _half_vector(p, wi, wo)
    wi_h, wo_h = ir.dot(wi, h), ir.dot(wo, h)
    F = fresnel(wi_h, p.eta)[0]
    d = _ggx(p)
    DG = d.eval(h) * d.G(wi, wo, h)
    compat_r = compatible(h, wi, wo, ci, True)
    zero = black()

    spec_on = active & reflect & compat_r & (F > 0.0)
    spec = _fresnel_reflect(p, F, wi_h, front, bsdf) * (DG / (4.0 * ir.abs(ci)))
    value = ir.select(spec_on, spec, zero)

    if transmission:
        trans_on = active & (bsdf > 0.0) & refract & compatible(h, wi, wo, ci, False) & (F < 1.0)
        denom = wi_h + eta_path * wo_h
        # (Mitsuba's order of operations: the radiance scale 1 / eta_path^2 times eta_path^2)
        inv_eta_path = ir.select(front, 1.0 / p.eta, p.eta)
        t = ir.abs(inv_eta_path * inv_eta_path * (1.0 - F) * DG * eta_path * eta_path * wi_h * wo_h
                   / (ci * (denom * denom)))
        sqrt_color = Vec(*(ir.sqrt(c) for c in p.base_color))
        value = value + ir.select(trans_on, sqrt_color * (bsdf * t), zero)

    coat_on = active & (p.clearcoat > 0.0) & reflect & compat_r & front
    Fcc = schlick(0.04, wi_h, p.eta)
    coat = (p.clearcoat * 0.25) * Fcc * GTR1(p.clearcoat_gloss).D(h) * (
        _smith_ggx1(wi, h, CLEARCOAT_MASKING_ALPHA) * _smith_ggx1(wo, h, CLEARCOAT_MASKING_ALPHA)) * aco
    value = value + ir.select(coat_on, uniform(coat), zero)

    diff_on = active & (brdf > 0.0) & reflect & front
    diffuse = p.base_color * (brdf * aco * INV_PI * burley(p.roughness, p.flatness, ir.abs(ci), aco, wo_h))
    sheen = sheen_color(p.base_color, p.sheen_tint) * (p.sheen * (1.0 - p.metallic)
                                                       * schlick_weight(ir.abs(wo_h)) * aco)
    sheen_on = (p.sheen > 0.0) & (1.0 - p.metallic > 0.0)
    diffuse = diffuse + ir.select(sheen_on, sheen, zero)
    return value + ir.select(diff_on, diffuse, zero)


def pdf(params: PrincipledParams, wi: Vec, wo: Vec, transmission: bool = False):
    p = params
    ci = wi.z
    brdf, bsdf = _weights(p, transmission)
    reflect, refract, front, eta_path, h = _half_vector(p, wi, wo)
    wi_h, wo_h = ir.dot(wi, h), ir.dot(wo, h)
    F = fresnel(wi_h, p.eta)[0]
    refl, trans, coat, diff, inv_total = _lobe_probs(p, F, front, brdf, bsdf, transmission)
    refl, trans, coat, diff = refl * inv_total, trans * inv_total, coat * inv_total, diff * inv_total
    if transmission:
        denom = wi_h + eta_path * wo_h
        dwh_dwo = ir.abs(ir.select(reflect, 1.0 / (4.0 * wo_h), eta_path * eta_path * wo_h / (denom * denom)))
    else:
        dwh_dwo = ir.abs(1.0 / (4.0 * wo_h))
    d_pdf = _ggx(p).pdf(wi * ir.copysign(1.0, ci), h) * dwh_dwo
    compat_r = compatible(h, wi, wo, ci, True) & reflect
    result = ir.select(compat_r, refl * d_pdf + coat * (GTR1(p.clearcoat_gloss).pdf(h) * dwh_dwo), 0.0)
    result = result + ir.select(reflect, diff * sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)
    if transmission:
        compat_t = compatible(h, wi, wo, ci, False) & refract
        result = result + ir.select(compat_t, trans * d_pdf, 0.0)
    return ir.select(ci != 0.0, result, 0.0)


def sample(params: PrincipledParams, wi: Vec, u1, u2: Vec, transmission: bool = False):
    p = params
    ci = wi.z
    front = ci > 0.0
    brdf, bsdf = _weights(p, transmission)
    m, _ = _ggx(p).sample(wi * ir.copysign(1.0, ci), u2)
    F, cos_t, _, eta_ti = fresnel(ir.dot(wi, m), p.eta)
    active = (ci != 0.0) & (front | (bsdf > 0.0))
    _, trans, coat, diff, inv_total = _lobe_probs(p, F, front, brdf, bsdf, transmission)
    edge_d = diff * inv_total
    edge_c = edge_d + coat * inv_total
    edge_t = edge_c + trans * inv_total
    pick_d, pick_c, pick_t = u1 < edge_d, u1 < edge_c, u1 < edge_t

    m_cc = GTR1(p.clearcoat_gloss).sample(u2)
    wo_r = reflect_about(wi, m)
    wo_c = reflect_about(wi, m_cc)
    wo_d = sampling.square_to_cosine_hemisphere(u2)
    wo = ir.select(pick_c, wo_c, wo_r)
    ok = compatible(ir.select(pick_c, m_cc, m), wi, wo, ci, True) & (ci * wo.z > 0.0)
    if transmission:
        wo_t = refract_about(wi, m, cos_t, eta_ti)
        is_t = pick_t & ~pick_c
        ok = ir.select(is_t, compatible(m, wi, wo_t, ci, False) & (ci * wo_t.z < 0.0), ok)
        wo = ir.select(is_t, wo_t, wo)
    wo = ir.select(pick_d, wo_d, wo)
    ok = ir.select(pick_d, ci * wo_d.z > 0.0, ok)
    zero = black()
    wo = ir.select(active, wo, Vec(0.0, 0.0, 0.0))   # (a direction: three floats in every variant)
    active = active & ok
    pd = ir.select(active, pdf(p, wi, wo, transmission), 0.0)
    active = active & (pd > 0.0)
    f = eval(p, wi, wo, transmission)
    weight = ir.select(active, f / ir.select(active, pd, 1.0), zero)
    return wo, pd, weight, ir.Bool(False)


# ----------------------------------------------------------- plugin ----
def relative_eta(view, transmission: bool, from_specular: bool):
    """The relative IOR from a parameter view: ``eta`` or the one
    ``specular`` stands for, with Mitsuba's adjustments for transmission."""
    if from_specular:
        s = view.specular
        if transmission:
            s = ir.select(s == 0.0, 1e-3, s)
        return 2.0 / (1.0 - ir.sqrt(0.08 * s)) - 1.0
    eta = view.eta
    return ir.select(eta == 1.0, 1.001, eta) if transmission else eta


# Mitsuba's properties; "has spec_trans" and whether the IOR is given as
# eta or as specular are trace-time options the loader's rule sets.
# Without the transmission lobe spec_trans stays 0: Mitsuba would add the
# lobe when it changes, a kernel variant this scene did not load.
NO_SPEC_TRANS = ("spec_trans was not given (or was 0) when the scene was loaded, so this principled has no "
                 "transmission lobe, as in Mitsuba; give spec_trans in the scene to change or differentiate it")


def _texture_params(transmission: bool) -> tuple:
    return (Param("base_color", COLOR, 0.5), Param("roughness", FLOAT, 0.5),
            Param("anisotropic", FLOAT, 0.0), Param("metallic", FLOAT, 0.0),
            Param("spec_trans", FLOAT, 0.0, frozen=None if transmission else NO_SPEC_TRANS),
            Param("spec_tint", FLOAT, 0.0), Param("sheen", FLOAT, 0.0), Param("sheen_tint", FLOAT, 0.0),
            Param("flatness", FLOAT, 0.0), Param("clearcoat", FLOAT, 0.0), Param("clearcoat_gloss", FLOAT, 0.0))
RATE_PARAMS = tuple(Param(n, SCALAR, 1.0, nondiff="a sampling rate (Mitsuba: non-differentiable)")
                    for n in ("diffuse_reflectance_sampling_rate", "main_specular_sampling_rate",
                              "clearcoat_sampling_rate"))


def _type(transmission: bool, ior: str) -> BsdfType:
    from_specular = ior == "specular"
    ior_param = Param("specular", SCALAR, 0.5) if from_specular else Param("eta", SCALAR, 1.5)

    def make(v):
        return PrincipledParams(
            v.base_color, v.roughness, v.anisotropic, v.metallic, v.spec_trans, v.spec_tint, v.sheen,
            v.sheen_tint, v.flatness, v.clearcoat, v.clearcoat_gloss, relative_eta(v, transmission, from_specular),
            v.diffuse_reflectance_sampling_rate, v.main_specular_sampling_rate, v.clearcoat_sampling_rate)

    name = "principled" + ("-transmission" if transmission else "") + ("" if from_specular else "-eta")
    return BsdfType(
        name, "principled",
        (Param("transmission", OPTION, False, choices=(False, True)),
         Param("ior", OPTION, "specular", choices=("specular", "eta")),
         *_texture_params(transmission), ior_param, *RATE_PARAMS),
        make, eval, pdf, sample, options=(("transmission", transmission), ("ior", ior)),
        kw=(("transmission", transmission),), albedo="base_color",
        eta=(lambda v: relative_eta(v, transmission, from_specular)) if transmission else None,
        transmissive=transmission, anisotropic=True)


TYPES = tuple(_type(t, ior) for t in (False, True) for ior in ("specular", "eta"))
