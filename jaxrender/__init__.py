"""jaxrender: a differentiable renderer whose megakernels are JAX primitives.

Example::

    import jaxrender
    scene = jaxrender.load_dict(jaxrender.cornell_box())
    image = jaxrender.render(scene, spp=64)          # (H, W, 3) linear RGB jax.Array
"""
from __future__ import annotations

__version__ = "0.1.0"

from .primitives.render_rules import NotDifferentiableError
from .render import aov_names, render
from .scene.cornell import cornell_box
from .scene.errors import SceneError
from .scene.sampler import SampleCountWarning
from .scene.scene import Scene, load_dict
from .scene.variants import set_variant, variant, variants


def load_file(path, *, variant: str | None = None, **overrides) -> Scene:
    """Load a Mitsuba 3 XML scene; keyword overrides replace ``<default>``
    values, as in ``mitsuba.load_file(path, spp=64)``; ``variant`` as in
    :func:`load_dict`."""
    from .scene.xml_loader import parse_xml
    return load_dict(parse_xml(path, **overrides), variant=variant)


__all__ = ["render", "aov_names", "NotDifferentiableError", "load_dict", "load_file", "cornell_box", "Scene", "SceneError",
           "SampleCountWarning", "set_variant", "variant", "variants"]
