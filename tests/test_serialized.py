"""Mitsuba's ``serialized`` meshes: files written here from the format's
description (versions 3 and 4, those Mitsuba 3.9.1 reads; float and double;
normals, texture coordinates, colours; several meshes per file) load to
what Mitsuba 3 loads from the same file, and corrupt files are SceneErrors.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

import jaxrender
from jaxrender.scene import mesh_io
from jaxrender.scene.transform import Transform

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")


def _mesh(seed: int, nv: int = 30, nf: int = 40):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(nv, 3))
    n = rng.normal(size=(nv, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    uv = rng.random((nv, 2))
    f = np.array([rng.choice(nv, 3, replace=False) for _ in range(nf)], np.uint32)
    return v, f, n, uv


def _legacy_stream(version, v, f, n=None, uv=None, colors=False, double=False, name="part") -> bytes:
    real = "<f8" if double else "<f4"
    flags = (0x1 if n is not None else 0) | (0x2 if uv is not None else 0) | (0x8 if colors else 0) \
        | (0x2000 if double else 0x1000)
    body = struct.pack("<I", flags)
    if version == 4:
        body += name.encode() + b"\0"
    body += struct.pack("<QQ", len(v), len(f)) + np.asarray(v, real).tobytes()
    for a in (n, uv):
        if a is not None:
            body += np.asarray(a, real).tobytes()
    if colors:
        body += np.full((len(v), 3), 0.5, real).tobytes()
    body += np.asarray(f, "<u4").tobytes()
    return struct.pack("<HH", 0x041C, version) + zlib.compress(body)


def _file(path, streams, version) -> None:
    """Concatenated meshes and the end-of-file dictionary of their offsets."""
    offsets, data = [], b""
    for s in streams:
        offsets.append(len(data))
        data += s
    fmt = "<Q" if version >= 4 else "<I"
    data += b"".join(struct.pack(fmt, o) for o in offsets) + struct.pack("<I", len(streams))
    path.write_bytes(data)


def _mitsuba(path, index=0) -> dict:
    shape = mi.load_dict({"type": "serialized", "filename": str(path), "shape_index": index})
    p = mi.traverse(shape)
    out = {"v": np.array(p["vertex_positions"]).reshape(-1, 3), "f": np.array(p["faces"]).reshape(-1, 3)}
    if shape.has_vertex_normals():
        out["n"] = np.array(p["vertex_normals"]).reshape(-1, 3)
    if shape.has_vertex_texcoords():
        out["uv"] = np.array(p["vertex_texcoords"]).reshape(-1, 2)
    return out


CASES = {
    "v3-float": dict(version=3, normals=True, uvs=True),
    "v3-double-colors": dict(version=3, normals=True, uvs=False, double=True, colors=True),
    "v4-uv-only": dict(version=4, normals=False, uvs=True),
    "v4-double": dict(version=4, normals=True, uvs=True, double=True),
    "v3-positions-only": dict(version=3, normals=False, uvs=False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_serialized_loads_what_mitsuba_loads(tmp_path, name):
    case = CASES[name]
    version = case["version"]
    meshes = [_mesh(k, nv=20 + 7 * k, nf=25 + 5 * k) for k in range(3)]
    streams = []
    for v, f, n, uv in meshes:
        n = n if case["normals"] else None
        uv = uv if case["uvs"] else None
        streams.append(_legacy_stream(version, v, f, n, uv, case.get("colors", False), case.get("double", False)))
    path = tmp_path / "m.serialized"
    _file(path, streams, version)
    for index in (0, 2):
        ours = mesh_io.load_serialized(path, index)
        ref = _mitsuba(path, index)
        np.testing.assert_allclose(ours.vertices, ref["v"], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(ours.faces, ref["f"])
        if case["normals"]:
            np.testing.assert_allclose(ours.normals, ref["n"], atol=1e-6)
        else:
            assert ours.normals is None     # (computed later, as Mitsuba does)
        if case["uvs"]:
            np.testing.assert_allclose(ours.uvs, ref["uv"], atol=1e-7)
        else:
            assert ours.uvs is None


def test_a_serialized_shape_in_a_scene_is_that_mesh(tmp_path):
    """The same triangles as the mesh written as PLY (by Mitsuba), with
    face_normals and to_world read as for any mesh."""
    v, f, n, uv = _mesh(5)
    path = tmp_path / "m.serialized"
    _file(path, [_legacy_stream(4, v, f, None, uv)], 4)
    ply = tmp_path / "m.ply"
    mi.load_dict({"type": "serialized", "filename": str(path)}).write_ply(str(ply))

    def scene(shape):
        return jaxrender.load_dict({"type": "scene", "sensor": {"type": "perspective"}, "thing": shape})
    common = {"face_normals": True, "to_world": Transform().rotate([0, 1, 0], 30).scale(0.5)}
    ours = scene({"type": "serialized", "filename": str(path), **common})
    theirs = scene({"type": "ply", "filename": str(ply), **common})
    np.testing.assert_allclose(np.sort(ours.triangles, 0), np.sort(theirs.triangles, 0), atol=1e-6)
    assert len(ours.tri_normals) == 0
    assert len(scene({"type": "serialized", "filename": str(path)}).tri_normals) > 0


@pytest.mark.parametrize("corrupt, message", [
    (lambda d: b"\x1d\x04" + d[2:], "bad magic number"),
    (lambda d: d[:2] + b"\x09\x00" + d[4:], "version 9 is not supported"),
    (lambda d: d[:40], "corrupt serialized mesh|truncated"),
    (lambda d: d[:4] + b"garbage" * 10, "corrupt serialized mesh"),
    (lambda d: d[:2], "truncated"),
])
def test_corrupt_files_are_scene_errors(tmp_path, corrupt, message):
    v, f, n, uv = _mesh(1)
    good = _legacy_stream(3, v, f, n, uv)
    path = tmp_path / "bad.serialized"
    path.write_bytes(corrupt(good))
    with pytest.raises(jaxrender.SceneError, match=message):
        mesh_io.load_serialized(path)


def test_bad_shape_index_and_unsupported_contents(tmp_path):
    v, f, n, uv = _mesh(2)
    path = tmp_path / "m.serialized"
    _file(path, [_legacy_stream(4, v, f)], 4)
    with pytest.raises(jaxrender.SceneError, match="shape_index 3 is out of range"):
        mesh_io.load_serialized(path, 3)
    d = {"type": "scene", "sensor": {"type": "perspective"},
         "thing": {"type": "serialized", "filename": str(path), "shape_index": -1}}
    with pytest.raises(jaxrender.SceneError, match="nonnegative"):
        jaxrender.load_dict(d)
    path.write_bytes(struct.pack("<HH", 0x041C, 5) + zlib.compress(b"\0" * 64))
    with pytest.raises(jaxrender.SceneError, match="version 5 is not supported"):
        mesh_io.load_serialized(path)
    bad_face = _legacy_stream(3, v, np.array([[0, 1, 999]], np.uint32))
    path.write_bytes(bad_face)
    with pytest.raises(jaxrender.SceneError, match="face index 999 is out of range"):
        mesh_io.load_serialized(path)
