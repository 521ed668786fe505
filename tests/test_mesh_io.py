"""OBJ and PLY mesh loading: round trips, agreement with Mitsuba 3, bad input.

Files are written by the tests themselves (ascii and binary, both byte
orders, all index forms).  Where ``mitsuba`` is installed, its ``obj`` and
``ply`` plugins load the same files and ``mi.traverse`` gives the reference
vertex positions, faces, normals and texture coordinates.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxrender.scene.errors import SceneError
from jaxrender.scene.mesh_io import MeshData, load_mesh, load_obj, load_ply


@pytest.fixture
def mi():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    return mi


def mitsuba_mesh(mi, path, **props):
    """(positions, faces, normals or None, uvs or None) as Mitsuba's plugin loads them."""
    kind = str(path).rsplit(".", 1)[1]
    shape = mi.load_dict({"type": kind, "filename": str(path), **props})
    p = mi.traverse(shape)
    v = np.array(p["vertex_positions"]).reshape(-1, 3)
    f = np.array(p["faces"]).reshape(-1, 3)
    n = np.array(p["vertex_normals"]).reshape(-1, 3) if shape.has_vertex_normals() else None
    uv = np.array(p["vertex_texcoords"]).reshape(-1, 2) if shape.has_vertex_texcoords() else None
    return v, f, n, uv


def random_mesh(rng, nv=40, nf=60):
    v = rng.normal(size=(nv, 3)).astype(np.float32)
    f = np.array([rng.choice(nv, 3, replace=False) for _ in range(nf)], dtype=np.int32)
    n = rng.normal(size=(nv, 3)).astype(np.float32)
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    uv = rng.random((nv, 2)).astype(np.float32)
    return v, f, n, uv


# ==========================================================================
# PLY writer used by the tests
# ==========================================================================
_NP = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4",
       "float": "f4", "double": "f8", "int8": "i1", "uint8": "u1", "int32": "i4", "uint32": "u4",
       "float32": "f4", "float64": "f8", "int16": "i2", "uint16": "u2"}


def write_ply(path, vertex_cols, polys, fmt="binary_little_endian", vtype="float",
              count_type="uchar", index_type="int", face_extra=None, extra_element=None, comments=True):
    """vertex_cols: list of (name, array); polys: list of index lists."""
    nv = len(vertex_cols[0][1])
    lines = ["ply", f"format {fmt} 1.0"]
    if comments:
        lines += ["comment written by test_mesh_io", "obj_info nothing"]
    lines += [f"element vertex {nv}"] + [f"property {vtype} {name}" for name, _ in vertex_cols]
    if extra_element:
        lines += [f"element {extra_element} 2", "property list uchar int ids", "property float w"]
    lines += [f"element face {len(polys)}", f"property list {count_type} {index_type} vertex_indices"]
    if face_extra:
        lines += [f"property {face_extra} flags"]
    lines.append("end_header")
    header = ("\n".join(lines) + "\n").encode()
    if fmt == "ascii":
        body = []
        for i in range(nv):
            body.append(" ".join(repr(float(c[i])) for _, c in vertex_cols))
        if extra_element:
            body += ["3 1 2 3 0.5", "1 7 0.25"]
        for p in polys:
            body.append(" ".join(str(int(x)) for x in [len(p), *p]) + (" 7" if face_extra else ""))
        return path.write_bytes(header + ("\n".join(body) + "\n").encode())
    bo = "<" if fmt == "binary_little_endian" else ">"
    vt = np.dtype(bo + _NP[vtype])
    out = [np.stack([np.asarray(c, np.float64) for _, c in vertex_cols], axis=1).astype(vt).tobytes()]
    if extra_element:
        for ids, w in (([1, 2, 3], 0.5), ([7], 0.25)):
            out.append(np.array([len(ids)], bo + "u1").tobytes() + np.array(ids, bo + "i4").tobytes()
                       + np.array([w], bo + "f4").tobytes())
    ct, it = np.dtype(bo + _NP[count_type]), np.dtype(bo + _NP[index_type])
    for p in polys:
        out.append(np.array([len(p)], ct).tobytes() + np.array(p, it).tobytes())
        if face_extra:
            out.append(np.array([7], bo + _NP[face_extra]).tobytes())
    path.write_bytes(header + b"".join(out))


