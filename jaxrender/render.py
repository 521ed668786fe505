"""The public rendering entry point."""
from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

from .kernels.path import trace_path
from .primitives import launch
from .scene.errors import SceneError


def render(scene, params: Mapping[str, Any] | None = None, *, spp: int | None = None,
           seed: Any = 0) -> jax.Array:
    """Render ``scene`` to a linear-RGB image of shape (height, width, 3).

    ``params`` overrides values of ``scene.params`` (same keys as
    ``mitsuba.traverse``); ``seed`` may be a traced value under ``jax.jit``.
    Changing parameters, spp or seed never recompiles the kernel.

    Example::

        scene = jaxrender.load_dict(jaxrender.cornell_box())
        image = jaxrender.render(scene, spp=16, seed=1)
    """
    cam = scene.camera
    spp = cam.spp if spp is None else spp
    if not isinstance(spp, (int, np.integer)) or spp < 1:
        raise SceneError(f"spp must be a positive integer, got {spp!r}")
    integ = scene.integrator
    if integ["type"] == "direct":
        max_depth, rr_depth = 2, 1 << 30
    else:
        max_depth = int(integ.get("max_depth", -1))
        rr_depth = int(integ.get("rr_depth", 5))
        if max_depth < -1:
            raise SceneError(f"integrator.max_depth must be >= -1, got {max_depth}")
    inputs = scene.kernel_inputs(params)
    out = launch(trace_path(), (cam.height * cam.width,), **inputs,
                 width=np.uint32(cam.width), height=np.uint32(cam.height), spp=np.uint32(spp),
                 max_depth=np.int32(max_depth), rr_depth=np.int32(rr_depth),
                 hide_emitters=np.int32(bool(integ.get("hide_emitters", False))),
                 seed=seed if hasattr(seed, "dtype") else np.uint32(seed))["image"]
    return out.reshape(cam.height, cam.width, 3)
