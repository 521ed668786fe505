"""Triangle mesh files: Wavefront OBJ, Stanford PLY and Mitsuba's serialized.

``load_obj(path)`` and ``load_ply(path)`` return a :class:`MeshData`
(``vertices`` (V, 3) float32, ``faces`` (F, 3) int32, ``normals`` (V, 3)
float32 or None, ``uvs`` (V, 2) float32 or None).  Polygons are triangulated
as fans ``(0, i, i + 1)``.  Parsing is vectorized with numpy; a binary PLY is
read with ``np.frombuffer``.

What matches Mitsuba 3 (checked against its ``obj``/``ply`` plugins):

* OBJ: one output vertex per distinct ``(position, uv, normal)`` index
  triple, in order of first use by a face; positions no face uses are
  dropped.  ``vt`` rows are flipped (``v -> 1 - v``) by default like the obj
  plugin's ``flip_tex_coords=true`` -- pass ``flip_tex_coords=False`` for the
  raw values.  Negative (relative) indices are supported (Mitsuba rejects them).
  If some face corners carry a normal and others do not, ``normals`` is None
  (the mesh builder recomputes them); corners without a ``vt`` get uv (0, 0).
* PLY: vertices are used as stored (no splitting, no uv flip); faces are read
  from the ``vertex_indices`` (or ``vertex_index``) list of the ``face``
  element, with any integer count/index types; polygons with more than three
  vertices are fan-triangulated (Mitsuba accepts only triangles).

Every problem -- a missing file, a truncated or garbled body, an unknown
format, an out-of-range index, NaN/inf values -- raises
:class:`~jaxrender.scene.errors.SceneError` naming the file and the problem.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

import numpy as np

from .errors import SceneError

__all__ = ["MeshData", "load_mesh", "load_obj", "load_ply", "load_serialized"]


@dataclass
class MeshData:
    vertices: np.ndarray            # (V, 3) float32
    faces: np.ndarray               # (F, 3) int32
    normals: np.ndarray | None = None  # (V, 3) float32
    uvs: np.ndarray | None = None      # (V, 2) float32

    @property
    def vertex_count(self) -> int:
        return int(self.vertices.shape[0])

    @property
    def face_count(self) -> int:
        return int(self.faces.shape[0])


def load_mesh(path: str | os.PathLike, **kwargs) -> MeshData:
    """Dispatch on the file extension (``.obj`` or ``.ply``)."""
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext == ".obj":
        return load_obj(p, **kwargs)
    if ext == ".ply":
        return load_ply(p, **kwargs)
    raise SceneError(f"{p}: unknown mesh format {ext!r} (expected .obj or .ply)")


# --------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------
def _read_bytes(path: str | os.PathLike) -> tuple[str, bytes]:
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not os.path.exists(p):
        raise SceneError(f"{p}: mesh file not found")
    if os.path.isdir(p):
        raise SceneError(f"{p}: is a directory, not a mesh file")
    try:
        with open(p, "rb") as f:
            return p, f.read()
    except OSError as exc:
        raise SceneError(f"{p}: cannot read mesh file ({exc.strerror or exc})") from None


def _fan(counts: np.ndarray) -> np.ndarray:
    """Corner indices (T, 3) of the fan triangulation of polygons with ``counts`` corners."""
    counts = counts.astype(np.int64)
    offsets = np.cumsum(counts) - counts
    ntri = counts - 2
    total = int(ntri.sum())
    if total == 0:
        return np.zeros((0, 3), np.int64)
    if np.all(counts == 3):
        return offsets[:, None] + np.arange(3)
    face = np.repeat(np.arange(len(counts)), ntri)
    first_tri = np.cumsum(ntri) - ntri
    i = np.arange(total) - first_tri[face] + 1
    a = offsets[face]
    return np.stack([a, a + i, a + i + 1], axis=1)


def _finite(path: str, name: str, a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # too large for float32 -> inf, caught below
        out = a.astype(np.float32)
    if not np.all(np.isfinite(out)):
        bad = np.argwhere(~np.isfinite(out))[0]
        raise SceneError(f"{path}: {name} contain NaN or infinite values (first at row {bad[0]}: "
                         f"{a[bad[0]].tolist()})")
    return out


def _check_faces(path: str, faces: np.ndarray, nverts: int) -> np.ndarray:
    if faces.size:
        lo, hi = int(faces.min()), int(faces.max())
        if lo < 0 or hi >= nverts:
            bad = lo if lo < 0 else hi
            raise SceneError(f"{path}: face index {bad} is out of range (the mesh has {nverts} vertices)")
    if nverts > np.iinfo(np.int32).max:
        raise SceneError(f"{path}: too many vertices ({nverts}) for int32 face indices")
    return faces.astype(np.int32).reshape(-1, 3)


# --------------------------------------------------------------------------
# OBJ
# --------------------------------------------------------------------------
def _numbers(path: str, joined: str, dtype, what: str, where) -> np.ndarray:
    """Parse whitespace-separated numbers with numpy's C parser; on failure name the bad row."""
    try:
        return np.fromstring(joined, dtype=dtype, sep=" ") if joined.strip() else np.zeros(0, dtype)
    except ValueError:
        conv = float if dtype is np.float64 else int
        for i, row in enumerate(joined.split("\n")):
            for tok in row.split():
                try:
                    conv(tok)
                except ValueError:
                    raise SceneError(f"{path}, line {where(i)}: could not parse {what} {tok[:40]!r}") from None
        raise SceneError(f"{path}: could not parse {what}") from None