# ==========================================================================
# PLY
# ==========================================================================
@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
@pytest.mark.parametrize("uvnames", [("u", "v"), ("s", "t"), ("texture_u", "texture_v")])
def test_ply_round_trip(tmp_path, fmt, uvnames):
    rng = np.random.default_rng(0)
    v, f, n, uv = random_mesh(rng)
    cols = [("x", v[:, 0]), ("y", v[:, 1]), ("z", v[:, 2]), ("nx", n[:, 0]), ("ny", n[:, 1]),
            ("nz", n[:, 2]), ("red", np.arange(len(v)) % 255), (uvnames[0], uv[:, 0]), (uvnames[1], uv[:, 1])]
    p = tmp_path / "m.ply"
    write_ply(p, cols, f.tolist(), fmt=fmt, face_extra="uchar", extra_element="edge")
    m = load_ply(p)
    assert isinstance(m, MeshData)
    assert m.vertices.dtype == np.float32 and m.faces.dtype == np.int32
    assert m.normals.dtype == np.float32 and m.uvs.dtype == np.float32
    np.testing.assert_array_equal(m.vertices, v)
    np.testing.assert_array_equal(m.faces, f)
    np.testing.assert_allclose(m.normals, n, rtol=1e-6)
    np.testing.assert_allclose(m.uvs, uv, rtol=1e-6)
    assert m.vertex_count == len(v) and m.face_count == len(f)
    assert load_mesh(p).face_count == len(f)


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
@pytest.mark.parametrize("count_type,index_type,vtype", [
    ("uchar", "int", "float"), ("uint8", "uint32", "double"), ("ushort", "ushort", "float32"),
    ("int", "uint", "float64"), ("uchar", "char", "float"), ("short", "short", "double"),
])
def test_ply_polygons_and_integer_widths(tmp_path, fmt, count_type, index_type, vtype):
    v = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [2, 2, 2], [3, 0, 1]], np.float64)
    polys = [[0, 1, 2, 3], [0, 3, 4], [1, 2, 4, 5, 3]]   # quad, triangle, pentagon: mixed lengths
    p = tmp_path / "poly.ply"
    write_ply(p, [("x", v[:, 0]), ("y", v[:, 1]), ("z", v[:, 2])], polys, fmt=fmt,
              count_type=count_type, index_type=index_type, vtype=vtype)
    m = load_ply(p)
    np.testing.assert_array_equal(m.vertices, v.astype(np.float32))
    np.testing.assert_array_equal(m.faces, [[0, 1, 2], [0, 2, 3], [0, 3, 4], [1, 2, 4], [1, 4, 5], [1, 5, 3]])
    assert m.normals is None and m.uvs is None
    # All quads (fixed-length fast path).
    write_ply(p, [("x", v[:, 0]), ("y", v[:, 1]), ("z", v[:, 2])], [[0, 1, 2, 3], [2, 3, 4, 5]], fmt=fmt,
              count_type=count_type, index_type=index_type, vtype=vtype)
    np.testing.assert_array_equal(load_ply(p).faces, [[0, 1, 2], [0, 2, 3], [2, 3, 4], [2, 4, 5]])


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
def test_ply_matches_mitsuba(mi, tmp_path, fmt):
    rng = np.random.default_rng(3)
    v, f, n, uv = random_mesh(rng, nv=30, nf=50)
    p = tmp_path / "m.ply"
    for cols in ([("x", v[:, 0]), ("y", v[:, 1]), ("z", v[:, 2])],
                 [("x", v[:, 0]), ("y", v[:, 1]), ("z", v[:, 2]), ("nx", n[:, 0]), ("ny", n[:, 1]),
                  ("nz", n[:, 2]), ("u", uv[:, 0]), ("v", uv[:, 1])]):
        write_ply(p, cols, f.tolist(), fmt=fmt, comments=False)
        ours = load_ply(p)
        mv, mf, mn, muv = mitsuba_mesh(mi, p)
        np.testing.assert_array_equal(ours.vertices, mv)
        np.testing.assert_array_equal(ours.faces, mf)
        if len(cols) > 3:
            np.testing.assert_allclose(ours.normals, mn, atol=1e-6)
            np.testing.assert_allclose(ours.uvs, muv, atol=1e-7)


