"""The Cornell box, exactly as ``mitsuba.cornell_box()`` describes it.

Same keys, plugin types, parameter values and transforms (built with the
same chained :class:`~jaxrender.scene.transform.Transform` calls that
Mitsuba 3.9's ``mitsuba/python/util.py`` uses, in float64).
"""
from __future__ import annotations

from .transform import Transform

__all__ = ["cornell_box"]


def cornell_box() -> dict:
    """A fresh ``mitsuba.load_dict``-style dictionary of the Cornell box scene."""
    T = Transform
    return {
        "type": "scene",
        "integrator": {
            "type": "path",
            "max_depth": 8,
        },
        # -------------------- Sensor --------------------
        "sensor": {
            "type": "perspective",
            "fov_axis": "smaller",
            "near_clip": 0.001,
            "far_clip": 100.0,
            "focus_distance": 1000,
            "fov": 39.3077,
            "to_world": T().look_at(origin=[0, 0, 3.90], target=[0, 0, 0], up=[0, 1, 0]),
            "sampler": {
                "type": "independent",
                "sample_count": 64,
            },
            "film": {
                "type": "hdrfilm",
                "width": 256,
                "height": 256,
                "rfilter": {
                    "type": "gaussian",
                },
                "pixel_format": "rgb",
                "component_format": "float32",
            },
        },
        # -------------------- BSDFs --------------------
        "white": {
            "type": "diffuse",
            "reflectance": {"type": "rgb", "value": [0.885809, 0.698859, 0.666422]},
        },
        "green": {
            "type": "diffuse",
            "reflectance": {"type": "rgb", "value": [0.105421, 0.37798, 0.076425]},
        },
        "red": {
            "type": "diffuse",
            "reflectance": {"type": "rgb", "value": [0.570068, 0.0430135, 0.0443706]},
        },
        # -------------------- Light --------------------
        "light": {
            "type": "rectangle",
            "to_world": T().translate([0.0, 0.99, 0.01]).rotate([1, 0, 0], 90).scale([0.23, 0.19, 0.19]),
            "bsdf": {"type": "ref", "id": "white"},
            "emitter": {
                "type": "area",
                "radiance": {"type": "rgb", "value": [18.387, 13.9873, 6.75357]},
            },
        },
        # -------------------- Shapes --------------------
        "floor": {
            "type": "rectangle",
            "to_world": T().translate([0.0, -1.0, 0.0]).rotate([1, 0, 0], -90),
            "bsdf": {"type": "ref", "id": "white"},
        },
        "ceiling": {
            "type": "rectangle",
            "to_world": T().translate([0.0, 1.0, 0.0]).rotate([1, 0, 0], 90),
            "bsdf": {"type": "ref", "id": "white"},
        },
        "back": {
            "type": "rectangle",
            "to_world": T().translate([0.0, 0.0, -1.0]),
            "bsdf": {"type": "ref", "id": "white"},
        },
        "green-wall": {
            "type": "rectangle",
            "to_world": T().translate([1.0, 0.0, 0.0]).rotate([0, 1, 0], -90),
            "bsdf": {"type": "ref", "id": "green"},
        },
        "red-wall": {
            "type": "rectangle",
            "to_world": T().translate([-1.0, 0.0, 0.0]).rotate([0, 1, 0], 90),
            "bsdf": {"type": "ref", "id": "red"},
        },
        "small-box": {
            "type": "cube",
            "to_world": T().translate([0.335, -0.7, 0.38]).rotate([0, 1, 0], -17).scale(0.3),
            "bsdf": {"type": "ref", "id": "white"},
        },
        "large-box": {
            "type": "cube",
            "to_world": T().translate([-0.33, -0.4, -0.28]).rotate([0, 1, 0], 18.25).scale([0.3, 0.61, 0.3]),
            "bsdf": {"type": "ref", "id": "white"},
        },
    }