def _token_counts(rows_text: str, nrows: int, slashes: bool = False):
    """Whitespace-separated tokens per line of ``rows_text`` (and '/' per token), vectorized."""
    b = np.frombuffer(rows_text.encode("latin-1"), np.uint8)
    if b.size == 0:
        return np.zeros(nrows, np.int64), np.zeros(0, np.int64)
    ws = b <= 32
    starts = ~ws
    starts[1:] &= ws[:-1]
    start_pos = np.flatnonzero(starts)
    newline_pos = np.flatnonzero(b == 10)
    counts = np.bincount(np.searchsorted(newline_pos, start_pos), minlength=nrows)
    if not slashes:
        return counts, None
    slash_tok = np.searchsorted(start_pos, np.flatnonzero(b == 47), side="right") - 1
    return counts, np.bincount(slash_tok, minlength=start_pos.size)


_OBJ_WS = {i: " " for i in list(range(33)) + [0x85, 0xA0]}
_OBJ_WS[10] = "\n"
_OBJ_WS[13] = "\n"


class _ObjText:
    """An OBJ file split into statement rows (``v``, ``vt``, ``vn``, ``f``)."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        # Every whitespace/control character becomes ' ' (CR becomes a line break), so that
        # str.split(), the regexes and the byte-level token counts all agree.
        self.norm = text.replace("\r\n", "\n").translate(_OBJ_WS)
        x = "\n" + self.norm
        if "\n " in x:
            x = re.sub(r"\n +", "\n", x)
        # A literal prefix lets ``re`` scan at C speed.
        self.rows = {k: re.findall("\n" + k + " ([^\n]*)", x) for k in ("v", "vt", "vn", "f")}

    @property
    def lines(self) -> list[str]:
        return [ln.lstrip(" ") for ln in self.norm.split("\n")]

    def line_of(self, kind: str, i: int) -> int:
        """1-based line number of the i-th ``kind`` row (for error messages)."""
        pre = kind + " "
        j = -1
        for ln_no, ln in enumerate(self.lines, 1):
            if ln.startswith(pre):
                j += 1
                if j == i:
                    return ln_no
        return 0

    def vectors(self, kind: str, width: int, min_width: int, what: str) -> np.ndarray:
        rows = self.rows[kind]
        if not rows:
            return np.zeros((0, width))
        joined = "\n".join(rows)
        counts, _ = _token_counts(joined, len(rows))
        where = lambda i: self.line_of(kind, i)
        if counts.min() < min_width:
            i = int(np.argmax(counts < min_width))
            raise SceneError(f"{self.path}, line {where(i)}: {what} needs {min_width} value(s), "
                             f"got {int(counts[i])}")
        if not np.all(counts == width):  # extra components (w, colours) or a missing v
            fixed = []
            for r in rows:
                t = r.split()[:width]
                fixed.append(" ".join(t + ["0"] * (width - len(t))))
            joined = "\n".join(fixed)
        return _numbers(self.path, joined, np.float64, what, where).reshape(-1, width)


_INT_TOKEN = re.compile(r"-?[0-9]+\Z")


def load_obj(path: str | os.PathLike, flip_tex_coords: bool = True) -> MeshData:
    """Load a Wavefront OBJ file (``v``, ``vt``, ``vn``, ``f``; other statements ignored)."""
    path, data = _read_bytes(path)
    obj = _ObjText(path, data.decode("latin-1"))
    pos = obj.vectors("v", 3, 3, "vertex position")
    tex = obj.vectors("vt", 2, 1, "texture coordinate")
    nrm = obj.vectors("vn", 3, 3, "normal")

    rows = obj.rows["f"]
    if not rows:
        raise SceneError(f"{path}: the OBJ file contains no faces")
    joined = "\n".join(rows)
    if "#" in joined:
        rows = [r.split("#", 1)[0] for r in rows]
        joined = "\n".join(rows)
    counts, slashes = _token_counts(joined, len(rows), slashes=True)
    if counts.min() < 3:
        i = int(np.argmax(counts < 3))
        raise SceneError(f"{path}, line {obj.line_of('f', i)}: a face needs at least 3 vertices")
    corner_face = np.repeat(np.arange(len(rows)), counts)
    ncorner = int(counts.sum())
    face_line = lambda i: obj.line_of("f", int(corner_face[min(i, len(corner_face) - 1)]))

    # Corner strings "v", "v/vt", "v//vn", "v/vt/vn" -> three index columns (0 = absent).
    cols = None
    k = int(slashes[0]) if slashes.size else 0
    if k <= 2 and np.all(slashes == k):
        flat = joined.replace("//", "/0/") if k == 2 else joined
        flat = flat.replace("/", " ")
        try:
            arr = np.fromstring(flat, dtype=np.int64, sep=" ")
        except ValueError:
            arr = None
        if arr is not None and arr.size == ncorner * (k + 1):
            arr = arr.reshape(ncorner, k + 1)
            cols = [arr[:, i] if i <= k else None for i in range(3)]
    if cols is None:  # mixed forms, or something to complain about: one corner at a time
        corners = joined.split()
        sv, st, sn = [], [], []
        for i, c in enumerate(corners):
            p = c.split("/")
            if len(p) > 3:
                raise SceneError(f"{path}, line {face_line(i)}: invalid face vertex {c[:40]!r}")
            sv.append(p[0])
            st.append(p[1] if len(p) > 1 and p[1] else "0")
            sn.append(p[2] if len(p) > 2 and p[2] else "0")
        cols = []
        for strs, what in ((sv, "position"), (st, "texture coordinate"), (sn, "normal")):
            for i, s_ in enumerate(strs):
                if not _INT_TOKEN.match(s_):
                    raise SceneError(f"{path}, line {face_line(i)}: invalid {what} index {s_[:40]!r}")
            cols.append(np.array([min(max(int(x), -2 ** 62), 2 ** 62) for x in strs], dtype=np.int64))

    # Relative (negative) indices count back from the statements seen so far.
    bases = [None, None, None]
    if any(c is not None and c.size and c.min() < 0 for c in cols):
        kinds = {"v ": 0, "vt ": 1, "vn ": 2}
        seen = [0, 0, 0]
        face_bases = []
        for ln in obj.norm.split("\n"):
            ln = ln.lstrip(" ")
            if ln.startswith("f "):
                face_bases.append(tuple(seen))
            else:
                for pre, j in kinds.items():
                    if ln.startswith(pre):
                        seen[j] += 1
        fb = np.array(face_bases, dtype=np.int64).reshape(-1, 3)[corner_face]
        bases = [fb[:, 0], fb[:, 1], fb[:, 2]]

    def resolve(idx, base, count, what):
        if idx is None:
            return None
        res = np.where(idx > 0, idx - 1, (base if base is not None else 0) + idx)
        res = np.where(idx == 0, -1, res)
        bad = (idx != 0) & ((res < 0) | (res >= count))
        if what == "position":
            bad |= idx == 0
        if np.any(bad):
            i = int(np.argmax(bad))
            raise SceneError(f"{path}, line {face_line(i)}: {what} index {int(idx[i])} is out of range "
                             f"({count} defined{' before this face' if idx[i] < 0 else ''})")
        return res

    vi = resolve(cols[0], bases[0], len(pos), "position")
    ti = resolve(cols[1], bases[1], len(tex), "texture coordinate")
    ni = resolve(cols[2], bases[2], len(nrm), "normal")

    has_t = ti is not None and bool(np.any(ti >= 0))
    has_n = ni is not None and bool(np.any(ni >= 0))
    # One output vertex per distinct (v, vt, vn), in order of first appearance.
    key = vi
    if has_t:
        _, key = np.unique(key * (len(tex) + 1) + (ti + 1), return_inverse=True)
    if has_n:
        _, key = np.unique(key.reshape(-1).astype(np.int64) * (len(nrm) + 1) + (ni + 1),
                           return_inverse=True)
    _, first, inverse = np.unique(key.reshape(-1), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    new_index = rank[inverse.reshape(-1)]
    src_corner = first[order]

    vertices = _finite(path, "vertex positions", pos[vi[src_corner]])
    uvs = normals = None
    if has_t:
        t = ti[src_corner]
        uv = np.where(t[:, None] >= 0, tex[np.maximum(t, 0)], 0.0)
        if flip_tex_coords:
            uv[:, 1] = np.where(t >= 0, 1.0 - uv[:, 1], 0.0)
        uvs = _finite(path, "texture coordinates", uv)
    if has_n and bool(np.all(ni >= 0)):
        normals = _finite(path, "normals", nrm[ni[src_corner]])

    tri = _fan(counts)
    faces = _check_faces(path, new_index[tri], len(vertices))
    return MeshData(vertices, faces, normals, uvs)


# --------------------------------------------------------------------------
# PLY
# --------------------------------------------------------------------------
_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
_UV_NAMES = (("u", "v"), ("s", "t"), ("texture_u", "texture_v"), ("texture_s", "texture_t"))
_HEADER_END = re.compile(rb"end_header[ \t]*\r?\n")


@dataclass
class _Prop:
    name: str
    type: str                 # numpy kind for a scalar, or item type for a list
    count_type: str | None = None  # set for list properties


@dataclass
class _Elem:
    name: str
    count: int
    props: list


def _ply_header(path: str, data: bytes) -> tuple[str, list, int]:
    if not data.startswith(b"ply"):
        raise SceneError(f"{path}: not a PLY file (missing 'ply' magic number)")
    m = _HEADER_END.search(data, 0, min(len(data), 1 << 24))
    if m is None:
        raise SceneError(f"{path}: PLY header is truncated (no 'end_header' line)")
    header = data[:m.start()].decode("latin-1").splitlines()
    if not header or header[0].strip() != "ply":
        raise SceneError(f"{path}: not a PLY file (first line must be 'ply')")
    fmt = None
    elems: list[_Elem] = []
    for i, raw in enumerate(header[1:], 2):
        tok = raw.split()
        if not tok or tok[0] in ("comment", "obj_info"):
            continue
        where = f"{path}, header line {i}"
        if tok[0] == "format":
            if len(tok) < 2 or tok[1] not in ("ascii", "binary_little_endian", "binary_big_endian"):
                raise SceneError(f"{where}: unknown PLY format {' '.join(tok[1:])!r}")
            if len(tok) > 2 and tok[2] not in ("1.0", "1"):
                raise SceneError(f"{where}: unsupported PLY version {tok[2]!r}")
            fmt = tok[1]
        elif tok[0] == "element":
            if len(tok) != 3 or not re.fullmatch(r"[0-9]+", tok[2]):
                raise SceneError(f"{where}: malformed element declaration {raw.strip()!r}")
            elems.append(_Elem(tok[1], int(tok[2]), []))
        elif tok[0] == "property":
            if not elems:
                raise SceneError(f"{where}: property declared before any element")
            if len(tok) == 3 and tok[1] in _PLY_TYPES:
                elems[-1].props.append(_Prop(tok[2], _PLY_TYPES[tok[1]]))
            elif (len(tok) == 5 and tok[1] == "list" and tok[2] in _PLY_TYPES
                  and tok[3] in _PLY_TYPES):
                ct, it = _PLY_TYPES[tok[2]], _PLY_TYPES[tok[3]]
                if ct[0] == "f":
                    raise SceneError(f"{where}: list count type must be an integer type, not {tok[2]!r}")
                elems[-1].props.append(_Prop(tok[4], it, ct))
            else:
                raise SceneError(f"{where}: malformed or unknown property declaration {raw.strip()!r}")
        else:
            raise SceneError(f"{where}: unknown header keyword {tok[0]!r}")
    if fmt is None:
        raise SceneError(f"{path}: PLY header has no 'format' line")
    for e in elems:
        names = [p.name for p in e.props]
        if len(set(names)) != len(names):
            raise SceneError(f"{path}: element {e.name!r} declares a property twice")
    return fmt, elems, m.end()


def _read_binary(path: str, data: bytes, offset: int, elems: list, bo: str) -> dict:
    """Returns {element name: {property: array | (counts, flat items)}}."""
    out: dict = {}
    n = len(data)
    for e in elems:
        has_list = any(p.count_type for p in e.props)
        cols: dict = {}
        if not has_list:
            dt = np.dtype([(f"p{i}", bo + p.type) for i, p in enumerate(e.props)])
            size = e.count * dt.itemsize
            if offset + size > n:
                raise SceneError(f"{path}: PLY data is truncated in element {e.name!r} "
                                 f"(needs {size} bytes at offset {offset}, file has {n})")
            if dt.itemsize:
                arr = np.frombuffer(data, dt, e.count, offset)
                for i, p in enumerate(e.props):
                    cols[p.name] = arr[f"p{i}"]
            offset += size
            out[e.name] = cols
            continue
        if e.count == 0:
            out[e.name] = {p.name: ((np.zeros(0, np.int64), np.zeros(0)) if p.count_type
                                    else np.zeros(0)) for p in e.props}
            continue
        # Fast path: every list has the length of the first row's list.
        lens = []
        o = offset
        for p in e.props:
            if p.count_type:
                ct = np.dtype(bo + p.count_type)
                if o + ct.itemsize > n:
                    raise SceneError(f"{path}: PLY data is truncated in element {e.name!r}")
                k = int(np.frombuffer(data, ct, 1, o)[0])
                if k < 0:
                    raise SceneError(f"{path}: negative list length {k} in element {e.name!r}")
                lens.append(k)
                o += ct.itemsize + k * np.dtype(p.type).itemsize
            else:
                o += np.dtype(p.type).itemsize
        if o > n:
            raise SceneError(f"{path}: PLY data is truncated in element {e.name!r}")
        fields = []
        li = 0
        for i, p in enumerate(e.props):
            if p.count_type:
                fields.append((f"c{i}", bo + p.count_type))
                if lens[li]:
                    fields.append((f"p{i}", bo + p.type, (lens[li],)))
                li += 1
            else:
                fields.append((f"p{i}", bo + p.type))
        dt = np.dtype(fields)
        fast = False
        if offset + e.count * dt.itemsize <= n:
            arr = np.frombuffer(data, dt, e.count, offset)
            li = 0
            fast = True
            for i, p in enumerate(e.props):
                if p.count_type:
                    if np.any(arr[f"c{i}"] != lens[li]):
                        fast = False
                        break
                    li += 1
        if fast:
            li = 0
            for i, p in enumerate(e.props):
                if p.count_type:
                    k = lens[li]
                    li += 1
                    items = arr[f"p{i}"].reshape(-1) if k else np.zeros(0, p.type)
                    cols[p.name] = (np.full(e.count, k, np.int64), items)
                else:
                    cols[p.name] = arr[f"p{i}"]
            offset += e.count * dt.itemsize
        else:
            offset = _read_binary_rows(path, data, offset, e, bo, cols)
        out[e.name] = cols
    return out


def _read_binary_rows(path: str, data: bytes, offset: int, e: _Elem, bo: str, cols: dict) -> int:
    """Row-by-row reader for elements whose lists vary in length."""
    n = len(data)
    codes = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "f4": "f", "f8": "d"}
    sb = "<" if bo == "<" else ">"
    scal = {i: struct.Struct(sb + codes[p.type]) for i, p in enumerate(e.props) if not p.count_type}
    cnt = {i: struct.Struct(sb + codes[p.count_type]) for i, p in enumerate(e.props) if p.count_type}
    isz = {i: np.dtype(p.type).itemsize for i, p in enumerate(e.props)}
    scalars = {i: [] for i in scal}
    lists = {i: ([], []) for i in cnt}  # counts, raw byte chunks
    try:
        for _ in range(e.count):
            for i in range(len(e.props)):
                if i in scal:
                    scalars[i].append(scal[i].unpack_from(data, offset)[0])
                    offset += scal[i].size
                else:
                    k = cnt[i].unpack_from(data, offset)[0]
                    offset += cnt[i].size
                    if k < 0:
                        raise SceneError(f"{path}: negative list length {k} in element {e.name!r}")
                    end = offset + k * isz[i]
                    if end > n:
                        raise struct.error("truncated")
                    lists[i][0].append(k)
                    lists[i][1].append(data[offset:end])
                    offset = end
    except struct.error:
        raise SceneError(f"{path}: PLY data is truncated in element {e.name!r}") from None
    for i, p in enumerate(e.props):
        if i in scal:
            cols[p.name] = np.array(scalars[i], dtype=p.type)
        else:
            counts = np.array(lists[i][0], dtype=np.int64)
            items = np.frombuffer(b"".join(lists[i][1]), dtype=bo + p.type)
            cols[p.name] = (counts, items)
    return offset


def _read_ascii(path: str, data: bytes, offset: int, elems: list) -> dict:
    toks = data[offset:].split()
    try:
        vals = np.array(toks, dtype=np.float64) if toks else np.zeros(0)
    except ValueError:
        for t in toks:
            try:
                float(t)
            except ValueError:
                raise SceneError(f"{path}: invalid number {t[:40].decode('latin-1')!r} in PLY data") from None
        raise SceneError(f"{path}: invalid number in PLY data") from None  # pragma: no cover
    pos = 0
    n = len(vals)
    out: dict = {}
    for e in elems:
        cols: dict = {}
        has_list = any(p.count_type for p in e.props)
        np_ = len(e.props)
        if not has_list:
            need = e.count * np_
            if pos + need > n:
                raise SceneError(f"{path}: PLY data is truncated in element {e.name!r} "
                                 f"(expected {need} values, found {n - pos})")
            block = vals[pos:pos + need].reshape(e.count, np_) if np_ else np.zeros((e.count, 0))
            for i, p in enumerate(e.props):
                cols[p.name] = block[:, i]
            pos += need
            out[e.name] = cols
            continue
        if e.count == 0:
            out[e.name] = {p.name: ((np.zeros(0, np.int64), np.zeros(0)) if p.count_type
                                    else np.zeros(0)) for p in e.props}
            continue
        # Fast path: fixed row width taken from the first row.
        lens, o = [], pos
        for p in e.props:
            if o >= n:
                raise SceneError(f"{path}: PLY data is truncated in element {e.name!r}")
            if p.count_type:
                k = vals[o]
                if not (k >= 0 and k == int(k)):
                    raise SceneError(f"{path}: invalid list length {k} in element {e.name!r}")
                lens.append(int(k))
                o += 1 + int(k)
            else:
                o += 1
        width = o - pos
        fast = pos + e.count * width <= n
        if fast:
            block = vals[pos:pos + e.count * width].reshape(e.count, width)
            c, li = 0, 0
            for p in e.props:
                if p.count_type:
                    if np.any(block[:, c] != lens[li]):
                        fast = False
                        break
                    c += 1 + lens[li]
                    li += 1
                else:
                    c += 1
        if fast:
            c, li = 0, 0
            for p in e.props:
                if p.count_type:
                    k = lens[li]
                    cols[p.name] = (np.full(e.count, k, np.int64), block[:, c + 1:c + 1 + k].reshape(-1))
                    c += 1 + k
                    li += 1
                else:
                    cols[p.name] = block[:, c]
                    c += 1
            pos += e.count * width
        else:
            scalars = {p.name: [] for p in e.props if not p.count_type}
            lists = {p.name: ([], []) for p in e.props if p.count_type}
            for _ in range(e.count):
                for p in e.props:
                    if pos >= n:
                        raise SceneError(f"{path}: PLY data is truncated in element {e.name!r}")
                    if p.count_type:
                        k = vals[pos]
                        if not (k >= 0 and k == int(k)):
                            raise SceneError(f"{path}: invalid list length {k} in element {e.name!r}")
                        k = int(k)
                        if pos + 1 + k > n:
                            raise SceneError(f"{path}: PLY data is truncated in element {e.name!r}")
                        lists[p.name][0].append(k)
                        lists[p.name][1].append(vals[pos + 1:pos + 1 + k])
                        pos += 1 + k
                    else:
                        scalars[p.name].append(vals[pos])
                        pos += 1
            for p in e.props:
                if p.count_type:
                    cnts, chunks = lists[p.name]
                    cols[p.name] = (np.array(cnts, np.int64),
                                    np.concatenate(chunks) if chunks else np.zeros(0))
                else:
                    cols[p.name] = np.array(scalars[p.name])
        out[e.name] = cols
    return out


def load_ply(path: str | os.PathLike) -> MeshData:
    """Load a PLY triangle/polygon mesh (ascii, binary little or big endian)."""
    path, data = _read_bytes(path)
    fmt, elems, offset = _ply_header(path, data)
    names = [e.name for e in elems]
    if "vertex" not in names:
        raise SceneError(f"{path}: PLY file has no 'vertex' element")
    if "face" not in names:
        raise SceneError(f"{path}: PLY file has no 'face' element -- is this a triangle mesh?")
    if len(set(names)) != len(names):
        raise SceneError(f"{path}: PLY file declares an element twice")
    vert_el = elems[names.index("vertex")]
    face_el = elems[names.index("face")]
    vprops = {p.name: p for p in vert_el.props}
    for k in ("x", "y", "z"):
        if k not in vprops:
            raise SceneError(f"{path}: PLY vertex element has no '{k}' property")
        if vprops[k].count_type:
            raise SceneError(f"{path}: PLY vertex property '{k}' must not be a list")
    fprops = [p for p in face_el.props if p.count_type]
    idx_prop = next((p for p in fprops if p.name in ("vertex_indices", "vertex_index")), None)
    if idx_prop is None:
        idx_prop = fprops[0] if len(fprops) == 1 else None
    if idx_prop is None:
        raise SceneError(f"{path}: PLY face element has no 'vertex_indices' list property")
    if idx_prop.type[0] == "f":
        raise SceneError(f"{path}: PLY face indices must have an integer type")

    if fmt == "ascii":
        cols = _read_ascii(path, data, offset, elems)
    else:
        cols = _read_binary(path, data, offset, elems, "<" if fmt == "binary_little_endian" else ">")

    vc = cols["vertex"]

    def scalar_cols(names_):
        for nm in names_:
            if nm not in vprops or vprops[nm].count_type:
                return None
        return np.stack([np.asarray(vc[nm], np.float64) for nm in names_], axis=1)

    nv = vert_el.count
    vertices = _finite(path, "vertex positions", scalar_cols(("x", "y", "z")).reshape(nv, 3))
    normals = scalar_cols(("nx", "ny", "nz"))
    if normals is not None:
        normals = _finite(path, "vertex normals", normals)
    uvs = None
    for pair in _UV_NAMES:
        uvs = scalar_cols(pair)
        if uvs is not None:
            uvs = _finite(path, "texture coordinates", uvs)
            break

    counts, items = cols["face"][idx_prop.name]
    if counts.size and counts.min() < 3:
        i = int(np.argmax(counts < 3))
        raise SceneError(f"{path}: face {i} has {int(counts[i])} vertices (at least 3 are needed)")
    items = np.asarray(items)
    if items.dtype.kind == "f":  # ascii values arrive as float64
        if not np.all(np.isfinite(items)) or np.any(items != np.round(items)):
            raise SceneError(f"{path}: face indices must be integers")
        if items.size and np.abs(items).max() >= 2.0 ** 62:
            raise SceneError(f"{path}: face index {items[np.argmax(np.abs(items))]:g} is out of range "
                             f"(the mesh has {nv} vertices)")
    items = items.astype(np.int64)
    faces = _check_faces(path, items[_fan(counts)] if counts.size else np.zeros((0, 3), np.int64), nv)
    return MeshData(vertices, faces, normals, uvs)


# --------------------------------------------------------------------------
# Mitsuba's .serialized
# --------------------------------------------------------------------------
SERIALIZED_MAGIC = 0x041C
# The flag word: which per-vertex arrays follow, and their precision.
_LEGACY_NORMALS, _LEGACY_TEXCOORDS, _LEGACY_COLORS, _LEGACY_DOUBLE = 0x1, 0x2, 0x8, 0x2000


class _Reader:
    """Little-endian reads from a decompressed stream, with errors that
    name the file."""

    def __init__(self, path: str, data: bytes):
        self.path, self.data, self.pos = path, data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SceneError(f"{self.path}: truncated serialized mesh (needs {n} more bytes at {self.pos}, "
                             f"has {len(self.data) - self.pos})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def array(self, dtype, count: int) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(self.take(int(count) * dt.itemsize), dt)


def load_serialized(path: str | os.PathLike, shape_index: int = 0) -> MeshData:
    """Mesh ``shape_index`` of a Mitsuba ``.serialized`` file (format
    versions 3 and 4, float or double, as Mitsuba 3.9.1 reads them): its
    vertices, faces and, when stored, normals and texture coordinates
    (vertex colours, which no plugin reads, are skipped)."""
    import zlib
    p, data = _read_bytes(path)
    if len(data) < 4:
        raise SceneError(f"{p}: truncated serialized mesh file")
    magic, version = struct.unpack("<HH", data[:4])
    if magic != SERIALIZED_MAGIC:
        raise SceneError(f"{p}: not a serialized mesh (bad magic number 0x{magic:04x})")
    if version not in (3, 4):
        raise SceneError(f"{p}: serialized format version {version} is not supported (3 or 4)")
    if isinstance(shape_index, bool) or not isinstance(shape_index, (int, np.integer)) or shape_index < 0:
        raise SceneError(f"{p}: shape_index must be a nonnegative integer, got {shape_index!r}")
    start = 0
    if shape_index > 0:
        if len(data) < 8:
            raise SceneError(f"{p}: truncated serialized mesh file (no shape dictionary)")
        count = struct.unpack("<I", data[-4:])[0]
        if shape_index >= count:
            raise SceneError(f"{p}: shape_index {shape_index} is out of range (the file has {count} meshes)")
        entry = 8 if version >= 4 else 4
        at = len(data) - 4 - entry * (count - shape_index)
        if at < 0:
            raise SceneError(f"{p}: corrupt serialized mesh file (bad shape dictionary)")
        start = struct.unpack("<Q" if entry == 8 else "<I", data[at:at + entry])[0]
        if start + 4 > len(data) or data[start:start + 4] != data[:4]:
            raise SceneError(f"{p}: corrupt serialized mesh file (mesh {shape_index} has no header)")
    try:
        stream = zlib.decompressobj().decompress(data[start + 4:])
    except zlib.error as exc:
        raise SceneError(f"{p}: corrupt serialized mesh (its compressed stream: {exc})") from None
    where = f"{p}@{shape_index}"
    r = _Reader(where, stream)
    return _serialized(where, r, r.scalar("I"), version)


def _serialized(p: str, r: _Reader, flags: int, version: int) -> MeshData:
    if version == 4:
        while r.take(1) != b"\0":      # the shape's name, null-terminated
            pass
    nv, nf = r.scalar("Q"), r.scalar("Q")
    _check_counts(p, r, nv, nf)
    real = np.float64 if flags & _LEGACY_DOUBLE else np.float32
    vertices = _finite(p, "vertex positions", r.array(real, 3 * nv).reshape(-1, 3))
    normals = _finite(p, "normals", r.array(real, 3 * nv).reshape(-1, 3)) if flags & _LEGACY_NORMALS else None
    uvs = _finite(p, "texture coordinates", r.array(real, 2 * nv).reshape(-1, 2)) \
        if flags & _LEGACY_TEXCOORDS else None
    if flags & _LEGACY_COLORS:
        r.array(real, 3 * nv)           # (vertex colours: no plugin reads them)
    faces = _check_faces(p, r.array(np.uint32, 3 * nf).astype(np.int64), nv)
    return MeshData(vertices, faces, normals, uvs)


def _check_counts(p: str, r: _Reader, nv: int, nf: int) -> None:
    # Each vertex takes 12 bytes at least and each face 12: more than the
    # stream holds is corruption, caught before allocating anything.
    if 12 * (nv + nf) > len(r.data) - r.pos:
        raise SceneError(f"{p}: corrupt serialized mesh ({nv} vertices and {nf} faces do not fit in "
                         f"{len(r.data) - r.pos} bytes)")