def test_ply_big_binary_is_fast(tmp_path):
    rng = np.random.default_rng(0)
    nv, nf = 500_000, 1_000_000
    v = rng.random((nv, 3), dtype=np.float32)
    f = rng.integers(0, nv, (nf, 3)).astype(np.int32)
    rows = np.zeros(nf, dtype=[("c", "u1"), ("i", "<i4", (3,))])
    rows["c"], rows["i"] = 3, f
    header = (f"ply\nformat binary_little_endian 1.0\nelement vertex {nv}\nproperty float x\n"
              f"property float y\nproperty float z\nelement face {nf}\n"
              f"property list uchar int vertex_indices\nend_header\n").encode()
    p = tmp_path / "big.ply"
    p.write_bytes(header + v.tobytes() + rows.tobytes())
    t0 = time.perf_counter()
    m = load_ply(p)
    dt = time.perf_counter() - t0
    np.testing.assert_array_equal(m.faces, f)
    np.testing.assert_array_equal(m.vertices, v)
    assert dt < 3.0, f"1M-triangle binary PLY took {dt:.2f} s"


# ---- PLY errors -----------------------------------------------------------
def _tri_ply(tmp_path, fmt="binary_little_endian", v=None, polys=None, **kw):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float64) if v is None else v
    p = tmp_path / "t.ply"
    write_ply(p, [("x", v[:, 0]), ("y", v[:, 1]), ("z", v[:, 2])], polys or [[0, 1, 2]], fmt=fmt, **kw)
    return p


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
def test_ply_errors(tmp_path, fmt):
    p = _tri_ply(tmp_path, fmt, polys=[[0, 1, 3]])
    with pytest.raises(SceneError, match=r"t\.ply: face index 3 is out of range \(the mesh has 3 vertices\)"):
        load_ply(p)
    p = _tri_ply(tmp_path, fmt, polys=[[0, -1, 2]])
    with pytest.raises(SceneError, match="face index -1 is out of range"):
        load_ply(p)
    for bad in (np.nan, np.inf, -np.inf):
        p = _tri_ply(tmp_path, fmt, v=np.array([[0, 0, 0], [1, bad, 0], [0, 1, 0]]))
        with pytest.raises(SceneError, match=r"t\.ply: vertex positions contain NaN or infinite values"):
            load_ply(p)
    p = _tri_ply(tmp_path, fmt, polys=[[0, 1]])
    with pytest.raises(SceneError, match="face 0 has 2 vertices"):
        load_ply(p)
    p = _tri_ply(tmp_path, fmt)
    data = p.read_bytes()
    p.write_bytes(data[:-3])  # truncated body
    with pytest.raises(SceneError, match=r"t\.ply: PLY data is truncated in element 'face'"):
        load_ply(p)
    body_start = data.index(b"end_header\n") + len(b"end_header\n")
    p.write_bytes(data[:body_start + 5])
    with pytest.raises(SceneError, match="truncated in element 'vertex'"):
        load_ply(p)


def test_ply_header_errors(tmp_path):
    p = tmp_path / "h.ply"
    good = _tri_ply(tmp_path).read_bytes()
    cases = [
        (b"", "not a PLY file"),
        (b"PLY\n" + good[4:], "not a PLY file"),
        (good.replace(b"binary_little_endian", b"binary_middle_endian"), "unknown PLY format"),
        (good.replace(b"format binary_little_endian 1.0\n", b""), "no 'format' line"),
        (good.replace(b"end_header", b"end_headr"), "no 'end_header'"),
        (good.replace(b"property float x", b"property quad x"), "unknown property declaration"),
        (good.replace(b"property float x", b"property float w"), "no 'x' property"),
        (good.replace(b"element face 1", b"element face one"), "malformed element"),
        (good.replace(b"element face 1", b"element face 100000000000"), "truncated"),
        (good.replace(b"element vertex 3", b"element vertex 300000000000000"), "truncated"),
        (good.replace(b"list uchar int", b"list float int"), "count type must be an integer"),
        (good.replace(b"list uchar int", b"list uchar float"), "integer type"),
        (good.replace(b"vertex_indices", b"vertex_stuff").replace(b"end_header",
                                                                   b"property list uchar int more\nend_header"),
         "no 'vertex_indices'"),
        (good.replace(b"element face 1\nproperty list uchar int vertex_indices\n", b""), "no 'face' element"),
        (good.replace(b"format", b"frobnicate"), "unknown header keyword"),
    ]
    for data, message in cases:
        p.write_bytes(data)
        with pytest.raises(SceneError, match=message):
            load_ply(p)
    with pytest.raises(SceneError, match=r"nope\.ply: mesh file not found"):
        load_ply(tmp_path / "nope.ply")
    with pytest.raises(SceneError, match="is a directory"):
        load_ply(tmp_path)
    with pytest.raises(SceneError, match="unknown mesh format"):
        load_mesh(tmp_path / "x.stl")
    p.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                  b"property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n"
                  b"0 0 0\n1 0 zero\n0 1 0\n3 0 1 2\n")
    with pytest.raises(SceneError, match="invalid number 'zero'"):
        load_ply(p)
    p.write_bytes(p.read_bytes().replace(b"zero", b"0").replace(b"3 0 1 2", b"3 0 1.5 2"))
    with pytest.raises(SceneError, match="face indices must be integers"):
        load_ply(p)


