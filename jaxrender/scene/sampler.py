"""A sensor's sampler as loaded: its type and settings, the sample count it
renders for a requested one (rounded as Mitsuba 3.9.1 rounds it), and the
kernel scalars it sets.

Example::

    spec = SamplerSpec("stratified")
    spec.sample_count(10)          # 16 (with a warning, as Mitsuba logs one)
    spec.kernel_inputs()           # {"sampler_jitter": 1, "sampler_strength": 2}
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ..kernels import samplers as ksamplers
from .errors import SceneError


class SampleCountWarning(UserWarning):
    """A sampler rounded the requested sample count (as Mitsuba does).
    Example: ``warnings.simplefilter("ignore", jaxrender.SampleCountWarning)``."""


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    """A sampler plugin's settings (``kernels.samplers.TYPES`` name;
    ``jitter`` and ``strength`` as Mitsuba's properties, defaults where the
    type has none)."""
    type: str = "independent"
    jitter: bool = True
    strength: int = 2

    def sample_count(self, n: int, what: str = "spp") -> int:
        """The samples per pixel the sampler takes when asked for ``n``
        (Mitsuba's ``set_sample_count``: stratified rounds up to a square,
        multijitter to a near-square grid, orthogonal to a prime's square,
        ldsampler to a power of 4); a warning when that changes ``n``, a
        SceneError when it cannot be honoured."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise SceneError(f"{what} must be a positive integer, got {n!r}")
        try:
            rounded = self.rounded_count(n)
        except ValueError as exc:
            raise SceneError(f"{what}: {exc}") from None
        if rounded != n:
            warnings.warn(f"the {self.type} sampler takes {rounded} samples per pixel for the {n} asked for "
                          f"({what}), as Mitsuba 3 does", SampleCountWarning, stacklevel=3)
        return rounded

    def rounded_count(self, n: int) -> int:
        """The samples per pixel the sampler takes for a positive ``n``,
        silently (a ValueError where it cannot): for counts the renderer
        picks itself."""
        return ksamplers.TYPES[self.type].sample_count(int(n), self.strength)

    def kernel_inputs(self) -> dict:
        """The kernel scalars of its settings (``layout.scene_inputs``)."""
        return {"sampler_jitter": np.uint32(self.jitter), "sampler_strength": np.uint32(self.strength)}
