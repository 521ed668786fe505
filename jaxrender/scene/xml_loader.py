"""Mitsuba 3 XML scene files -> ``mitsuba.load_dict``-style dictionaries.

``parse_xml(source, **overrides)`` reads a ``<scene version="3.0.0">`` file (or
an XML string) and returns the nested dictionary that ``mitsuba.load_dict``
would accept for the same scene.  No plugin is instantiated here: the dict is
handed to the scene builder.

Conventions of the returned dictionary
--------------------------------------
* A plugin element (``<bsdf type="diffuse" id="white">``) becomes
  ``{"type": "diffuse", ...properties}``.  Its key in the parent is, in this
  order: its ``name`` attribute, its ``id``, or an automatic name: the element
  tag (``"bsdf"``, ``"shape"``, ``"film"``, ...), then ``"<tag>_1"``,
  ``"<tag>_2"``, ... on collisions.  ``"id": ...`` is stored in the entry only
  when the key differs from the id.  Document order is preserved.
* The root ``<scene>`` gives ``{"type": "scene", ...}``; a root plugin element
  (``<bsdf version=".." type="diffuse"/>``) gives that plugin's dict.
* ``<float>`` -> ``float`` (``inf`` allowed, ``nan`` rejected), ``<integer>`` ->
  ``int``, ``<boolean>`` -> ``bool`` (``true``/``false``, any case),
  ``<string>`` -> ``str``.
* ``<rgb value="r, g, b"/>`` or ``value="v"`` -> ``{"type": "rgb", "value": [r, g, b]}``
  (a single value is broadcast to three floats).
* ``<spectrum value="0.5"/>`` -> ``{"type": "spectrum", "value": 0.5}``;
  ``value="400:0.1, 500:0.2"`` -> ``{"type": "spectrum", "value": [(400.0, 0.1), (500.0, 0.2)]}``;
  ``filename="x.spd"`` -> ``{"type": "spectrum", "filename": "/abs/x.spd"}``.
  ``<spectrum type="blackbody">`` (with a ``type``) is a plugin, as in Mitsuba.
* ``<point>`` / ``<vector>`` -> a list of three floats.
* ``<transform name="to_world">`` -> :class:`~jaxrender.scene.transform.Transform`;
  child elements apply in document order (each left-multiplies).
* ``<ref id="white" name=".."/>`` -> ``{"type": "ref", "id": "white"}``, keyed
  by ``name`` or, without one, by the referenced element's tag (``"bsdf"``).
  Unknown ids, aliases (``<alias id="a" as="b"/>``, resolved to ``"a"``) and
  reference cycles are checked here.
* File names: a ``<string>`` whose name is ``filename`` or ends in
  ``_filename`` and a spectrum's ``filename`` are made absolute: relative to
  the folder of the XML file that contains them (then folders added with
  ``<path value=".."/>``); for XML given as a string, relative to the current
  directory.  ``<include filename=".."/>`` works the same way.
* ``<default name="spp" value="64"/>`` defines ``$spp`` for every later
  attribute unless a keyword override ``spp=...`` was given (the first
  definition wins, as in Mitsuba).  An override that no ``$name`` uses is an
  error, as is a ``$name`` that is not defined (``mitsuba.load_file`` semantics).
* Files with a version below 2.0.0 get Mitsuba's upgrade: camelCase property
  names become snake_case (``intIOR`` -> ``int_ior``).

Every problem raises :class:`~jaxrender.scene.errors.SceneError` naming the
file, the line and column, the element and what is wrong.

Each plugin's dict is a :class:`~jaxrender.scene.properties.PluginDict`
(equal to the plain dict) that also records the file and line of the
plugin and of each of its entries, so that the scene loader's errors
(e.g. an unreferenced property) name them.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any
from xml.parsers import expat

import numpy as np

from .errors import SceneError
from .properties import Location, PluginDict
from .transform import Transform, _coordinate_system

__all__ = ["PLUGIN_TAGS", "SceneError", "parse_xml"]

PLUGIN_TAGS = frozenset({
    "scene", "shape", "bsdf", "emitter", "sensor", "film", "sampler", "rfilter",
    "integrator", "texture", "medium", "phase", "volume", "spectrum",
})
_PROPERTY_TAGS = frozenset({
    "float", "integer", "boolean", "string", "rgb", "spectrum", "point", "vector", "transform",
})
_TRANSFORM_OPS = frozenset({"translate", "rotate", "scale", "matrix", "lookat"})

_MAX_INCLUDE_DEPTH = 15
_MAX_NESTING = 256
_INT64 = 2 ** 63

_FLOAT_RE = re.compile(r"^\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)\s*$",
                       re.IGNORECASE)
_INT_RE = re.compile(r"^\s*-?\d+\s*$")
_VERSION_RE = re.compile(r"^\s*(\d+)\.(\d+)\.(\d+)\s*$")
_SPLIT_RE = re.compile(r"[,\s]+")
_PARAM_RUN_RE = re.compile(r"[A-Za-z0-9_]*")
_CAMEL_RE = re.compile(r"(?<=[a-z])([A-Z])")


# --------------------------------------------------------------------------
# Raw XML with locations
# --------------------------------------------------------------------------
@dataclass
class _Source:
    name: str          # file path or "<string>", for messages
    base_dir: str      # folder that relative file names are resolved against
    version: tuple[int, int, int] = (3, 0, 0)


@dataclass
class _El:
    tag: str
    attrs: dict
    line: int
    col: int
    src: _Source
    children: list = field(default_factory=list)


def _describe(el: _El) -> str:
    parts = [el.tag]
    for k in ("type", "name", "id"):
        v = el.attrs.get(k)
        if v is not None:
            v = v if len(v) <= 40 else v[:37] + "..."
            parts.append(f'{k}="{v}"')
    return "<" + " ".join(parts) + ">"


def _err(el: _El, msg: str) -> SceneError:
    desc = _describe(el)
    return SceneError(f"{el.src.name}, line {el.line}, column {el.col}: {desc}: {msg}",
                      filename=el.src.name, line=el.line, element=desc)


def _read_xml(data: bytes | str, src: _Source) -> _El:
    """Parse XML text into an ``_El`` tree (expat, with line numbers)."""
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeError as exc:
            raise SceneError(f"{src.name}: the XML text is not valid Unicode ({exc.reason})",
                             filename=src.name) from None
        parser = expat.ParserCreate(encoding="utf-8")
    else:
        parser = expat.ParserCreate()
    stack: list[_El] = []
    roots: list[_El] = []

    def start(tag, attrs):
        if len(stack) >= _MAX_NESTING:
            raise SceneError(f"{src.name}, line {parser.CurrentLineNumber}: elements nested more than "
                             f"{_MAX_NESTING} levels deep", filename=src.name, line=parser.CurrentLineNumber)
        el = _El(tag, dict(attrs), parser.CurrentLineNumber, parser.CurrentColumnNumber + 1, src)
        (stack[-1].children if stack else roots).append(el)
        stack.append(el)

    def end(tag):
        stack.pop()

    def entity_decl(*args):
        raise SceneError(f"{src.name}, line {parser.CurrentLineNumber}: entity declarations are not "
                         f"allowed in scene files", filename=src.name, line=parser.CurrentLineNumber)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.EntityDeclHandler = entity_decl
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise SceneError(f"{src.name}, line {exc.lineno}, column {exc.offset + 1}: malformed XML: "
                         f"{expat.ErrorString(exc.code)}", filename=src.name, line=exc.lineno) from None
    except (LookupError, UnicodeError) as exc:  # e.g. <?xml encoding="no-such-codec"?>
        raise SceneError(f"{src.name}: cannot decode the XML text ({exc})", filename=src.name) from None
    except RecursionError:  # pragma: no cover - guarded by _MAX_NESTING
        raise SceneError(f"{src.name}: elements nested too deeply", filename=src.name) from None
    if not roots:
        raise SceneError(f"{src.name}: no root element", filename=src.name)
    return roots[0]


# --------------------------------------------------------------------------
# Intermediate objects
# --------------------------------------------------------------------------
@dataclass
class _Ref:
    id: str
    el: _El


@dataclass
class _Obj:
    tag: str
    type: str
    id: str | None
    el: _El
    entries: list = field(default_factory=list)  # (name | None, value, element)
    names: dict = field(default_factory=dict)     # property name -> element


# --------------------------------------------------------------------------
# Scalar parsing helpers
# --------------------------------------------------------------------------
def _float(s: str, el: _El, what: str = "floating point value", finite: bool = False) -> float:
    if not _FLOAT_RE.match(s):
        raise _err(el, f'could not parse {what} "{s}"')
    v = float(s)
    if math.isnan(v) or (finite and math.isinf(v)):
        raise _err(el, f'{what} "{s}" is not a finite number')
    return v


def _floats(s: str, el: _El, what: str, finite: bool = True) -> list[float]:
    toks = [t for t in _SPLIT_RE.split(s) if t]
    return [_float(t, el, what, finite=finite) for t in toks]


def _int(s: str, el: _El) -> int:
    if not _INT_RE.match(s):
        raise _err(el, f'could not parse integer value "{s}"')
    v = int(s)
    if not -_INT64 <= v < _INT64:
        raise _err(el, f'integer value "{s}" is out of range')
    return v


def _bool(s: str, el: _El) -> bool:
    t = s.strip().lower()
    if t == "true":
        return True
    if t == "false":
        return False
    raise _err(el, f'could not parse boolean value "{s}" -- must be "true" or "false"')


def _check_attrs(el: _El, attrs: dict, required: tuple = (), optional: tuple = ()) -> None:
    allowed = set(required) | set(optional)
    for k in attrs:
        if k not in allowed:
            raise _err(el, f'unexpected attribute "{k}" in element <{el.tag}>')
    for k in required:
        if k not in attrs:
            raise _err(el, f'missing required attribute "{k}" in <{el.tag}>')


def _no_children(el: _El) -> None:
    if el.children:
        c = el.children[0]
        raise _err(c, f"<{c.tag}> element cannot occur as child of <{el.tag}>")


# --------------------------------------------------------------------------
# The loader
# --------------------------------------------------------------------------
class _Loader:
    def __init__(self, overrides: dict[str, str]):
        self.params: dict[str, str] = dict(overrides)
        self.overrides = dict(overrides)
        self.used: set[str] = set()
        self.ids: dict[str, _Obj] = {}
        self.aliases: dict[str, tuple[str, _El]] = {}
        self.refs: list[_Ref] = []
        self.search_paths: list[str] = []

    # -- parameters ---------------------------------------------------------
    def _subst_value(self, s: str, el: _El) -> str:
        if "$" not in s:
            return s
        out = []
        i = 0
        while True:
            j = s.find("$", i)
            if j < 0:
                out.append(s[i:])
                break
            out.append(s[i:j])
            run = _PARAM_RUN_RE.match(s, j + 1).group()
            best = None
            for k in range(len(run), 0, -1):
                if run[:k] in self.params:
                    best = run[:k]
                    break
            if best is None:
                raise _err(el, f"undefined parameter: ${run}")
            self.used.add(best)
            out.append(self.params[best])
            i = j + 1 + len(best)
        return "".join(out)

    def _attrs(self, el: _El) -> dict:
        attrs = {k: self._subst_value(v, el) for k, v in el.attrs.items()}
        if el.src.version < (2, 0, 0) and "name" in attrs:
            attrs["name"] = _CAMEL_RE.sub(r"_\1", attrs["name"]).lower()
        return attrs

    # -- files ---------------------------------------------------------------
    def _resolve(self, value: str, src: _Source) -> str:
        if os.path.isabs(value):
            return os.path.normpath(value)
        candidates = [src.base_dir] + self.search_paths
        for d in candidates:
            p = os.path.normpath(os.path.join(d, value))
            if os.path.exists(p):
                return p
        return os.path.normpath(os.path.join(src.base_dir, value))

    def read_file(self, path: str, el: _El | None = None) -> _El:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            msg = f"cannot read scene file: {exc.strerror or exc}"
            if el is not None:
                raise _err(el, f'{msg} ("{path}")') from None
            raise SceneError(f"{path}: {msg}", filename=path) from None
        src = _Source(path, os.path.dirname(os.path.abspath(path)))
        return _read_xml(data, src)

    # -- root ----------------------------------------------------------------
    def root(self, root: _El) -> _Obj:
        self._check_version(root)
        attrs = self._attrs(root)
        attrs.pop("version", None)
        if root.tag == "scene":
            _check_attrs(root, attrs, (), ("id", "type"))
            obj = _Obj("scene", "scene", None, root)
            if attrs.get("type", "scene") != "scene":
                raise _err(root, f'<scene> cannot have type "{attrs["type"]}"')
            if attrs.get("id"):
                obj.id = attrs["id"]
                self.ids[obj.id] = obj
            self._children(obj, root.children, depth=0)
            return obj
        if root.tag in PLUGIN_TAGS:
            return self._plugin(root, attrs, depth=0)
        raise _err(root, f"the root element must be <scene> (or a plugin element), not <{root.tag}>")

    def _check_version(self, root: _El) -> None:
        v = root.attrs.get("version")
        if v is None:
            raise _err(root, f"missing version attribute in root element <{root.tag}> "
                             f'(expected e.g. version="3.0.0")')
        m = _VERSION_RE.match(self._subst_value(v, root))
        if not m:
            raise _err(root, f'invalid version number "{v}" (expected "major.minor.patch", e.g. "3.0.0")')
        ver = tuple(int(x) for x in m.groups())
        if ver[0] > 3:
            raise _err(root, f'unsupported scene version "{v}": this loader understands Mitsuba scene '
                             f"files up to version 3.x")
        root.src.version = ver

    # -- children of a plugin ----------------------------------------------
    def _children(self, obj: _Obj, children: list[_El], depth: int) -> None:
        for el in children:
            tag = el.tag
            if tag == "lookAt" and el.src.version < (2, 0, 0):
                tag = el.tag = "lookat"
            attrs = self._attrs(el)
            if tag == "default":
                _check_attrs(el, attrs, ("name", "value"))
                _no_children(el)
                if not attrs["name"]:
                    raise _err(el, "empty parameter name")
                self.params.setdefault(attrs["name"], attrs["value"])
            elif tag == "include":
                _check_attrs(el, attrs, ("filename",))
                _no_children(el)
                self._include(obj, el, attrs["filename"], depth)
            elif tag == "alias":
                _check_attrs(el, attrs, ("id", "as"))
                _no_children(el)
                new = attrs["as"]
                if not new:
                    raise _err(el, "empty alias")
                self._register_id(new, el, alias_of=attrs["id"])
            elif tag == "path":
                _check_attrs(el, attrs, ("value",))
                _no_children(el)
                self.search_paths.append(os.path.normpath(os.path.join(el.src.base_dir, attrs["value"])))
            elif tag == "ref":
                _check_attrs(el, attrs, ("id",), ("name",))
                _no_children(el)
                if not attrs["id"]:
                    raise _err(el, "empty id in <ref>")
                ref = _Ref(attrs["id"], el)
                self.refs.append(ref)
                self._add(obj, attrs.get("name"), ref, el)
            elif tag == "spectrum" and "type" in attrs:
                self._add(obj, attrs.get("name"), self._plugin(el, attrs, depth), el)
            elif tag in _PROPERTY_TAGS:
                _check_attrs(el, attrs, ("name",), ("value", "x", "y", "z", "filename"))
                if tag != "transform":
                    _no_children(el)
                name = attrs["name"]
                if not name:
                    raise _err(el, "empty property name")
                self._add(obj, name, self._property(el, tag, attrs), el)
            elif tag == "scene":
                raise _err(el, "<scene> may only be the root element of a file")
            elif tag in PLUGIN_TAGS:
                self._add(obj, attrs.get("name"), self._plugin(el, attrs, depth), el)
            elif tag in _TRANSFORM_OPS:
                raise _err(el, f"<{tag}> may only occur inside <transform>")
            else:
                raise _err(el, f"encountered an unsupported XML element: <{tag}>")

    def _add(self, obj: _Obj, name: str | None, value: Any, el: _El) -> None:
        if name is not None:
            if name == "":
                raise _err(el, "empty name attribute")
            if name == "type" or name == "id":
                raise _err(el, f'"{name}" is reserved and cannot be used as a property name')
            prev = obj.names.get(name)
            if prev is not None:
                raise _err(el, f'property "{name}" was specified multiple times '
                               f"(first at {prev.src.name}, line {prev.line})")
            obj.names[name] = el
        obj.entries.append((name, value, el))

    def _register_id(self, ident: str, el: _El, obj: _Obj | None = None, alias_of: str | None = None):
        prev = self.ids.get(ident)
        prev_el = prev.el if prev is not None else self.aliases.get(ident, (None, None))[1]
        if prev_el is not None:
            raise _err(el, f'duplicate ID: "{ident}" (previous was at {prev_el.src.name}, '
                           f"line {prev_el.line})")
        if obj is not None:
            self.ids[ident] = obj
        else:
            self.aliases[ident] = (alias_of, el)

    def _plugin(self, el: _El, attrs: dict, depth: int) -> _Obj:
        _check_attrs(el, attrs, ("type",), ("id", "name"))
        if not attrs["type"]:
            raise _err(el, "empty plugin type")
        obj = _Obj(el.tag, attrs["type"], attrs.get("id") or None, el)
        if "id" in attrs and not attrs["id"]:
            obj.id = None
        if obj.id is not None:
            self._register_id(obj.id, el, obj=obj)
        self._children(obj, el.children, depth)
        return obj

    def _include(self, obj: _Obj, el: _El, filename: str, depth: int) -> None:
        if depth + 1 > _MAX_INCLUDE_DEPTH:
            raise _err(el, f"includes nested more than {_MAX_INCLUDE_DEPTH} levels deep "
                           f"(recursive include?)")
        path = self._resolve(filename, el.src)
        if not os.path.isfile(path):
            raise _err(el, f'included file "{filename}" not found (looked for "{path}")')
        root = self.read_file(path, el)
        self._check_version(root)
        if root.tag != "scene":
            raise _err(root, f"an included file must have a <scene> root element, not <{root.tag}>")
        attrs = self._attrs(root)
        attrs.pop("version", None)
        _check_attrs(root, attrs, (), ())
        self._children(obj, root.children, depth + 1)

    # -- properties ------------------------------------------------------------
    def _property(self, el: _El, tag: str, attrs: dict) -> Any:
        def only(*allowed):
            extra = [k for k in attrs if k != "name" and k not in allowed]
            if extra:
                raise _err(el, f'unexpected attribute "{extra[0]}" in element <{tag}>')

        def need(key):
            if key not in attrs:
                raise _err(el, f'missing required attribute "{key}" in <{tag}>')
            return attrs[key]

        if tag == "float":
            only("value")
            return _float(need("value"), el)
        if tag == "integer":
            only("value")
            return _int(need("value"), el)
        if tag == "boolean":
            only("value")
            return _bool(need("value"), el)
        if tag == "string":
            only("value")
            value = need("value")
            name = attrs["name"]
            if (name == "filename" or name.endswith("_filename")) and value:
                value = self._resolve(value, el.src)
            return value
        if tag == "rgb":
            only("value")
            s = need("value")
            toks = [t for t in _SPLIT_RE.split(s) if t]
            if len(toks) not in (1, 3) or not all(_FLOAT_RE.match(t) for t in toks):
                raise _err(el, f'could not parse RGB value "{s}"')
            vals = [_float(t, el, "RGB value", finite=True) for t in toks]
            if len(vals) == 1:
                vals = vals * 3
            return {"type": "rgb", "value": vals}
        if tag == "spectrum":
            only("value", "filename")
            if ("value" in attrs) == ("filename" in attrs):
                raise _err(el, '<spectrum> element requires either "value" or "filename" attribute '
                               "(but not both)")
            if "filename" in attrs:
                if not attrs["filename"]:
                    raise _err(el, "empty spectrum filename")
                return {"type": "spectrum", "filename": self._resolve(attrs["filename"], el.src)}
            s = attrs["value"]
            toks = [t for t in _SPLIT_RE.split(s) if t]
            if len(toks) == 1 and ":" not in toks[0]:
                return {"type": "spectrum", "value": _float(toks[0], el, "spectrum value", finite=True)}
            pairs = []
            for t in toks:
                parts = t.split(":")
                if len(parts) != 2:
                    raise _err(el, f'invalid spectrum value "{t}" (expected wavelength:value pairs)')
                pairs.append((_float(parts[0], el, "wavelength", finite=True),
                              _float(parts[1], el, "spectrum value", finite=True)))
            if not pairs:
                raise _err(el, f'empty spectrum value "{s}"')
            return {"type": "spectrum", "value": pairs}
        if tag in ("point", "vector"):
            only("value", "x", "y", "z")
            return self._xyz(el, attrs, default=None)
        if tag == "transform":
            only()
            return self._transform(el)
        raise _err(el, f"unsupported property element <{tag}>")  # pragma: no cover

    def _xyz(self, el: _El, attrs: dict, default: float | None) -> list[float]:
        has_xyz = any(k in attrs for k in ("x", "y", "z"))
        if "value" in attrs:
            if has_xyz:
                raise _err(el, 'cannot mix "value" and "x"/"y"/"z" attributes')
            vals = _floats(attrs["value"], el, "floating point value")
            if len(vals) == 1:
                vals = vals * 3
            if len(vals) != 3:
                raise _err(el, f'"value" attribute must have exactly 1 or 3 elements, got {len(vals)}')
            return vals
        out = []
        for k in ("x", "y", "z"):
            if k in attrs:
                out.append(_float(attrs[k], el, "floating point value", finite=True))
            elif default is None:
                raise _err(el, f'missing required attribute "{k}" in <{el.tag}>')
            else:
                out.append(default)
        return out

    def _transform(self, el: _El) -> Transform:
        with np.errstate(all="ignore"):  # overflow shows up as a non-finite matrix below
            return self._transform_ops(el)

    def _transform_ops(self, el: _El) -> Transform:
        t = Transform()
        for op in el.children:
            attrs = self._attrs(op)
            _no_children(op)
            tag = op.tag
            if tag == "lookAt" and op.src.version < (2, 0, 0):
                tag = "lookat"
            if tag == "translate":
                _check_attrs(op, attrs, (), ("x", "y", "z", "value"))
                step = Transform.translate(self._xyz(op, attrs, 0.0))
            elif tag == "scale":
                _check_attrs(op, attrs, (), ("x", "y", "z", "value"))
                step = Transform.scale(self._xyz(op, attrs, 1.0))
            elif tag == "rotate":
                _check_attrs(op, attrs, ("angle",), ("x", "y", "z", "value"))
                axis = self._xyz(op, {k: v for k, v in attrs.items() if k != "angle"}, 0.0)
                angle = _float(attrs["angle"], op, "angle", finite=True)
                if not any(axis):
                    raise _err(op, "rotation axis cannot be zero")
                step = Transform.rotate(axis, angle)
            elif tag == "matrix":
                _check_attrs(op, attrs, ("value",))
                vals = _floats(attrs["value"], op, "matrix entry")
                if len(vals) not in (9, 16):
                    raise _err(op, f"matrix must have 9 or 16 values, got {len(vals)}")
                step = Transform(vals)
            elif tag == "lookat":
                _check_attrs(op, attrs, ("origin", "target"), ("up",))
                vecs = {}
                for k in ("origin", "target", "up"):
                    if k in attrs:
                        v = _floats(attrs[k], op, "floating point value")
                        if len(v) != 3:
                            raise _err(op, f'expected 3 values in "{k}", got {len(v)}')
                        vecs[k] = np.array(v)
                d = vecs["target"] - vecs["origin"]
                up = vecs.get("up")
                if not np.any(d):
                    raise _err(op, "invalid lookat transformation: target coincides with origin")
                if up is None or not np.any(up):
                    up = _coordinate_system(d / np.linalg.norm(d))[0]
                try:
                    step = Transform.look_at(vecs["origin"], vecs["target"], up)
                except ValueError:
                    raise _err(op, "invalid lookat transformation: 'up' is parallel to the "
                                   "viewing direction") from None
            else:
                raise _err(op, f"unexpected <{op.tag}> element inside <transform>")
            t = step @ t
        if not np.all(np.isfinite(t.matrix)):
            raise _err(el, "transform is not finite")
        return t

    # -- checks and output ------------------------------------------------------
    def _target(self, ident: str) -> str | None:
        seen = set()
        while ident in self.aliases and ident not in seen:
            seen.add(ident)
            ident = self.aliases[ident][0]
        return ident if ident in self.ids else None

    def finish(self, root: _Obj) -> dict:
        unused = [k for k in self.overrides if k not in self.used]
        if unused:
            lst = ", ".join(f"${k}={self.overrides[k]}" for k in unused)
            raise SceneError(f"{root.el.src.name}: unused parameter(s) {lst}: the scene has no "
                             f"matching $name reference", filename=root.el.src.name)
        for ident, (target, el) in self.aliases.items():
            if self._target(ident) is None:
                raise _err(el, f'<alias> refers to an unknown id "{target}"')
        for ref in self.refs:
            if self._target(ref.id) is None:
                raise _err(ref.el, f'reference to an unknown id "{ref.id}"')
        self._check_cycles(root)
        return self._to_dict(root, None)

    def _check_cycles(self, root: _Obj) -> None:
        deps: dict[str, list[_Ref]] = {}

        def walk(obj: _Obj, owners: list[str]):
            owners = owners + [obj.id] if obj.id is not None else owners
            for _, value, _ in obj.entries:
                if isinstance(value, _Obj):
                    walk(value, owners)
                elif isinstance(value, _Ref):
                    for o in owners:
                        deps.setdefault(o, []).append(value)

        walk(root, [])
        state: dict[str, int] = {}
        for start in deps:
            if state.get(start):
                continue
            stack = [(start, iter(deps.get(start, ())))]
            state[start] = 1
            while stack:
                node, it = stack[-1]
                ref = next(it, None)
                if ref is None:
                    state[node] = 2
                    stack.pop()
                    continue
                tgt = self._target(ref.id)
                st = state.get(tgt, 0)
                if st == 1:
                    raise _err(ref.el, f'reference cycle: "{ref.id}" (directly or indirectly) '
                                       f"contains a reference to itself")
                if st == 0:
                    state[tgt] = 1
                    stack.append((tgt, iter(deps.get(tgt, ()))))

    def _to_dict(self, obj: _Obj, key: str | None) -> PluginDict:
        d = PluginDict({"type": obj.type}, _location(obj.el))
        if obj.id is not None and obj.id != key:
            d["id"] = obj.id
        keys: list[str | None] = []
        used = set(d)
        for name, value, el in obj.entries:
            k = name
            if k is None and isinstance(value, _Obj) and value.id is not None:
                k = value.id
            if k is not None:
                if k in used:
                    raise _err(el, f'key "{k}" is used twice inside {_describe(obj.el)} '
                                   f"(a name and an id collide)")
                used.add(k)
            keys.append(k)
        for i, (name, value, el) in enumerate(obj.entries):
            if keys[i] is not None:
                continue
            if isinstance(value, _Ref):
                base = self.ids[self._target(value.id)].tag
            else:
                base = value.tag
            k, n = base, 0
            while k in used:
                n += 1
                k = f"{base}_{n}"
            used.add(k)
            keys[i] = k
        for k, (name, value, el) in zip(keys, obj.entries):
            d.locations[k] = _location(el)
            if isinstance(value, _Obj):
                d[k] = self._to_dict(value, k)
            elif isinstance(value, _Ref):
                d[k] = {"type": "ref", "id": self._target(value.id)}
            else:
                d[k] = value
        return d


def _location(el: _El) -> Location:
    return Location(el.src.name, el.line)


def _override_str(k: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    return str(v)


def parse_xml(source: str | bytes | os.PathLike, /, **overrides: Any) -> dict:
    """Parse a Mitsuba 3 XML scene into a ``mitsuba.load_dict``-style dict.

    ``source`` is a path (``str`` or ``os.PathLike``), or the XML itself (a
    ``str`` starting with ``<``, or ``bytes``).  Keyword arguments override
    ``<default>`` values exactly as in ``mitsuba.load_file(path, spp=64)``.
    Raises :class:`SceneError` for anything invalid.

    Example::

        d = parse_xml('<scene version="3.0.0"><bsdf type="diffuse" id="w"/></scene>')
        d == {"type": "scene", "w": {"type": "diffuse"}}      # True
    """
    for k in overrides:
        if not k or not _PARAM_RUN_RE.fullmatch(k):
            raise SceneError(f"invalid parameter name {k!r}")
    loader = _Loader({k: _override_str(k, v) for k, v in overrides.items()})
    if isinstance(source, (bytes, bytearray, memoryview)):
        root = _read_xml(bytes(source), _Source("<string>", os.getcwd()))
    elif isinstance(source, str) and source.lstrip().startswith("<"):
        root = _read_xml(source, _Source("<string>", os.getcwd()))
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not os.path.isfile(path):
            what = "is a directory, not a scene file" if os.path.isdir(path) else "scene file not found"
            raise SceneError(f"{path}: {what}", filename=path)
        root = loader.read_file(path)
    else:
        raise TypeError(f"parse_xml expects a path or XML text, got {type(source).__name__}")
    return loader.finish(loader.root(root))