# ---- PLY fuzzing --------------------------------------------------------------
def _check_loaded(m: MeshData):
    assert m.vertices.dtype == np.float32 and m.vertices.ndim == 2 and m.vertices.shape[1] == 3
    assert m.faces.dtype == np.int32 and m.faces.ndim == 2 and m.faces.shape[1] == 3
    assert np.all(np.isfinite(m.vertices))
    if m.faces.size:
        assert m.faces.min() >= 0 and m.faces.max() < len(m.vertices)
    for a, w in ((m.normals, 3), (m.uvs, 2)):
        assert a is None or (a.shape == (len(m.vertices), w) and np.all(np.isfinite(a)))


def _fuzz_seeds(tmp):
    from pathlib import Path
    tmp = Path(tmp)
    rng = np.random.default_rng(5)
    v, f, n, uv = random_mesh(rng, nv=8, nf=6)
    seeds = []
    for fmt in ("ascii", "binary_little_endian", "binary_big_endian"):
        cols = [("x", v[:, 0]), ("y", v[:, 1]), ("z", v[:, 2]), ("nx", n[:, 0]), ("ny", n[:, 1]),
                ("nz", n[:, 2]), ("u", uv[:, 0]), ("v", uv[:, 1])]
        p = tmp / f"seed_{fmt}.ply"
        write_ply(p, cols, f.tolist() + [[0, 1, 2, 3]], fmt=fmt, extra_element="edge")
        seeds.append(p.read_bytes())
    return seeds


_SEEDS: list = []


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_ply_raises_only_scene_error(tmp_path_factory, data):
    if not _SEEDS:
        _SEEDS.extend(_fuzz_seeds(tmp_path_factory.mktemp("seeds")))
    buf = bytearray(data.draw(st.sampled_from(_SEEDS)))
    header_end = buf.index(b"end_header") + 11
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["truncate", "header_byte", "body_byte", "insert", "delete",
                                          "count", "type"]))
        if kind == "truncate":
            buf = buf[:data.draw(st.integers(0, len(buf)))]
        elif kind in ("header_byte", "body_byte") and buf:
            lo, hi = (0, min(header_end, len(buf))) if kind == "header_byte" else (min(header_end, len(buf)), len(buf))
            if hi > lo:
                buf[data.draw(st.integers(lo, hi - 1))] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            i = data.draw(st.integers(0, len(buf)))
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and buf:
            i = data.draw(st.integers(0, len(buf) - 1))
            del buf[i:i + data.draw(st.integers(1, 16))]
        elif kind == "count":
            new = data.draw(st.sampled_from([b"0", b"1", b"7", b"9", b"300", b"4294967296", b"-1"]))
            buf = bytearray(bytes(buf).replace(b"vertex 8", b"vertex " + new, 1)
                            if data.draw(st.booleans()) else bytes(buf).replace(b"face 7", b"face " + new, 1))
        else:
            old, new = data.draw(st.sampled_from([(b"list uchar int", b"list int uchar"),
                                                  (b"float x", b"double x"), (b"float nx", b"uchar nx"),
                                                  (b"list uchar int", b"list uint uint"),
                                                  (b"ascii", b"binary_big_endian"),
                                                  (b"binary_little_endian", b"ascii")]))
            buf = bytearray(bytes(buf).replace(old, new, 1))
    p = tmp_path_factory.mktemp("fuzz") / "f.ply"
    p.write_bytes(bytes(buf))
    try:
        m = load_ply(p)
    except SceneError as exc:
        assert "f.ply" in str(exc)
        return
    _check_loaded(m)


