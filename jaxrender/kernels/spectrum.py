"""The colour type of a kernel, chosen at trace time (Mitsuba 2's retargeting).

Radiance, throughput, BSDF values and emitted power are a ``Spectrum``:
an ``ir.Vec`` of ``channels`` values. Kernels create and read colours
only through a :class:`SpectrumType` (``ctx.spectrum``), so one kernel
source serves every variant:

* ``rgb``: linear sRGB, three channels;
* ``mono``: one channel, the luminance (Mitsuba's ``mono``);
* ``spectral``: four wavelengths per path, sampled at the camera
  (Mitsuba's ``spectral``), the film receiving their linear sRGB;
* ``spectral_polarized`` / ``mono_polarized``: the same colours, but a
  path's throughput and BSDF values are a Mueller matrix per channel
  (Mitsuba's ``MuellerMatrix<UnpolarizedSpectrum>``), 16 entries of
  ``channels`` floats, multiplied as matrices (:meth:`SpectrumType.mul`);
  radiance is a Stokes vector per channel (:meth:`SpectrumType.apply`):
  emitters are unpolarized (:meth:`SpectrumType.radiance`), so Mitsuba's
  radiance matrix would only ever have its first column. The film records
  the intensity (S0), the ``stokes`` integrator all four.

What a colour *parameter* stores is the variant's business too (three
floats per colour in every variant, ``layout``): RGB values in ``rgb``,
the luminance in ``mono`` (first float), and in ``spectral`` the three
coefficients of Jakob & Hanika's sigmoid-polynomial spectrum (what
``scene/spectra.py`` fits to an RGB value). :meth:`SpectrumType.color`
turns a stored colour into the path's spectrum, :meth:`emission` an
emitter's radiance row, :meth:`to_film` the path's spectrum into what the
film accumulates.

Example::

    S = ctx.spectrum
    beta = S.one()
    albedo = S.color(Vec(*row[k:k + 3]))       # a BSDF colour parameter
    L = L + beta * S.emission(buf, row)         # an emitter's radiance
    q = S.max(beta)                             # Russian roulette's throughput
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from typing import Any

from .. import ir
from ..ir import Vec
from . import mueller, textures
from .textures import TEXTURED_UNIT

# Sampler dimension group of the wavelengths (``Context.rand``): far above
# the groups path vertices use, so adding it leaves their numbers unchanged.
WAVELENGTH_GROUP = 0xFFF0

# The spectral tables (``spectral_data`` input): one row per 5 nm from
# CIE_MIN to CIE_MAX: the colour matching functions turned into linear
# sRGB and scaled so that a unit spectrum has luminance 1 (r, g, b), D65
# scaled to unit luminance, and the plain CIE y-bar (peak 1).
CIE_MIN, CIE_MAX, CIE_STEP = 360.0, 830.0, 5.0
CIE_SAMPLES = 95
# A spectral emitter row: a stored colour (3), scale, and 1 where the
# spectrum is multiplied by D65 (an RGB radiance), 0 where not (a uniform
# or tabulated one).
EMITTER_ROW = 5
# A stored spectral colour whose first float is TABULATED is a tabulated
# spectrum: (TABULATED, its row of ``spectral_curves``, a scale). Curves
# are sampled every CURVE_STEP nm from CIE_MIN to CIE_MAX.
TABULATED = -1e30
# A textured spectral colour at a hit is (-(texture + 2) * TEXTURED_UNIT, u, v)
# (textures.apply_textures).
CURVE_STEP = 1.0
CURVE_SAMPLES = 471


@dataclasses.dataclass(frozen=True)
class SpectrumType:
    """A colour representation: ``channels`` floats per colour along a path,
    ``film_channels`` per sample on the film, ``emitter_width`` floats per
    emitter radiance row. A spectral type is *bound* to a path's
    wavelengths by :meth:`bind` (trace-time data, not part of its identity)."""
    name: str
    channels: int
    film_channels: int
    emitter_width: int
    polarized: bool = False
    wavelengths: Any = dataclasses.field(default=None, compare=False, repr=False)
    tables: Any = dataclasses.field(default=None, compare=False, repr=False)
    curves: Any = dataclasses.field(default=None, compare=False, repr=False)   # None: no tabulated colours
    texels: Any = dataclasses.field(default=None, compare=False, repr=False)   # the buffers; None: no textures
    dispersion: bool = dataclasses.field(default=False, compare=False, repr=False)  # IORs may be curves

    @property
    def base(self) -> str:
        """The colour variant beneath polarization ("rgb", "mono", "spectral")."""
        return self.name.removesuffix("_polarized")

    @property
    def spectral(self) -> bool:
        return self.base == "spectral"

    @property
    def width(self) -> int:
        """Floats of a path spectrum (throughput, a BSDF value): ``channels``,
        times 16 when polarized (entry (i, j) of channel l at ``(4 i + j)
        channels + l``)."""
        return self.channels * (16 if self.polarized else 1)

    @property
    def radiance_width(self) -> int:
        """Floats of a radiance: ``channels``, times 4 when polarized (Stokes
        component i of channel l at ``i channels + l``)."""
        return self.channels * (4 if self.polarized else 1)

    def zero(self) -> Vec:
        """A path spectrum of zero (a zero Mueller matrix when polarized)."""
        return Vec(*(0.0,) * self.width)

    def one(self) -> Vec:
        """The path spectrum that changes nothing (the identity matrix when polarized)."""
        return self.scaled(1.0)

    def full(self, value) -> Vec:
        """A colour of ``value`` in every channel."""
        return Vec(*(value,) * self.channels)

    # -- path spectra: colours as Mueller matrices when polarized ----------------
    def depolarizer(self, color: Vec) -> Vec:
        """A colour as a path spectrum: unchanged, or when polarized a
        depolarizer (Mitsuba's ``depolarizer``: only entry (0, 0)), what a
        BSDF without polarization code is."""
        if not self.polarized:
            return color
        if len(color) != self.channels:
            raise ValueError(f"depolarizer: a colour has {self.channels} channels, got {len(color)}")
        return self.from_matrices([mueller.depolarizer(c) for c in color])

    def scaled(self, value) -> Vec:
        """A path spectrum that scales everything by ``value`` (a Float or a
        colour): when polarized, ``value`` times the identity matrix (a
        pass-through that keeps the polarization)."""
        if not self.polarized:
            return value if isinstance(value, Vec) else self.full(value)
        values = tuple(value) if isinstance(value, Vec) else (value,) * self.channels
        return self.from_matrices([mueller.scale(mueller.identity(), c) for c in values])

    def as_path(self, value: Vec, keeps_polarization: bool = False) -> Vec:
        """A BSDF's value as a path spectrum: a Mueller matrix stays one; a
        colour is lifted (a depolarizer), or for a pass-through scales the
        identity (``keeps_polarization``)."""
        if not self.polarized or len(value) == self.width:
            return value
        return self.scaled(value) if keeps_polarization else self.depolarizer(value)

    def mul(self, a: Vec, b: Vec) -> Vec:
        """The product of two path spectra: per channel, or when polarized
        the matrix product ``a @ b`` per channel (``a`` the throughput
        towards the camera, ``b`` what follows it)."""
        if not self.polarized:
            return a * b
        return self.from_matrices([mueller.matmul(self.matrix(a, c), self.matrix(b, c))
                                   for c in range(self.channels)])

    def matrix(self, value: Vec, c: int) -> tuple:
        """(polarized) Channel ``c`` of a path spectrum as a Mueller matrix (``mueller.py``)."""
        n = self.channels
        if len(value) != self.width:
            raise ValueError(f"a polarized path spectrum has {self.width} floats, got {len(value)}")
        return tuple(Vec(*(value[(4 * i + j) * n + c] for j in range(4))) for i in range(4))

    def from_matrices(self, matrices: list) -> Vec:
        """(polarized) The path spectrum of one Mueller matrix per channel."""
        return Vec(*(matrices[c][i][j] for i in range(4) for j in range(4) for c in range(self.channels)))

    # -- radiance: a Stokes vector per channel when polarized ------------------------
    def no_radiance(self) -> Vec:
        """A radiance of zero (a zero Stokes vector per channel when polarized)."""
        return Vec(*(0.0,) * self.radiance_width)

    def radiance(self, color: Vec) -> Vec:
        """Unpolarized light of intensity ``color`` (emission) as a radiance."""
        if not self.polarized:
            return color
        return Vec(*color, *(0.0,) * (self.radiance_width - self.channels))

    def apply(self, m: Vec, radiance: Vec) -> Vec:
        """Path spectrum ``m`` applied to ``radiance``: per channel, or when
        polarized each channel's Mueller matrix times its Stokes vector."""
        if not self.polarized:
            return m * radiance
        n = self.channels
        out = [mueller.apply(self.matrix(m, c), Vec(*radiance[c::n])) for c in range(n)]
        return Vec(*(out[c][i] for i in range(4) for c in range(n)))

    def times(self, value: Vec, color: Vec) -> Vec:
        """A path spectrum or radiance scaled channel by channel by ``color``
        (a medium's weight: the same for every polarization state)."""
        if not self.polarized:
            return value * color
        n = self.channels
        return Vec(*(x * color[i % n] for i, x in enumerate(value)))

    def intensity(self, value: Vec) -> Vec:
        """The colour an unpolarized observer sees of a path spectrum or a
        radiance: itself, or when polarized entry (0, 0) / S0 of each
        channel (Mitsuba's ``unpolarized_spectrum``), their first floats."""
        return Vec(*value[:self.channels]) if self.polarized else value

    def read(self, buf, row, start: int = 0) -> Vec:
        """``channels`` floats stored at ``start`` in row ``row`` of ``buf``."""
        return Vec(*(buf.read(row, start + k) for k in range(self.channels)))

    def max(self, v: Vec):
        """The largest channel (of the intensity, when polarized: Mitsuba's
        ``max(unpolarized_spectrum(v))``)."""
        if self.polarized:
            v = self.intensity(v)
        m = v[0]
        for x in v[1:]:
            m = ir.maximum(m, x)
        return m

    def luminance(self, v: Vec):
        """Mitsuba's ``luminance(value, wavelengths)``: Rec. 709 weights of
        an RGB colour, a mono value itself, and for a spectrum the mean of
        y-bar times it over the path's wavelengths."""
        if self.base == "rgb":
            return textures.luminance(v)
        if self.base == "mono":
            return v[0]
        return self.mean(Vec(*(x * self._table(lam, 4) for x, lam in zip(v, self._bound()))))

    def mean(self, v: Vec):
        """The mean of the channels."""
        return sum(v[1:], v[0]) * (1.0 / len(v))

    # -- stored colours ---------------------------------------------------------
    def color(self, stored) -> Vec:
        """The spectrum of a stored colour parameter (three floats)."""
        stored = tuple(stored)
        if self.base == "rgb":
            return Vec(*stored)
        if self.base == "mono":
            return Vec(stored[0])
        values = self._model(stored)
        if self.curves is not None:
            tabulated = Vec(*(self._curve(stored[1], lam) * stored[2] for lam in self._bound()))
            values = ir.select(stored[0] == TABULATED, tabulated, values)
        if self.texels is None:
            return values
        # A textured colour (textures.apply_textures): decode the texels
        # around the hit, then interpolate, as Mitsuba's spectral bitmaps do
        # (the model is nonlinear: interpolating coefficients would differ).
        tex = ir.cast(ir.round(stored[0] * (-1.0 / TEXTURED_UNIT)), "i32") - 2
        return ir.cond(stored[0] < -1.5 * TEXTURED_UNIT,
                       lambda: textures.spectral_lookup(self.texels, tex, Vec(stored[1], stored[2]), self._model),
                       lambda: values)

    def ior(self, stored) -> Vec:
        """An IOR parameter's value at each channel's wavelength: a stored
        -(index + 1) is dispersive, tabulated spectrum ``index`` (only where
        :attr:`dispersion`), else the value is the same at every wavelength."""
        if not self.dispersion:
            return self.full(stored)
        index = -stored - 1.0
        return Vec(*(ir.select(stored < 0.0, self._curve(ir.maximum(index, 0.0), lam), stored)
                     for lam in self._bound()))

    def hero_only(self) -> Vec:
        """(spectral) The path spectrum that keeps the first wavelength alone,
        four times over: after a refraction whose direction depends on the
        wavelength, a path follows its first one (its density is the
        wavelengths' own), the others end (pbrt's terminated secondary
        wavelengths)."""
        return self.scaled(Vec(*(4.0 if c == 0 else 0.0 for c in range(self.channels))))

    def _model(self, stored) -> Vec:
        return Vec(*(sigmoid_polynomial(stored, lam) for lam in self._bound()))

    def d65(self, value: Vec) -> Vec:
        """(spectral) ``value`` times D65 (unit luminance) at the path's wavelengths."""
        return Vec(*(v * self._table(lam, 3) for v, lam in zip(value, self._bound())))

    def emission(self, buf, row) -> Vec:
        """The radiance of emitter row ``row`` of ``buf`` (``emitter_width`` floats)."""
        if not self.spectral:
            return self.read(buf, row)
        color = self.color(buf.read(row, k) for k in range(3))
        scale, d65 = buf.read(row, 3), buf.read(row, 4)
        return Vec(*(v * scale * ir.select(d65 > 0.5, self._table(lam, 3), 1.0)
                     for v, lam in zip(color, self._bound())))

    # -- wavelengths and the film -------------------------------------------------
    def bind(self, ctx, s):
        """``ctx`` with its spectrum bound to sample ``s``'s wavelengths (a
        spectral type: four, stratified from one sampler dimension and
        importance-sampled for RGB output); other types: ``ctx`` itself."""
        if not self.spectral:
            return ctx
        u = ctx.rand(s, WAVELENGTH_GROUP)[2]
        lams = []
        for j in range(4):
            uj = u + j * 0.25
            lams.append(sample_wavelength(ir.select(uj >= 1.0, uj - 1.0, uj)))
        bound = dataclasses.replace(self, wavelengths=tuple(lams), tables=ctx.b["spectral_data"],
                                    curves=ctx.b["spectral_curves"] if ctx.structure.spectral_curves else None,
                                    texels=ctx.b if ctx.structure.tex_slots else None,
                                    dispersion=ctx.structure.dispersion)
        # code without a context at hand (a BSDF's luminance) sees the bound type
        # from here to the end of the kernel being traced (``using`` restores it)
        _ACTIVE.set(bound)
        return dataclasses.replace(ctx, spectrum=bound)

    def to_film(self, value: Vec) -> Vec:
        """What the film accumulates for a radiance ``value`` (its intensity,
        when polarized)."""
        if self.polarized:
            value = self.intensity(value)
        if not self.spectral:
            return value
        out = [0.0, 0.0, 0.0]
        for lam, v in zip(self._bound(), value):
            w = v * (0.25 / pdf_wavelength(lam))
            out = [o + w * self._table(lam, c) for c, o in enumerate(out)]
        return Vec(*out)

    def film_transpose(self, d_film: Vec) -> Vec:
        """The transpose of :meth:`to_film`: a film cotangent as the path
        spectrum's cotangent."""
        if not self.spectral:
            return self._from_intensity(d_film)
        return self._from_intensity(Vec(*(
            sum((d_film[c] * self._table(lam, c) for c in range(1, 3)), d_film[0] * self._table(lam, 0))
            * (0.25 / pdf_wavelength(lam)) for lam in self._bound())))

    def _from_intensity(self, d_color: Vec) -> Vec:
        """A colour cotangent as the cotangent of a radiance's intensity."""
        if not self.polarized:
            return d_color
        return Vec(*d_color, *(0.0,) * (self.radiance_width - self.channels))

    def _bound(self) -> tuple:
        if self.wavelengths is None:
            raise ValueError("a spectral colour was asked for outside a path: bind the spectrum to its "
                             "wavelengths first (SpectrumType.bind)")
        return self.wavelengths

    def _curve(self, index, lam):
        """Tabulated spectrum ``index`` (a float row number) at ``lam``."""
        t = (lam - CIE_MIN) * (1.0 / CURVE_STEP)
        i0 = ir.clamp(ir.cast(ir.floor(t), "i32"), 0, CURVE_SAMPLES - 2)
        w1 = ir.clamp(t - ir.cast(i0, "f32"), 0.0, 1.0)
        base = ir.cast(index, "i32") * CURVE_SAMPLES + i0
        return (1.0 - w1) * self.curves.read(base) + w1 * self.curves.read(base + 1)

    def _table(self, lam, column: int):
        """Column ``column`` of the spectral tables at wavelength ``lam``
        (linear interpolation between the 5 nm rows)."""
        t = (lam - CIE_MIN) * (1.0 / CIE_STEP)
        i0 = ir.clamp(ir.cast(ir.floor(t), "i32"), 0, CIE_SAMPLES - 2)
        w1 = ir.clamp(t - ir.cast(i0, "f32"), 0.0, 1.0)
        return (1.0 - w1) * self.tables.read(i0, column) + w1 * self.tables.read(i0 + 1, column)


def sigmoid_polynomial(c, lam):
    """Jakob & Hanika's reflectance model: sigmoid(c0 lam^2 + c1 lam + c2),
    sigmoid(x) = 1/2 + x / (2 sqrt(1 + x^2)); black and white are stored
    with c2 = -/+ 1e18, where it gives 0 and 1 exactly."""
    v = ir.fma(ir.fma(c[0], lam, c[1]), lam, c[2])
    return ir.maximum(0.0, ir.fma(0.5 * v, ir.rsqrt(ir.fma(v, v, 1.0)), 0.5))


# The wavelength density, proportional to 1 / cosh^2(K (lam - MID)) on
# [CIE_MIN, CIE_MAX] (Radziszewski et al. 2009): its CDF is a tanh.
_K, _MID = 0.0072, 538.0


_T0, _T1 = math.tanh(_K * (CIE_MIN - _MID)), math.tanh(_K * (CIE_MAX - _MID))


def sample_wavelength(u):
    """A wavelength (nm) with density :func:`pdf_wavelength`, from u in [0, 1)."""
    x = _T0 + (_T1 - _T0) * u          # tanh(K (lam - MID)), uniformly spread
    atanh = 0.5 * ir.log((1.0 + x) / (1.0 - x))
    return _MID + atanh * (1.0 / _K)


def pdf_wavelength(lam):
    """The density of :func:`sample_wavelength` at ``lam`` (inside the range)."""
    e = ir.exp(-2.0 * _K * ir.abs(lam - _MID))
    sech2 = 4.0 * e / ((1.0 + e) * (1.0 + e))
    return sech2 * (_K / (_T1 - _T0))


RGB = SpectrumType("rgb", 3, 3, 3)
MONO = SpectrumType("mono", 1, 1, 1)
SPECTRAL = SpectrumType("spectral", 4, 3, EMITTER_ROW)
MONO_POLARIZED = SpectrumType("mono_polarized", 1, 1, 1, polarized=True)
SPECTRAL_POLARIZED = SpectrumType("spectral_polarized", 4, 3, EMITTER_ROW, polarized=True)
BY_NAME = {t.name: t for t in (MONO, RGB, SPECTRAL, MONO_POLARIZED, SPECTRAL_POLARIZED)}


# The colour type of the kernel being traced, for code that makes colour
# constants without a colour at hand (a BSDF's black): set by whoever
# traces a kernel (``using``), RGB outside one.
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("jaxrender_spectrum", default=None)


def active() -> SpectrumType:
    """The colour type of the kernel being traced (RGB outside :func:`using`)."""
    return _ACTIVE.get() or RGB


@contextlib.contextmanager
def using(spectrum: SpectrumType):
    """Trace kernels of colour type ``spectrum`` within this block."""
    token = _ACTIVE.set(spectrum)
    try:
        yield spectrum
    finally:
        _ACTIVE.reset(token)


def black() -> Vec:
    """Zero in every channel of the traced kernel's colour type."""
    z = ir.Float(0.0)
    return Vec(*(z,) * active().channels)


def uniform(value) -> Vec:
    """``value`` in every channel of the traced kernel's colour type."""
    return Vec(*(value,) * active().channels)


def luminance(v: Vec):
    """The luminance of colour ``v`` in the traced kernel's colour type
    (:meth:`SpectrumType.luminance`)."""
    return active().luminance(v)
