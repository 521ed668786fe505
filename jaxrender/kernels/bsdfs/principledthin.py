"""The thin principled BSDF as Mitsuba 3's ``principledthin`` plugin implements it.

A two-dimensional sheet with the same medium on both sides: it looks the
same from either side (directions are mirrored to ``wi``'s side first), and
sampled interactions keep eta = 1. Four lobes:

* a glossy reflection of weight ``spec_trans`` (GGX of ``roughness``,
  ``anisotropic`` as in ``principled``), its dielectric Fresnel term of
  ``eta`` blended by ``spec_tint`` towards a Schlick term tinted by
  ``base_color``;
* a glossy transmission of weight ``spec_trans`` tinted by ``base_color``:
  the mirror direction of a microfacet of the roughness scaled by the IOR
  (Burley 2015: ``(0.65 eta - 0.35) roughness``), flipped through the
  sheet, times one minus the Fresnel term;
* Burley's diffuse with retro-reflection blended with the fake subsurface
  term by ``flatness``, plus ``sheen``, of weight ``(1 - spec_trans)(1 -
  diff_trans / 2)``;
* a Lambertian transmission of weight ``(1 - spec_trans) diff_trans / 2``
  (``diff_trans`` runs from 0 to 2).

Sampling picks a lobe with probabilities proportional to the lobe weights
times the four ``*_sampling_rate`` properties (the glossy ones at half
weight); ``pdf`` is its exact density.

Mitsuba keeps a flag per optional property (given and not the float 0)
and skips a lobe whose flag is off; with the property at its default the
lobe contributes nothing either way, and an update turns the flag on, so
here every lobe is always traced and its parameter may change at render
time. The one difference: where the selection probabilities do not sum to
exactly 1 in floats, a ``u1`` above their sum (about 1e-7 of samples)
picks the diffuse transmission here, none in Mitsuba when ``diff_trans``
was not given.

Example::

    p = ThinParams(Vec(.8, .2, .1), roughness=0.3, anisotropic=0.0, spec_trans=0.6, eta=1.4,
                   spec_tint=0.2, sheen=0.0, sheen_tint=0.0, flatness=0.0, diff_trans=0.5,
                   diff_refl_rate=1.0, spec_refl_rate=1.0, spec_trans_rate=1.0, diff_trans_rate=1.0)
    f = eval(p, wi, wo)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ... import ir
from ...ir import Vec
from .. import sampling
from .base import COLOR, FLOAT, SCALAR, BsdfType, Param, black
from .fresnel import fresnel, reflect_about
from .principled import burley, compatible, ggx, lerp, schlick_weight, sheen_color, tinted_schlick

INV_PI = 1.0 / math.pi


@dataclasses.dataclass
class ThinParams:
    base_color: Vec
    roughness: Any
    anisotropic: Any
    spec_trans: Any
    eta: Any
    spec_tint: Any
    sheen: Any
    sheen_tint: Any
    flatness: Any
    diff_trans: Any
    diff_refl_rate: Any
    spec_refl_rate: Any
    spec_trans_rate: Any
    diff_trans_rate: Any


def _transmission_ggx(p):
    """The transmission lobe's distribution: roughness scaled by the IOR."""
    return ggx((0.65 * p.eta - 0.35) * p.roughness, p.anisotropic)


def _lobe_probs(p):
    """Selection probabilities (glossy reflection, glossy transmission,
    diffuse reflection, diffuse transmission)."""
    dt = 0.5 * p.diff_trans
    sr = p.spec_trans * p.spec_refl_rate * 0.5
    st = p.spec_trans * p.spec_trans_rate * 0.5
    cr = p.diff_refl_rate * (1.0 - p.spec_trans) * (1.0 - dt)
    ct = p.diff_trans_rate * (1.0 - p.spec_trans) * dt
    inv = 1.0 / (sr + st + cr + ct)
    return sr * inv, st * inv, cr * inv, ct * inv


def _frame(wi: Vec, wo: Vec):
    """wi and wo mirrored so that wi is above the sheet, the half vector of
    wi and wo's reflection to wi's side, and whether wi is usable."""
    s = ir.copysign(1.0, wi.z)
    wi, wo = wi * s, wo * s
    wo_up = Vec(wo.x, wo.y, ir.abs(wo.z))
    h = wi + wo_up
    return wi, wo, wo_up, h * ir.rsqrt(ir.dot(h, h))


# ------------------------------------------------------ eval / pdf ----
def eval(params: ThinParams, wi: Vec, wo: Vec) -> Vec:  # noqa: A001
    p = params
    active = wi.z != 0.0
    wi, wo, _, h = _frame(wi, wo)
    ci, co = wi.z, wo.z
    aco = ir.abs(co)
    reflect, refract = co > 0.0, co < 0.0
    dt = 0.5 * p.diff_trans
    wi_h = ir.dot(wi, h)
    F = fresnel(wi_h, p.eta)[0]
    zero = black()

    glossy = p.spec_trans / (4.0 * ci)
    d = ggx(p.roughness, p.anisotropic)
    tinted = tinted_schlick(p.base_color, p.eta, wi_h, p.eta)
    f_thin = Vec(*(lerp(F, c, p.spec_tint) for c in tinted))
    spec_on = active & (p.spec_trans > 0.0) & reflect & compatible(h, wi, wo, ci, True)
    value = ir.select(spec_on, f_thin * (glossy * d.D(h) * d.G(wi, wo, h)), zero)

    dt_ggx = _transmission_ggx(p)
    trans_on = active & (p.spec_trans > 0.0) & refract & compatible(h, wi, wo, ci, False)
    trans = p.base_color * (glossy * (1.0 - F) * dt_ggx.D(h) * dt_ggx.G(wi, wo, h))
    value = value + ir.select(trans_on, trans, zero)

    diffuse_w = (1.0 - p.spec_trans) * (1.0 - dt)
    cos_d = ir.dot(h, wo)
    diff_on = active & reflect & (p.spec_trans < 1.0) & (dt < 1.0)
    diffuse = p.base_color * (diffuse_w * co * INV_PI * burley(p.roughness, p.flatness, ci, aco, cos_d))
    sheen = sheen_color(p.base_color, p.sheen_tint) * (p.sheen * diffuse_w * schlick_weight(ir.abs(cos_d)) * aco)
    diffuse = diffuse + ir.select(p.sheen > 0.0, sheen, zero)
    value = value + ir.select(diff_on, diffuse, zero)

    lambert_on = active & refract & (p.spec_trans < 1.0) & (dt > 0.0)
    lambert = p.base_color * ((1.0 - p.spec_trans) * dt * INV_PI * aco)
    return value + ir.select(lambert_on, lambert, zero)


