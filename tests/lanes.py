"""Shared by the control-flow, scatter/dispatch and RNG tests: the engine has
a one-lane code generator (real branches) and a SIMD packet generator
(masks); divergent control flow is run through both."""
from __future__ import annotations

import pytest

from jaxrender.primitives import launch

LANES = [pytest.param(None, id="default_lanes"), pytest.param(1, id="one_lane")]


def run(kernel, shape, lanes=None, **kw):
    """``launch`` with an optional SIMD packet width."""
    if lanes is not None:
        kw["simd_lanes"] = lanes
    return launch(kernel, shape, **kw)