# ==========================================================================
# OBJ
# ==========================================================================
OBJ_FORMS = """# all index forms
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
v 9 9 9
vt 0 0
vt 1 0
vt 1 1
vt 0 0.25
vn 0 0 1
vn 0 0 -1
o thing
g group
usemtl stuff
s off
f 1/1/1 2/2/1 3/3/1 4/4/1
f 1/4/2 2/2/2 3/3/1
"""


def test_obj_vertex_splitting_and_fans(tmp_path):
    p = tmp_path / "forms.obj"
    p.write_text(OBJ_FORMS)
    m = load_obj(p)
    # (v, vt, vn) = (1,1,1) (2,2,1) (3,3,1) (4,4,1) (1,4,2) (2,2,2): six vertices, unused v 5 dropped
    np.testing.assert_array_equal(m.vertices, [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(m.faces, [[0, 1, 2], [0, 2, 3], [4, 5, 2]])
    np.testing.assert_array_equal(m.normals[:, 2], [1, 1, 1, 1, -1, -1])
    np.testing.assert_allclose(m.uvs, [[0, 1], [1, 1], [1, 0], [0, 0.75], [0, 0.75], [1, 1]])  # v flipped
    raw = load_obj(p, flip_tex_coords=False)
    np.testing.assert_allclose(raw.uvs[:, 1], [0, 0, 1, 0.25, 0.25, 0])


def test_obj_index_forms_and_negative_indices(tmp_path):
    base = "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\nvn 0 0 1\n"
    forms = {
        "f 1 2 3 4\n": (None, None),
        "f 1/1 2/2 3/3 4/4\n": ("uv", None),
        "f 1//1 2//1 3//1 4//1\n": (None, "n"),
        "f 1/1/1 2/2/1 3/3/1 4/4/1\n": ("uv", "n"),
        "f -4/-4/-1 -3/-3/-1 -2/-2/-1 -1/-1/-1\n": ("uv", "n"),
        "f\t1/1/1  2/2/1\t3/3/1 4/4/1   # trailing comment\r\n": ("uv", "n"),
    }
    for face, (has_uv, has_n) in forms.items():
        p = tmp_path / "f.obj"
        p.write_text(base + face)
        m = load_obj(p)
        np.testing.assert_array_equal(m.vertices, [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], err_msg=face)
        np.testing.assert_array_equal(m.faces, [[0, 1, 2], [0, 2, 3]], err_msg=face)
        assert (m.uvs is not None) == bool(has_uv) and (m.normals is not None) == bool(has_n), face
        if has_uv:
            np.testing.assert_allclose(m.uvs, [[0, 1], [1, 1], [1, 0], [0, 0]])
    # Negative indices are relative to the statements read so far.
    p = tmp_path / "rel.obj"
    p.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf -3 -2 -1\nv 5 5 5\nf -4 -1 -2\n  v 7 7 7\nf 1 -1 2\n")
    m = load_obj(p)
    np.testing.assert_array_equal(m.vertices, [[0, 0, 0], [1, 0, 0], [0, 1, 0], [5, 5, 5], [7, 7, 7]])
    np.testing.assert_array_equal(m.faces, [[0, 1, 2], [0, 3, 2], [0, 4, 1]])
    # Mixed forms in one file; corners without vt get uv (0, 0); extra v components ignored.
    p.write_text("v 0 0 0 1\nv 1 0 0 1 0.5 0.5 0.5\nv 0 1 0\nvt 0.5 0.5 0\nf 1/1 2 3\n")
    m = load_obj(p)
    np.testing.assert_allclose(m.uvs, [[0.5, 0.5], [0, 0], [0, 0]])
    assert m.faces.shape == (1, 3)


def test_obj_matches_mitsuba(mi, tmp_path):
    rng = np.random.default_rng(7)
    v, f, n, uv = random_mesh(rng, nv=25, nf=40)
    lines = [f"v {a} {b} {c}" for a, b, c in v.tolist()]
    lines += [f"vt {a} {b}" for a, b in uv[:17].tolist()]
    lines += [f"vn {a} {b} {c}" for a, b, c in n[:11].tolist()]
    for tri in f:
        ti, ni = rng.integers(1, 18, 3), rng.integers(1, 12, 3)
        lines.append("f " + " ".join(f"{a + 1}/{b}/{c}" for a, b, c in zip(tri, ti, ni)))
    lines.append("f 1/1/1 2/2/2 3/3/3 4/4/4 5/5/5")  # a pentagon
    p = tmp_path / "r.obj"
    p.write_text("\n".join(lines) + "\n")
    ours = load_obj(p)
    mv, mf, mn, muv = mitsuba_mesh(mi, p)
    assert ours.vertices.shape == mv.shape and ours.faces.shape == mf.shape
    np.testing.assert_allclose(ours.vertices, mv, rtol=1e-6)
    np.testing.assert_array_equal(ours.faces, mf)
    np.testing.assert_allclose(ours.normals, mn, atol=1e-6)
    np.testing.assert_allclose(ours.uvs, muv, atol=1e-6)
    mv, mf, mn, muv = mitsuba_mesh(mi, p, flip_tex_coords=False)
    np.testing.assert_allclose(load_obj(p, flip_tex_coords=False).uvs, muv, atol=1e-6)
    # Positions only (Mitsuba computes normals itself; we leave them to the mesh builder).
    p.write_text("v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nv 5 5 5\nf 1 2 3 4\nf 4 1 3\n")
    ours, (mv, mf, _, _) = load_obj(p), mitsuba_mesh(mi, p)
    np.testing.assert_array_equal(ours.vertices, mv)
    np.testing.assert_array_equal(ours.faces, mf)
    assert ours.normals is None and ours.uvs is None


@pytest.mark.parametrize("text,message", [
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n", r"line 4: position index 4 is out of range"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n", "position index 0 is out of range"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf -4 1 2\n", "position index -4 is out of range"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1/2 2/1 3/1\nvt 0 0\n", r"line 4: texture coordinate index 2"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1//3 2//1 3//1\nvn 0 0 1\n", r"line 4: normal index 3"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2\n", r"line 4: a face needs at least 3 vertices"),
    ("v 0 0 0\nv 1 0\nv 0 1 0\nf 1 2 3\n", r"line 2: vertex position needs 3"),
    ("v 0 0 0\nv 1 zero 0\nv 0 1 0\nf 1 2 3\n", r"line 2: could not parse vertex position 'zero'"),
    ("v 0 0 0\nv 1 nan 0\nv 0 1 0\nf 1 2 3\n", "vertex positions contain NaN"),
    ("v 0 0 0\nv 1 1e999 0\nv 0 1 0\nf 1 2 3\n", "vertex positions contain NaN or infinite"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 x\n", r"line 4: invalid position index 'x'"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1/1/1/1 2 3\n", "invalid face vertex"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\n", "contains no faces"),
    ("\x00\x01\x02 binary junk \xff", "contains no faces"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 99999999999999999999999\n", "out of range"),
])
def test_obj_errors(tmp_path, text, message):
    p = tmp_path / "bad.obj"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(SceneError, match=message) as info:
        load_obj(p)
    assert str(info.value).startswith(str(p))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_obj_raises_only_scene_error(tmp_path_factory, data):
    buf = bytearray(OBJ_FORMS.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["truncate", "byte", "insert", "delete"]))
        if kind == "truncate":
            buf = buf[:data.draw(st.integers(0, len(buf)))]
        elif kind == "byte" and buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            i = data.draw(st.integers(0, len(buf)))
            buf[i:i] = data.draw(st.sampled_from([b"/", b"-", b"//", b" ", b"\n", b"f 1 2 3\n", b"v 1 2\n",
                                                  b"-9", b"0", b"vt\n", b"#", b"\t", b"\r", b"1e999"]))
        elif kind == "delete" and buf:
            i = data.draw(st.integers(0, len(buf) - 1))
            del buf[i:i + data.draw(st.integers(1, 8))]
    p = tmp_path_factory.mktemp("fuzz") / "f.obj"
    p.write_bytes(bytes(buf))
    try:
        m = load_obj(p)
    except SceneError as exc:
        assert "f.obj" in str(exc)
        return
    _check_loaded(m)
