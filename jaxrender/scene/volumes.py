"""Volumes (Mitsuba 3.9.1's ``gridvolume`` and ``constvolume``) as the
``heterogeneous`` medium reads them, and Mitsuba's binary ``.vol`` grid
files.

A volume is a block of the ``texels`` buffer (a ``TextureSpec`` of kind
``kernels.textures.VOLUME``): a header of ``layout.VOLUME_HEADER`` floats
(the world-to-unit-cube transform and the world bounding box of the unit
cube, as Mitsuba's ``Volume::bbox``), then the voxel values
``[z, y, x, channel]``. Its values are the parameter ``<key>.data``
(``gridvolume``, shape (z, y, x, channels)) or ``<key>.value.value``
(``constvolume``: a 1 x 1 x 1 grid of 3 floats). The kernel side is
``kernels.media.volume``.

A ``.vol`` file: the bytes ``VOL``, version 3, then little-endian int32
encoding (1: float32), x, y and z resolution and channel count, six
float32 of the grid's bounding box (min, max), and the float32 values,
x fastest and channels innermost.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..kernels import layout
from ..kernels import textures as ktex
from .errors import SceneError
from . import variants
from .properties import Properties, parse_rgb
from .textures import TextureSpec

if TYPE_CHECKING:
    from .builder import SceneBuilder

_WRAP = {"repeat": ktex.WRAP_REPEAT, "mirror": ktex.WRAP_MIRROR, "clamp": ktex.WRAP_CLAMP}
_FILTER = {"trilinear": ktex.FILTER_BILINEAR, "nearest": ktex.FILTER_NEAREST}


def read_vol(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(values (z, y, x, channels) float32, bounding box (2, 3)) of a ``.vol`` file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 48 or blob[:3] != b"VOL" or blob[3] != 3:
        raise SceneError(f"{path}: not a Mitsuba volume file (version 3 'VOL' header expected)")
    encoding, x, y, z, c = struct.unpack_from("<5i", blob, 4)
    if encoding != 1:
        raise SceneError(f"{path}: volume encoding {encoding} is not supported (only 1: float32)")
    if min(x, y, z) < 1 or c not in (1, 3, 6):
        raise SceneError(f"{path}: bad volume size {x} x {y} x {z} with {c} channels")
    bbox = np.frombuffer(blob, "<f4", 6, 24).reshape(2, 3)
    values = np.frombuffer(blob, "<f4", offset=48)
    if values.size != x * y * z * c:
        raise SceneError(f"{path}: expected {x * y * z * c} values, the file holds {values.size}")
    return values.reshape(z, y, x, c).astype(np.float32), bbox.astype(np.float32)


def write_vol(path: str | os.PathLike, values: np.ndarray, bbox: Any = ((0, 0, 0), (1, 1, 1))) -> None:
    """Write ``values`` ((z, y, x) or (z, y, x, channels)) as a float32 ``.vol`` file."""
    a = np.asarray(values, np.float32)
    if a.ndim == 3:
        a = a[..., None]
    if a.ndim != 4:
        raise ValueError(f"volume values must have shape (z, y, x[, channels]), got {a.shape}")
    z, y, x, c = a.shape
    with open(path, "wb") as f:
        f.write(b"VOL" + bytes([3]) + struct.pack("<5i", 1, x, y, z, c))
        f.write(np.asarray(bbox, "<f4").reshape(6).tobytes())
        f.write(np.ascontiguousarray(a, "<f4").tobytes())


@dataclass
class VolumeRef:
    """A loaded volume: its texture index, the parameter holding its values
    and Mitsuba's ``max_value`` when given (else the majorant follows the
    values: ``loaders.media.grid_majorant``)."""
    texture: int
    key: str
    fixed_max: float | None = None


def _header(to_world: np.ndarray) -> np.ndarray:
    """The world-to-local transform (3 x 4) and the world box of the unit cube."""
    corners = np.array([[i, j, k, 1.0] for i in (0, 1) for j in (0, 1) for k in (0, 1)])
    world = corners @ to_world.T
    world = world[:, :3] / world[:, 3:]
    to_local = np.linalg.inv(to_world)
    out = np.zeros(layout.VOLUME_HEADER, np.float32)
    out[layout.VOLUME_TO_LOCAL:layout.VOLUME_TO_LOCAL + 12] = to_local[:3].reshape(12)
    out[layout.VOLUME_BBOX_MIN:layout.VOLUME_BBOX_MIN + 3] = world.min(0)
    out[layout.VOLUME_BBOX_MAX:layout.VOLUME_BBOX_MAX + 3] = world.max(0)
    return out


def load_volume(builder: SceneBuilder, props: Properties, name: str, default: float, nondiff: str) -> VolumeRef:
    """Property ``name`` of a medium as a volume: a float or rgb (a
    ``constvolume`` of it, as Mitsuba's ``get_volume``), a ``constvolume``
    or a ``gridvolume``."""
    props.mark_read(name)
    value = props.values.get(name, default)
    key = f"{props.key}.{name}"
    if isinstance(value, Mapping) and value.get("type") == "ref":
        value, _ = builder.resolve(value, key)
    if not (isinstance(value, Mapping) and value.get("type") in ("constvolume", "gridvolume")):
        if isinstance(value, Mapping) and value.get("type") not in ("rgb", "spectrum"):
            raise props.error(f"a {value.get('type')!r} volume is not supported (gridvolume, constvolume, "
                              "a float or an rgb)", name)
        value = {"type": "constvolume", "value": value}
    inner = Properties(value, key, "volume")
    if inner.plugin == "constvolume":
        try:
            rgb = parse_rgb(inner.get("value", 1.0), inner.where("value", f"{key}.value.value"))
        except SceneError as exc:
            raise inner.locate(exc, "value") from None
        rgb = _spectral_values(inner, variants.mono_or_rgb(rgb), name, inner.get("value", 1.0))
        data, grid_bbox, fixed = rgb.astype(np.float32).reshape(1, 1, 1, -1), None, None
        pkey, wrap, filt = f"{key}.value.value", ktex.WRAP_CLAMP, ktex.FILTER_BILINEAR
        values = rgb.astype(np.float32)
    else:
        data, grid_bbox = _grid_values(inner)
        fixed = inner.float("max_value") if "max_value" in inner else None
        if fixed is not None and not fixed >= data.max():
            # (Mitsuba takes it as given: its null weights go negative, giving negative samples;
            # our null-or-real choice would be biased.)
            raise inner.error(f"{fixed} is below the grid's largest value {float(data.max())}: a majorant must "
                              "bound the extinction", "max_value")
        wrap = _WRAP[inner.string("wrap_mode", "clamp", choices=_WRAP)]
        filt = _FILTER[inner.string("filter_type", "trilinear", choices=_FILTER)]
        inner.bool("raw", False)            # (RGB rendering: no spectral upsampling to disable)
        inner.bool("accel", True)           # (hardware texture lookups: CUDA only)
        if data.shape[3] == 3:
            data = np.ascontiguousarray(variants.mono_or_rgb(data), np.float32)
        data = _spectral_values(inner, data, name)
        pkey, values = f"{key}.data", data
    to_world = inner.transform()
    if inner.plugin == "gridvolume" and inner.bool("use_grid_bbox", False):
        if grid_bbox is None:
            raise inner.error("use_grid_bbox needs a volume file (as in Mitsuba)", "use_grid_bbox")
        lo, hi = grid_bbox.astype(np.float64)
        if np.any(hi <= lo):
            raise inner.error(f"the file's bounding box {grid_bbox.tolist()} is empty", "use_grid_bbox")
        to_world = to_world @ np.block([[np.diag(hi - lo), lo[:, None]], [np.zeros((1, 3)), np.ones((1, 1))]])
    inner.check_unread()
    z, y, x, c = data.shape
    builder.add_param(pkey, values, nondiff)
    tex = builder.add_texture(TextureSpec(ktex.VOLUME, (pkey,), x, y, c, wrap=wrap, filter=filt,
                                          depth=z, header=_header(to_world)))
    return VolumeRef(tex, pkey, fixed)


def _spectral_values(props: Properties, values: np.ndarray, name: str, given: Any = None) -> np.ndarray:
    """A medium's volume values (..., C) as the spectral variant stores
    them (else unchanged): extinction as densities (one channel: a flat
    spectrum times the value), an albedo as reflectance spectra (each value's
    stored colour, three channels)."""
    if variants.current() != "spectral":
        return values
    uniform = given is not None and (not isinstance(given, Mapping) or variants.uniform_value(given) is not None)
    if name == "sigma_t":
        if not (values.shape[-1] == 1 or uniform):
            raise props.error("an RGB extinction in the spectral variant is not supported yet (give a float or a "
                              "one-channel grid)")
        return np.ascontiguousarray(values[..., :1], np.float32)
    flat = np.clip(np.asarray(values, np.float64).reshape(-1, values.shape[-1]), 0.0, 1.0)
    grey = values.shape[-1] == 1 or uniform
    coeffs = variants.uniform_coeffs(flat[:, 0]) if grey else variants.reflectance_coeffs(flat)
    return coeffs.reshape(values.shape[:-1] + (3,)).astype(np.float32)


def _grid_values(props: Properties) -> tuple[np.ndarray, np.ndarray | None]:
    """A gridvolume's values (z, y, x, channels) and its file's bounding box."""
    if "grid" in props:
        raise props.error("a VolumeGrid object is not supported yet: give 'filename' or 'data'", "grid")
    if ("filename" in props) == ("data" in props):
        raise props.error("a gridvolume needs exactly one of 'filename' and 'data'")
    if "filename" in props:
        path = props.filename()
        if not os.path.exists(path):
            raise props.error(f"volume file {path!r} does not exist", "filename")
        try:
            data, bbox = read_vol(path)
        except SceneError as exc:
            raise props.locate(exc, "filename") from None
    else:
        data, bbox = np.asarray(props.get("data"), np.float32), None
        if data.ndim == 3:
            data = data[..., None]
        if data.ndim != 4 or min(data.shape) < 1:
            raise props.error(f"data must have shape (z, y, x[, channels]), got {data.shape}", "data")
    if data.shape[3] not in (1, 3):
        raise props.error(f"a volume read as a colour has 1 or 3 channels (as in Mitsuba), got {data.shape[3]}")
    if not np.all(np.isfinite(data)):
        raise props.error("the volume holds NaN or infinite values")
    return np.ascontiguousarray(data), bbox
