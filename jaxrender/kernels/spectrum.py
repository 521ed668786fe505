"""The colour type of a kernel, chosen at trace time (Mitsuba 2's retargeting).

Radiance, throughput, BSDF values and emitted power are a ``Spectrum``:
an ``ir.Vec`` of ``channels`` values. Kernels create and read colours
only through a :class:`SpectrumType` (``ctx.spectrum``), so a monochrome,
spectral or polarized variant can come as another ``SpectrumType`` without
rewriting the kernels that use it. RGB (linear sRGB, three channels) is the
one variant today.

Example::

    S = RGB
    beta = S.one()
    L = L + beta * S.read(buf, row)          # a colour stored in a buffer row
    q = S.max(beta)                          # Russian roulette's throughput
"""
from __future__ import annotations

import dataclasses

from .. import ir
from ..ir import Vec


@dataclasses.dataclass(frozen=True)
class SpectrumType:
    """A colour representation: its name and how many floats one colour is."""
    name: str
    channels: int

    def zero(self) -> Vec:
        return self.full(0.0)

    def one(self) -> Vec:
        return self.full(1.0)

    def full(self, value) -> Vec:
        return Vec(*(value,) * self.channels)

    def read(self, buf, row, start: int = 0) -> Vec:
        """The colour stored at ``start`` in row ``row`` of ``buf``."""
        return Vec(*(buf.read(row, start + k) for k in range(self.channels)))

    def max(self, v: Vec):
        """The largest channel."""
        m = v[0]
        for x in v[1:]:
            m = ir.maximum(m, x)
        return m


RGB = SpectrumType("rgb", 3)
