"""Mitsuba 3's reconstruction filters, written once for the kernels and
the host.

A filter is its kind (one of :data:`KINDS`), its radius and up to two
shape constants (:func:`constants`, from the plugin's parameters).
:func:`value` is the filter at a signed distance in pixels, 0 beyond the
radius, in the operations of a namespace: :data:`IR` inside a kernel
(``kernels/sensors/film.py``, the kind a runtime value the kernel
branches on, so one compiled kernel serves every filter of a footprint),
:data:`NUMPY` on the host (the film's expected weights, tests).

Example::

    radius, p = constants("gaussian", {"stddev": 0.5})        # 2.0: cut at 4 stddev
    value("gaussian", radius, p, np.array([0.0, 1.0, 2.5]))    # 1, e^-2, both less the cut; 0
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np

from ... import ir

KINDS = ("box", "tent", "gaussian", "lanczos", "mitchell", "catmullrom")

NUMPY = SimpleNamespace(abs=np.abs, exp=np.exp, sin=np.sin, maximum=np.maximum, where=np.where)
IR = SimpleNamespace(abs=ir.abs, exp=ir.exp, sin=ir.sin, maximum=ir.maximum, where=ir.select)


def constants(kind: str, params: Mapping[str, Any]) -> tuple[float, tuple[float, float]]:
    """(radius, (a, b)) of filter ``kind`` with Mitsuba's shape parameters
    ``params`` (a tent's radius, a Gaussian's stddev, Lanczos' lobes,
    Mitchell's B and C)."""
    if kind == "box":
        return 0.5, (0.0, 0.0)
    if kind == "tent":
        return float(params["radius"]), (0.0, 0.0)
    if kind == "gaussian":
        sigma = float(params["stddev"])
        radius = 4.0 * sigma
        alpha = -1.0 / (2.0 * sigma * sigma)
        # (shifted down so that it reaches zero at the radius)
        return radius, (alpha, math.exp(alpha * radius * radius))
    if kind == "lanczos":
        lobes = float(params["lobes"])
        return lobes, (0.0, 0.0)
    if kind == "mitchell":
        return 2.0, (float(params["B"]), float(params["C"]))
    if kind == "catmullrom":
        return 2.0, (0.0, 0.5)
    raise ValueError(f"unknown filter {kind!r}")


def value(kind: str, radius, p, x, m=NUMPY):
    """Filter ``kind`` (radius ``radius``, constants ``p`` of
    :func:`constants`) at signed distance ``x``, in the operations of
    namespace ``m``; 0 beyond the radius."""
    ax = m.abs(x)
    if kind == "box":
        f = ax * 0.0 + 1.0
    elif kind == "tent":
        f = m.maximum(1.0 - ax / radius, 0.0)
    elif kind == "gaussian":
        f = m.maximum(m.exp(p[0] * x * x) - p[1], 0.0)
    elif kind == "lanczos":
        # sinc(x) sinc(x / lobes), 1 at 0 (whose 0 / 0 the other side of the select holds)
        t = m.where(ax < 1e-5, 1.0, ax) * math.pi
        f = m.where(ax < 1e-5, 1.0, m.sin(t) * m.sin(t / radius) * radius / (t * t))
    elif kind in ("mitchell", "catmullrom"):
        b, c = p
        near = ((12.0 - 9.0 * b - 6.0 * c) * ax + (-18.0 + 12.0 * b + 6.0 * c)) * ax * ax + (6.0 - 2.0 * b)
        far = (((-b - 6.0 * c) * ax + (6.0 * b + 30.0 * c)) * ax + (-12.0 * b - 48.0 * c)) * ax + (8.0 * b + 24.0 * c)
        f = m.where(ax < 1.0, near, far) * (1.0 / 6.0)
    else:
        raise ValueError(f"unknown filter {kind!r}")
    return m.where(ax <= radius, f, 0.0)

