"""Fresnel equations and specular direction helpers (Mitsuba 3 conventions).

Example::

    F, cos_t, eta_it, eta_ti = fresnel(cos_theta_i, eta)   # dielectric
    F_rgb = fresnel_conductor_rgb(cos_theta_i, eta_rgb, k_rgb)
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec


def fresnel(cos_theta_i, eta):
    """Unpolarised dielectric Fresnel reflectance for a relative IOR ``eta``
    (interior / exterior). ``cos_theta_i`` < 0 means arriving from inside.
    Returns ``(F, cos_theta_t, eta_it, eta_ti)``: ``cos_theta_t`` has the
    opposite sign of ``cos_theta_i``; total internal reflection gives F = 1."""
    outside = cos_theta_i >= 0.0
    inv_eta = 1.0 / eta
    eta_it = ir.select(outside, eta, inv_eta)
    eta_ti = ir.select(outside, inv_eta, eta)
    sin2_i = 1.0 - cos_theta_i * cos_theta_i
    cos2_t = 1.0 - sin2_i * (eta_ti * eta_ti)
    ci = ir.abs(cos_theta_i)
    ct = ir.safe_sqrt(cos2_t)
    a_s = (ci - eta_it * ct) / (ci + eta_it * ct)
    a_p = (ct - eta_it * ci) / (ct + eta_it * ci)
    r = 0.5 * (a_s * a_s + a_p * a_p)
    matched = eta == 1.0
    r = ir.select(matched | (ci == 0.0), ir.select(matched, 0.0, 1.0), r)
    cos_t = -ir.copysign(ct, cos_theta_i)
    return r, cos_t, eta_it, eta_ti


def fresnel_conductor(cos_theta_i, eta, k):
    """Unpolarised reflectance of a conductor with complex IOR ``eta + i k``
    (one channel; ``cos_theta_i`` >= 0)."""
    c2 = cos_theta_i * cos_theta_i
    s2 = 1.0 - c2
    s4 = s2 * s2
    t = eta * eta - k * k - s2
    ke2 = k * k * eta * eta
    a2b2 = ir.safe_sqrt(t * t + 4.0 * ke2)
    # a^2 = (a2b2 + t) / 2 cancels where t < 0 (metals); there it is
    # 2 k^2 eta^2 / (a2b2 - t), the same number without the cancellation, so
    # that a's derivative stays finite where a is 0 (eta = 0, Mitsuba's
    # perfect conductor "none": 0.5 (a2b2 + t) rounded to 0 or a few ulp and
    # the square root's slope there made camera derivatives NaN)
    den = a2b2 - t
    a = ir.safe_sqrt(ir.select(t < 0.0, 2.0 * ke2 / ir.select(den > 0.0, den, 1.0), 0.5 * (a2b2 + t)))
    t1 = a2b2 + c2
    t2 = 2.0 * cos_theta_i * a
    r_s = (t1 - t2) / (t1 + t2)
    t3 = a2b2 * c2 + s4
    t4 = t2 * s2
    r_p = r_s * (t3 - t4) / (t3 + t4)
    return 0.5 * (r_s + r_p)


def fresnel_conductor_rgb(cos_theta_i, eta: Vec, k: Vec) -> Vec:
    """:func:`fresnel_conductor` per channel of rgb ``eta`` and ``k``."""
    return Vec(*(fresnel_conductor(cos_theta_i, e, kk) for e, kk in zip(eta, k)))


def reflect(wi: Vec) -> Vec:
    """Mirror ``wi`` about the local normal (0, 0, 1)."""
    return Vec(-wi.x, -wi.y, wi.z)


def reflect_about(wi: Vec, m: Vec) -> Vec:
    """Mirror ``wi`` about the unit vector ``m``: 2 (wi.m) m - wi."""
    return m * (2.0 * ir.dot(wi, m)) - wi


def refract(wi: Vec, cos_theta_t, eta_ti) -> Vec:
    """Refract ``wi`` through the local normal, given ``cos_theta_t`` and
    ``eta_ti`` from :func:`fresnel`."""
    return Vec(-eta_ti * wi.x, -eta_ti * wi.y, cos_theta_t)


def refract_about(wi: Vec, m: Vec, cos_theta_t, eta_ti) -> Vec:
    """Refract ``wi`` through the microfacet normal ``m``."""
    return m * (ir.dot(wi, m) * eta_ti + cos_theta_t) - wi * eta_ti
