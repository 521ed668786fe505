"""Reading one plugin's Mitsuba properties, strictly.

Every loader reads its plugin's values through a :class:`Properties`: the
plugin's dictionary (from ``load_dict`` or from an XML file, see
:class:`PluginDict`), its Mitsuba type, its key path (``sensor.film``,
``red``) and where it was written. Each read marks the property; after the
loader is done, :meth:`Properties.check_unread` raises for every property
nobody read, as ``mitsuba.load_file`` does ("unreferenced property"), so a
misspelt name never silently changes a render.

The value parsers (rgb, floats, integers, booleans, strings with choices,
named indices of refraction, transforms, points and vectors) live here too,
as plain functions, for code that checks a value outside a plugin.

Example::

    props = Properties({"type": "diffuse", "reflectanse": 0.3}, "white", "bsdf")
    props.rgb("reflectance", 0.5)          # array([0.5, 0.5, 0.5]): not given
    props.check_unread()                   # SceneError: ... unreferenced property "reflectanse"
                                           #   (did you mean "reflectance"?)
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import SceneError
from . import variants
from .plugin_names import ALL_PLUGINS, did_you_mean

# Mitsuba's named indices of refraction (the ones its documentation lists).
IOR = {"vacuum": 1.0, "helium": 1.000036, "hydrogen": 1.000132, "air": 1.000277, "carbon dioxide": 1.00045,
       "water": 1.3330, "acetone": 1.36, "ethanol": 1.361, "carbon tetrachloride": 1.461, "glycerol": 1.4729,
       "benzene": 1.501, "silicone oil": 1.52045, "bromine": 1.661, "water ice": 1.31, "fused quartz": 1.458,
       "pyrex": 1.470, "acrylic glass": 1.49, "polypropylene": 1.49, "bk7": 1.5046, "sodium chloride": 1.544,
       "amber": 1.55, "pet": 1.5750, "diamond": 2.419}

# Dictionary values with a "type" that are values, not plugins.
VALUE_TYPES = ("rgb", "spectrum")
_MISSING = object()


# ---------------------------------------------------------------------------
# Where a value was written
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    """A line of a scene file."""
    filename: str
    line: int

    def __str__(self) -> str:
        return f"{self.filename}, line {self.line}"


class PluginDict(dict):
    """A plugin's dictionary read from an XML file: equal to (and used as)
    the plain dict ``mitsuba.load_dict`` takes, plus where the plugin
    (``location``) and each of its entries (``locations[name]``) was written.

    Example::

        d = PluginDict({"type": "diffuse"}, Location("a.xml", 3))
        d == {"type": "diffuse"}           # True
    """

    def __init__(self, items: Iterable = (), location: Location | None = None,
                 locations: Mapping[str, Location] | None = None):
        super().__init__(items)
        self.location = location
        self.locations = dict(locations or {})


def location_of(value: Any, name: str | None = None) -> Location | None:
    """Where ``value`` (a plugin's dict) or its entry ``name`` was written;
    None for dictionaries that did not come from a file."""
    if name is not None:
        loc = getattr(value, "locations", {}).get(name)
        if loc is not None:
            return loc
    return getattr(value, "location", None)


def scene_error(message: str, location: Location | None = None) -> SceneError:
    """A SceneError whose message starts with ``location`` when known."""
    if location is None:
        return SceneError(message)
    return SceneError(f"{location}: {message}", filename=location.filename, line=location.line)


def is_plugin(value: Any) -> bool:
    """Whether a property value is a nested plugin (or a reference to one)
    rather than a value such as ``{"type": "rgb", ...}``."""
    return isinstance(value, Mapping) and "type" in value and value["type"] not in VALUE_TYPES


# ---------------------------------------------------------------------------
# Value parsers (``where`` names the value in messages)
# ---------------------------------------------------------------------------
def parse_float(value: Any, where: str) -> float:
    """A finite float (a Python or numpy number, or any size-1 array).
    Example: ``parse_float(np.float32(2), "lamp.scale")`` -> 2.0."""
    if isinstance(value, Mapping):
        raise SceneError(f"{where}: expected a float here, got a {value.get('type')!r} value")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise SceneError(f"{where}: expected a finite float, got {value!r}") from None
    if arr.size != 1 or not np.isfinite(arr).all():
        raise SceneError(f"{where}: expected a finite float, got {value!r}")
    return float(arr.reshape(()))


def parse_scalar(value: Any, where: str) -> np.ndarray:
    """:func:`parse_float` as a float64 array of shape () (a parameter value)."""
    return np.array(parse_float(value, where))


def parse_int(value: Any, where: str) -> int:
    """An integer (an int, a numpy integer or an integral float; not a bool)."""
    if isinstance(value, (bool, np.bool_)):
        raise SceneError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        return int(value)
    raise SceneError(f"{where}: expected an integer, got {value!r}")


def parse_bool(value: Any, where: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise SceneError(f"{where}: expected a boolean (true or false), got {value!r}")


def parse_string(value: Any, where: str, choices: Iterable[str] | None = None, lower: bool = False) -> str:
    """A string; with ``choices``, one of them (``lower``: compared in lower
    case, as Mitsuba reads e.g. ``fov_axis``)."""
    if not isinstance(value, str):
        raise SceneError(f"{where}: expected a string, got {value!r}")
    s = value.lower() if lower else value
    if choices is not None and s not in choices:
        raise SceneError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return s


def parse_filename(value: Any, where: str) -> str:
    """A file name: a string or an ``os.PathLike``."""
    if not isinstance(value, (str, os.PathLike)):
        raise SceneError(f"{where}: expected a file name, got {value!r}")
    return os.fspath(value)


# Linear sRGB of the equal-energy spectrum (CIE XYZ = (1, 1, 1)): the
# row sums of the XYZ -> linear sRGB matrix (IEC 61966-2-1).
EQUAL_ENERGY_SRGB = np.array([3.240479 - 1.537150 - 0.498535,
                              -0.969256 + 1.875991 + 0.041556,
                              0.055648 - 0.204043 + 1.057311])


def parse_rgb(value: Any, where: str, illuminant: bool = False) -> np.ndarray:
    """A colour given as rgb, a float or a uniform ``spectrum``, as 3 float64
    values. A uniform spectrum is, as in Mitsuba's RGB variants, its value
    for a reflectance, and for an ``illuminant`` (an emitter's radiance)
    that value times the sRGB colour of the equal-energy spectrum.

    Example: ``parse_rgb({"type": "rgb", "value": [1, 0, 0]}, "red")`` -> ``array([1., 0., 0.])``.
    """
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "rgb":
            value = value.get("value")
        elif kind == "spectrum":
            extra = sorted(set(value) - {"type", "value"})
            v = value.get("value")
            if extra or not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
                raise SceneError(f"{where}: a spectrum other than a uniform value (wavelength:value lists, "
                                 ".spd files) is not supported yet (it needs the CIE 1931 observer)")
            if not np.isfinite(v):
                raise SceneError(f"{where}: expected a finite spectrum value, got {v!r}")
            return np.full(3, float(v)) * (EQUAL_ENERGY_SRGB if illuminant else 1.0)
        else:
            raise SceneError(f"{where}: {kind!r} values are not supported here (use rgb or a float)")
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise SceneError(f"{where}: expected an rgb triple or a float, got {value!r}") from None
    if arr.size == 1:
        arr = np.repeat(arr, 3)
    if arr.size != 3 or not np.all(np.isfinite(arr)):
        raise SceneError(f"{where}: expected an rgb triple or a float, got {value!r}")
    return arr


def parse_ior(value: Any, where: str) -> float:
    """An index of refraction: a positive float or one of Mitsuba's names
    (any case, as Mitsuba). Example: ``parse_ior("BK7", "glass.int_ior")`` -> 1.5046."""
    if isinstance(value, str):
        if value.lower() not in IOR:
            raise SceneError(f"{where}: unknown index of refraction {value!r} (known: {', '.join(sorted(IOR))})")
        return IOR[value.lower()]
    v = parse_float(value, where)
    if v <= 0:
        raise SceneError(f"{where}: an index of refraction must be positive, got {v}")
    return v


def parse_matrix(value: Any, where: str, name: str = "to_world") -> np.ndarray:
    """A 4x4 transform (a Transform, or anything array-like); None: identity.
    Example: ``parse_matrix(Transform().translate([1, 0, 0]), "box")[0, 3]`` -> 1.0."""
    if value is None:
        return np.eye(4)
    m = getattr(value, "matrix", value)
    try:
        m = np.array(m, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SceneError(f"{where}: {name} is not a 4x4 transform ({exc})") from None
    if m.shape != (4, 4) or not np.all(np.isfinite(m)):
        raise SceneError(f"{where}: {name} must be a finite 4x4 matrix, got shape {m.shape}")
    return m


def parse_floats(value: Any, where: str, n: int, broadcast: bool = False) -> np.ndarray:
    """Exactly ``n`` finite floats, as float64 (``broadcast``: one float is
    repeated ``n`` times)."""
    try:
        a = np.asarray(getattr(value, "matrix", value), dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        a = None
    if a is not None and broadcast and a.size == 1:
        a = np.repeat(a, n)
    if a is None or a.size != n or not np.all(np.isfinite(a)):
        raise SceneError(f"{where}: expected {n} finite floats, got {value!r}")
    return a


def parse_vector(value: Any, where: str, n: int = 3) -> np.ndarray:
    """A point or vector of ``n`` finite floats (one float is repeated)."""
    return parse_floats(value, where, n, broadcast=True)


def parse_uv_matrix(value: Any, where: str, name: str = "to_uv") -> np.ndarray:
    """The 2 x 3 affine part of a texture's ``to_uv``: a 3x3 matrix, or a
    4x4 one whose z row and column are ignored (as Mitsuba does); None:
    identity."""
    if value is None:
        return np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    m = getattr(value, "matrix", value)
    try:
        m = np.array(m, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SceneError(f"{where}: {name} is not a transform ({exc})") from None
    if m.shape == (4, 4):
        m = m[np.ix_([0, 1, 3], [0, 1, 3])]
    if m.shape != (3, 3) or not np.all(np.isfinite(m)):
        raise SceneError(f"{where}: {name} must be a finite 3x3 or 4x4 matrix, got shape {m.shape}")
    return m[:2]


# ---------------------------------------------------------------------------
# One plugin's properties
# ---------------------------------------------------------------------------
class Properties:
    """The properties of one plugin instance, read by its loader.

    ``values``: the plugin's dict (``"type"`` and ``"id"`` are not
    properties); ``key``: its key path in the scene (``"floor.bsdf"``);
    ``category``: Mitsuba's plugin category (``"bsdf"``, ``"film"``...).
    Getters take the property's name and its default (Mitsuba's), mark the
    name as read and raise :class:`SceneError` naming the key, the property
    and, for XML, the file and line, for a value of the wrong kind.

    Example::

        props = Properties(film_dict, "sensor.film", "film")
        width = props.int("width", 768)
        props.check_unread()
    """

    def __init__(self, values: Mapping, key: str, category: str):
        if not isinstance(values, Mapping):
            raise SceneError(f"{key}: expected a {category} plugin (a dict with a 'type'), got {values!r}")
        self.values = values
        self.key = key
        self.category = category
        self.plugin = values.get("type")
        self._read: set[str] = {"type", "id"}
        self._asked: set[str] = set()
        self._hints: dict[str, str] = {}

    # -- locations and messages -----------------------------------------------
    def where(self, name: str | None = None, label: str | None = None) -> str:
        """The dotted name of property ``name`` (or ``label``, e.g. a
        parameter key) for messages, without the file location."""
        if label is not None:
            return label
        return self.key if name is None else f"{self.key}.{name}"

    def error(self, message: str, name: str | None = None, label: str | None = None) -> SceneError:
        """A SceneError ``<file, line: ><where>: message`` about property
        ``name`` (None: the plugin itself)."""
        return scene_error(f"{self.where(name, label)}: {message}", location_of(self.values, name))

    def locate(self, exc: SceneError, name: str | None = None) -> SceneError:
        """``exc`` (raised about property ``name``) with the file and line
        of the property in front, when it comes from a file."""
        loc = location_of(self.values, name)
        if loc is None or str(exc).startswith(f"{loc}: "):
            return exc
        return scene_error(str(exc), loc)

    # -- raw access ---------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        """Whether the property is given (does not mark it read)."""
        self._asked.add(name)
        return name in self.values

    def get(self, name: str, default: Any = None) -> Any:
        """The raw value (``default`` if absent), marked read."""
        self.mark_read(name)
        return self.values.get(name, default)

    def mark_read(self, *names: str) -> None:
        """Mark properties read that the plugin accepts and Mitsuba ignores
        as well (e.g. hdrfilm's ``banner``)."""
        self._asked.update(names)
        self._read.update(names)

    def hint(self, name: str, text: str) -> None:
        """Explain, if ``name`` stays unread, why it is not read."""
        self._hints[name] = text

    # -- typed getters --------------------------------------------------------------
    def _value(self, parse, name: str, default: Any, label: str | None = None, *args) -> Any:
        """``parse(value, where, *args)`` of the property, or of ``default``
        when it is not given (``_MISSING``: required)."""
        self.mark_read(name)
        if name in self.values:
            try:
                return parse(self.values[name], self.where(name, label), *args)
            except SceneError as exc:
                raise self.locate(exc, name) from None
        if default is _MISSING:
            raise self.error(f"the {self.plugin} plugin needs the property {name!r}")
        return parse(default, self.where(name, label), *args)

    def float(self, name: str, default: Any = _MISSING, label: str | None = None) -> float:
        return self._value(parse_float, name, default, label)

    def scalar(self, name: str, default: Any, label: str | None = None) -> np.ndarray:
        """A float as a parameter value (a float64 array of shape ())."""
        return self._value(parse_scalar, name, default, label)

    def int(self, name: str, default: Any = _MISSING) -> int:
        return self._value(parse_int, name, default)

    def bool(self, name: str, default: Any = _MISSING) -> bool:
        return self._value(parse_bool, name, default)

    def string(self, name: str, default: Any = _MISSING, choices: Iterable[str] | None = None,
               lower: bool = False) -> str:
        return self._value(parse_string, name, default, None, choices, lower)

    def filename(self, name: str = "filename") -> str:
        """A file name (a string or an ``os.PathLike``); required."""
        return self._value(parse_filename, name, _MISSING)

    def rgb(self, name: str, default: Any, label: str | None = None, illuminant: bool = False) -> np.ndarray:
        """A colour (see :func:`parse_rgb`; ``illuminant``: an emitter's), as
        the variant being loaded stores it (``variants.encode_color``)."""
        def parse(v, where):
            return variants.encode_color(v, where, illuminant, lambda v, w: parse_rgb(v, w, illuminant))
        return self._value(parse, name, default, label)

    def ior(self, name: str, default: Any) -> float:
        return self._value(parse_ior, name, default)

    def vector(self, name: str, default: Any) -> np.ndarray:
        return self._value(parse_vector, name, default)

    def floats(self, name: str, default: Any, n: int) -> np.ndarray:
        return self._value(parse_floats, name, default, None, n)

    def transform(self, name: str = "to_world") -> np.ndarray:
        """A 4x4 matrix (identity if absent); messages name the plugin, as
        ``<key>: to_world must be ...``."""
        return self._value(lambda v, where: parse_matrix(v, self.key, name), name, None)

    def uv_transform(self, name: str = "to_uv") -> np.ndarray:
        """A texture's ``to_uv`` as its 2 x 3 affine part (see :func:`parse_uv_matrix`)."""
        return self._value(lambda v, where: parse_uv_matrix(v, self.key, name), name, None)

    # -- values jaxrender does not honour yet ------------------------------------------
    def only(self, name: str, accepted: Any, read, why: str | None = None) -> None:
        """Accept property ``name`` only with the value ``accepted`` (read
        with getter ``read``, e.g. ``Properties.float``); any other value is
        a "not supported yet" error."""
        if name not in self.values:
            self.mark_read(name)
            return
        value = read(self, name)
        if value != accepted:
            raise self.error(f"{why or f'{name} = {value!r}'} is not supported yet "
                             f"(only {accepted!r})", name)

    def unsupported(self, name: str, why: str) -> None:
        """Property ``name`` must not be given: jaxrender does not do ``why`` yet."""
        self.mark_read(name)
        if name in self.values:
            raise self.error(f"{why} is not supported yet", name)

    # -- nested plugins ---------------------------------------------------------------
    def plugins(self) -> list[tuple[str, Mapping]]:
        """The nested plugins (name, dict), in order. They are not marked
        read: a loader reads (:meth:`get`) those it handles, and the others
        are reported by :meth:`check_unread`, as in Mitsuba."""
        return [(k, v) for k, v in self.values.items() if k not in ("type", "id") and is_plugin(v)]

    # -- the check ------------------------------------------------------------------------
    def unread(self) -> list[str]:
        return [k for k in self.values if k not in self._read]

    def check_unread(self) -> None:
        """Raise for every property no reader touched (Mitsuba's
        "unreferenced property"), one line each."""
        names = self.unread()
        if not names:
            return
        lines = [self._unread_message(n) for n in names]
        first = location_of(self.values, names[0])
        raise SceneError("\n".join(lines), filename=first.filename if first else None,
                         line=first.line if first else None)

    def _unread_message(self, name: str) -> str:
        value = self.values[name]
        what = f" (a nested {value['type']} plugin)" if is_plugin(value) else ""
        if is_plugin(value) and value["type"] not in ALL_PLUGINS and "id" not in value:
            what = (f" (a nested {value['type']!r} plugin, a type Mitsuba does not know"
                    f"{did_you_mean(value['type'], ALL_PLUGINS)})")
        if name in self._hints:
            what += f" ({self._hints[name]})"
        else:
            close = difflib.get_close_matches(name, sorted(self._asked - {name}), n=1)
            if close:
                what += f" (did you mean {close[0]!r}?)"
        loc = location_of(self.values, name)
        prefix = f"{loc}: " if loc is not None else ""
        return f'{prefix}{self.plugin} plugin "{self.key}": unreferenced property "{name}"{what}'