def pdf(params: ThinParams, wi: Vec, wo: Vec):
    p = params
    active = wi.z != 0.0
    wi, wo, wo_up, h = _frame(wi, wo)
    co = wo.z
    reflect, refract = co > 0.0, co < 0.0
    sr, st, cr, ct = _lobe_probs(p)
    dwh_dwo = ir.abs(1.0 / (4.0 * ir.dot(wo_up, h)))
    spec = sr * ggx(p.roughness, p.anisotropic).pdf(wi, h) * dwh_dwo
    result = ir.select(reflect & compatible(h, wi, wo, wi.z, True), spec, 0.0)
    trans = st * _transmission_ggx(p).pdf(wi, h) * dwh_dwo
    result = result + ir.select(refract & compatible(h, wi, wo, wi.z, False), trans, 0.0)
    result = result + ir.select(reflect, cr * (INV_PI * co), 0.0)
    result = result + ir.select(refract, ct * (INV_PI * -co), 0.0)
    return ir.select(active, result, 0.0)


def sample(params: ThinParams, wi: Vec, u1, u2: Vec):
    p = params
    active = wi.z != 0.0
    s = ir.copysign(1.0, wi.z)
    wf = wi * s
    sr, st, cr, _ = _lobe_probs(p)
    edge_t = sr + st
    pick_t = (u1 >= sr) & (u1 < edge_t)
    pick_d = (u1 >= edge_t) & (u1 < edge_t + cr)
    pick_l = u1 >= edge_t + cr

    # One microfacet sample serves both glossy lobes (the transmission's
    # roughness is scaled); a transmission mirrors about it, then crosses.
    m, _ = ggx(ir.select(pick_t, (0.65 * p.eta - 0.35) * p.roughness, p.roughness), p.anisotropic).sample(wf, u2)
    wo_m = reflect_about(wf, m)
    wo_t = Vec(wo_m.x, wo_m.y, -wo_m.z)
    ok = ir.select(pick_t, compatible(m, wf, wo_t, wf.z, False) & (wo_t.z < 0.0),
                   compatible(m, wf, wo_m, wf.z, True) & (wo_m.z > 0.0))
    wo = ir.select(pick_t, wo_t, wo_m)
    cos_hemi = sampling.square_to_cosine_hemisphere(u2)
    wo = ir.select(pick_d, cos_hemi, ir.select(pick_l, -cos_hemi, wo))
    ok = ok | pick_d | pick_l
    zero = black()
    wo = ir.select(active, wo * s, Vec(0.0, 0.0, 0.0))   # (a direction: three floats in every variant)
    active = active & ok
    pd = ir.select(active, pdf(p, wi, wo), 0.0)
    active = active & (pd > 0.0)
    f = eval(p, wi, wo)
    weight = ir.select(active, f / ir.select(active, pd, 1.0), zero)
    return wo, pd, weight, ir.Bool(False)


# ----------------------------------------------------------- plugin ----
PARAMS = (Param("base_color", COLOR, 0.5), Param("roughness", FLOAT, 0.5), Param("anisotropic", FLOAT, 0.0),
          Param("spec_trans", FLOAT, 0.0), Param("eta", FLOAT, 1.5), Param("spec_tint", FLOAT, 0.0),
          Param("sheen", FLOAT, 0.0), Param("sheen_tint", FLOAT, 0.0), Param("flatness", FLOAT, 0.0),
          Param("diff_trans", FLOAT, 0.0),
          *(Param(n, SCALAR, 1.0, nondiff="a sampling rate (Mitsuba: non-differentiable)")
            for n in ("diffuse_reflectance_sampling_rate", "specular_reflectance_sampling_rate",
                      "specular_transmittance_sampling_rate", "diffuse_transmittance_sampling_rate")))


def _make(v) -> ThinParams:
    return ThinParams(v.base_color, v.roughness, v.anisotropic, v.spec_trans, v.eta, v.spec_tint, v.sheen,
                      v.sheen_tint, v.flatness, v.diff_trans, v.diffuse_reflectance_sampling_rate,
                      v.specular_reflectance_sampling_rate, v.specular_transmittance_sampling_rate,
                      v.diffuse_transmittance_sampling_rate)


# Always transmissive (Mitsuba lists its diffuse transmission lobe whatever
# diff_trans is, so twosided refuses it); sampled interactions keep eta 1.
TYPE = BsdfType("principledthin", "principledthin", PARAMS, _make, eval, pdf, sample, albedo="base_color",
                transmissive=True, anisotropic=True)
