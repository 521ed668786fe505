"""Mitsuba's ``null``: a surface that is not there for light, only a
boundary (of a participating medium, say).

It reflects nothing (``eval`` and ``pdf`` are 0) and its only sample is the
null component: ``wo = -wi`` with pdf 1 and weight 1, a delta sample that
integrators see as a pass-through (``BsdfType.null``; ``surface.py`` marks
every sample of this plain type as null). The path tracer treats it as
Mitsuba's does: a vertex that counts towards ``max_depth`` and does no
emitter sampling; ``volpath`` crosses it without counting a bounce.
"""
from __future__ import annotations

from ... import ir
from ...ir import Vec
from ..spectrum import black, uniform
from .base import BsdfType


def eval(params, wi: Vec, wo: Vec) -> Vec:  # noqa: A001 - BSDF interface name
    return black()


def pdf(params, wi: Vec, wo: Vec):
    return ir.Float(0.0)


def sample(params, wi: Vec, u1, u2: Vec):
    return -wi, ir.Float(1.0), uniform(1.0), ir.Bool(True)


TYPE = BsdfType("null", "null", (), lambda p: None, eval, pdf, sample, null=True)
