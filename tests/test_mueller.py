"""The kernel-side Mueller calculus (jaxrender.kernels.mueller): every
function against Mitsuba 3's ``mitsuba.mueller`` on random inputs, and
closed forms that need no Mitsuba (Malus's law, a quarter-wave plate, the
unpolarized Fresnel reflectance, frame round trips, energy conservation).

Each family of functions is evaluated in one kernel launched on a batch of
random inputs (a Mueller matrix output is a (4, 4) item, row major)."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels import mueller as mu
from jaxrender.kernels.bsdfs.fresnel import fresnel, fresnel_conductor
from jaxrender.primitives import launch

N = 200
M44 = ir.Out("f32", (4, 4))
V3, V4 = ir.Out("f32", (3,)), ir.Out("f32", (4,))
RTOL, ATOL = 1e-5, 2e-6       # float32 against float32


def _mat(buf, i) -> mu.Mueller:
    return tuple(Vec(*(buf.read(i, 4 * r + c) for c in range(4))) for r in range(4))


def _vec(buf, i, n=3) -> Vec:
    return Vec(*(buf.read(i, k) for k in range(n)))


def _run(kernel, n, **inputs) -> dict[str, np.ndarray]:
    out = launch(kernel, (n,), **inputs)
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def _close(ours, ref, scale=1.0, what=""):
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL * scale, err_msg=what)


def _mitsuba():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_spectral_polarized")
    return mi


def _mi_mat(mi, a):
    import drjit as dr
    return dr.scalar.Matrix4f(np.asarray(a, np.float32))


# ---------------------------------------------------------------------------
# Kernels, one per family
# ---------------------------------------------------------------------------

ELEMENTS = ("depolarizer", "absorber", "linear_polarizer", "linear_retarder", "diattenuator", "rotator",
            "rotated_element", "left_circular_polarizer", "right_circular_polarizer", "identity")


@functools.cache
def elements_kernel() -> ir.Kernel:
    """Per item ``p`` = (value, x, y, theta, phase), matrices ``a``, ``b``
    and a Stokes vector ``s``: the optical elements, the algebra, and the
    products the closed-form tests need."""
    def body(p, a, b, s, q_theta, q_phase):
        i = ir.item_index()
        v, x, y, th, ph = (p.read(i, k) for k in range(5))
        A, B = _mat(a, i), _mat(b, i)
        pol = mu.linear_polarizer()
        return {
            "depolarizer": mu.depolarizer(v), "absorber": mu.absorber(v),
            "linear_polarizer": mu.linear_polarizer(v), "linear_retarder": mu.linear_retarder(ph),
            "diattenuator": mu.diattenuator(x, y), "rotator": mu.rotator(th),
            "rotated_element": mu.rotated_element(th, A),
            "left_circular_polarizer": mu.left_circular_polarizer(),
            "right_circular_polarizer": mu.right_circular_polarizer(), "identity": mu.identity(),
            "matmul": mu.matmul(A, B), "apply": mu.apply(A, _vec(s, i, 4)), "transpose": mu.transpose(A),
            "scale": mu.scale(A, v),
            # closed forms
            "rot_rot": mu.matmul(mu.rotator(th), mu.rotator(ph)), "rot_sum": mu.rotator(th + ph),
            "malus": mu.apply(mu.matmul(mu.rotated_element(th, pol), pol), Vec(1.0, 0.0, 0.0, 0.0)),
            "plate": mu.apply(mu.rotated_element(q_theta.value, mu.linear_retarder(q_phase.value)),
                              Vec(1.0, 1.0, 0.0, 0.0)),
        }
    outs = {k: M44 for k in ELEMENTS + ("matmul", "transpose", "scale", "rot_rot", "rot_sum")}
    outs.update(apply=V4, malus=V4, plate=V4)
    inputs = {"p": ir.In("f32", (5,)), "a": ir.In("f32", (4, 4)), "b": ir.In("f32", (4, 4)),
              "s": ir.In("f32", (4,)), "q_theta": ir.Scalar("f32"), "q_phase": ir.Scalar("f32")}
    return ir.trace(body, inputs, outs, name="mueller_elements")


@functools.cache
def frames_kernel() -> ir.Kernel:
    """Stokes bases of ``w``; rotations between bases ``bc`` and ``bt`` about
    ``w`` (and ``bc2``, ``bt2`` about ``w2`` for the output side) of ``m``."""
    def body(w, bc, bt, w2, bc2, bt2, m):
        i = ir.item_index()
        W, Bc, Bt, W2, Bc2, Bt2 = (_vec(b, i) for b in (w, bc, bt, w2, bc2, bt2))
        M = _mat(m, i)
        r = mu.rotate_stokes_basis(W, Bc, Bt)
        return {"basis": mu.stokes_basis(W), "rotate": r,
                "round_trip": mu.matmul(mu.rotate_stokes_basis(W, Bt, Bc), r),
                "mueller": mu.rotate_mueller_basis(M, W, Bc, Bt, W2, Bc2, Bt2),
                "collinear": mu.rotate_mueller_basis_collinear(M, W, Bc, Bt),
                # bases not orthogonal to w (w2's): seen along w, or their angle in space (Mitsuba's)
                "oblique": mu.rotate_stokes_basis(W, Bc2, Bt2), "oblique_in_space": mu.rotate_stokes_basis(
                    W, Bc2, Bt2, in_space=True)}
    v3 = ir.In("f32", (3,))
    inputs = {"w": v3, "bc": v3, "bt": v3, "w2": v3, "bc2": v3, "bt2": v3, "m": ir.In("f32", (4, 4))}
    return ir.trace(body, inputs, {"basis": V3, "rotate": M44, "round_trip": M44, "mueller": M44,
                                   "collinear": M44, "oblique": M44, "oblique_in_space": M44}, name="mueller_frames")


@functools.cache
def fresnel_kernel() -> ir.Kernel:
    """Reflection for a complex ``eta`` = (re, im) and for its real part
    alone (the dielectric code path), transmission for the real part, and
    jaxrender's unpolarized reflectances."""
    def body(c, eta):
        i = ir.item_index()
        ci, er, ei = c[i], eta.read(i, 0), eta.read(i, 1)
        return {"r_complex": mu.specular_reflection(ci, (er, ei)), "r_real": mu.specular_reflection(ci, er),
                "t_real": mu.specular_transmission(ci, er), "f": fresnel(ci, er)[0],
                "f_conductor": fresnel_conductor(ci, er, ei)}
    return ir.trace(body, {"c": ir.In("f32"), "eta": ir.In("f32", (2,))},
                    {"r_complex": M44, "r_real": M44, "t_real": M44, "f": ir.Out("f32"),
                     "f_conductor": ir.Out("f32")}, name="mueller_fresnel")


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

@functools.cache
def elements_run(q_theta=math.pi / 4, q_phase=math.pi / 2):
    r = np.random.default_rng(1)
    p = np.stack([r.uniform(0, 1, N), r.uniform(0, 1, N), r.uniform(0, 1, N),
                  r.uniform(-math.pi, math.pi, N), r.uniform(-math.pi, math.pi, N)], 1).astype(np.float32)
    a, b = (r.standard_normal((N, 4, 4)).astype(np.float32) for _ in range(2))
    s = r.standard_normal((N, 4)).astype(np.float32)
    out = _run(elements_kernel(), N, p=p, a=a, b=b, s=s, q_theta=np.float32(q_theta), q_phase=np.float32(q_phase))
    return {"p": p.astype(np.float64), "a": a.astype(np.float64), "b": b.astype(np.float64),
            "s": s.astype(np.float64)}, out


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _tangent(r, w):
    """Random unit vectors orthogonal to the rows of ``w``."""
    t = r.standard_normal(w.shape)
    return _unit(t - w * np.sum(t * w, 1, keepdims=True))


@functools.cache
def frames_run():
    r = np.random.default_rng(2)
    w, w2 = _unit(r.standard_normal((N, 3))), _unit(r.standard_normal((N, 3)))
    w[:4] = [[0, 0, 1], [0, 0, -1], [1, 0, 0], [0, 0.6, -0.8]]   # the poles and axes too
    bc, bt, bc2, bt2 = _tangent(r, w), _tangent(r, w), _tangent(r, w2), _tangent(r, w2)
    # Mitsuba's docstring example: (1, 1, 0, 0) in basis x seen from (1, -1, 0)/sqrt2 is (1, 0, 1, 0)
    w[0], bc[0], bt[0] = [0, 0, 1], [1, 0, 0], [math.sqrt(0.5), -math.sqrt(0.5), 0]
    bt[5] = bc[5]                                   # no rotation
    bt[6] = -bc[6]                                  # half a turn
    m = r.standard_normal((N, 4, 4))
    ins = {k: np.asarray(v, np.float32) for k, v in dict(w=w, bc=bc, bt=bt, w2=w2, bc2=bc2, bt2=bt2, m=m).items()}
    return {k: v.astype(np.float64) for k, v in ins.items()}, _run(frames_kernel(), N, **ins)


DIELECTRIC = (1.5, 1 / 1.5, 1.0)
CONDUCTOR = ((0.2, 3.6), (1.5, 0.3), (0.5, 0.01), (0.05, 2.0), (2.0, -1.0), (0.27, 2.78))


@functools.cache
def fresnel_run():
    r = np.random.default_rng(3)
    etas = [(e, 0.0) for e in DIELECTRIC] + list(CONDUCTOR)
    cos = np.concatenate([r.uniform(-1, 1, 64), [-1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0],
                          # near the critical angle of 1.5 (cos = 0.745356)
                          [0.74, 0.75, -0.74, -0.75]])
    c, eta = (np.array(x, np.float32) for x in zip(*[(ci, e) for e in etas for ci in cos]))
    return c.astype(np.float64), eta.astype(np.float64), _run(fresnel_kernel(), len(c), c=c, eta=eta)


# ---------------------------------------------------------------------------
# Against Mitsuba
# ---------------------------------------------------------------------------

def test_elements_and_algebra_match_mitsuba():
    mi = _mitsuba()
    ins, out = elements_run()
    M = mi.mueller
    for n in range(N):
        v, x, y, th, ph = ins["p"][n]
        A = _mi_mat(mi, ins["a"][n])
        ref = {"depolarizer": M.depolarizer(v), "absorber": M.absorber(v), "linear_polarizer": M.linear_polarizer(v),
               "linear_retarder": M.linear_retarder(ph), "diattenuator": M.diattenuator(x, y),
               "rotator": M.rotator(th), "rotated_element": M.rotated_element(th, A),
               "left_circular_polarizer": M.left_circular_polarizer(),
               "right_circular_polarizer": M.right_circular_polarizer(),
               "identity": np.eye(4)}
        for k, m in ref.items():
            _close(out[k][n], np.array(m), scale=np.abs(ins["a"][n]).max() if k == "rotated_element" else 1.0,
                   what=f"{k} at {ins['p'][n]}")


def test_algebra():
    ins, out = elements_run()
    a, b = ins["a"], ins["b"]
    np.testing.assert_allclose(out["matmul"], a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["apply"], np.einsum("nij,nj->ni", a, ins["s"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["transpose"], np.transpose(a, (0, 2, 1)))
    np.testing.assert_allclose(out["scale"], a * ins["p"][:, :1, None], rtol=1e-6)
    # Python floats in, Python floats out; literal zeros stay structural
    m = mu.matmul(mu.rotator(0.2), mu.scale(mu.linear_polarizer(), 2.0))
    assert all(isinstance(x, float) for row in m for x in row) and m[3][0] == 0.0
    np.testing.assert_allclose(np.array([list(r) for r in m]),
                               _np_rotator(0.2) @ np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0] * 4, [0] * 4]), atol=1e-15)


def _np_rotator(t):
    c, s = math.cos(2 * t), math.sin(2 * t)
    return np.array([[1, 0, 0, 0], [0, c, s, 0], [0, -s, c, 0], [0, 0, 0, 1]])


def test_frames_match_mitsuba():
    mi = _mitsuba()
    ins, out = frames_run()
    M, V = mi.mueller, mi.Vector3f
    for n in range(N):
        w, bc, bt, w2, bc2, bt2 = (V(*map(float, ins[k][n])) for k in ("w", "bc", "bt", "w2", "bc2", "bt2"))
        m = _mi_mat(mi, ins["m"][n])
        _close(out["basis"][n], np.array(M.stokes_basis(w)), what=f"stokes_basis({w})")
        _close(out["rotate"][n], np.array(M.rotate_stokes_basis(w, bc, bt)), what=f"rotate_stokes_basis #{n}")
        s = np.abs(ins["m"][n]).max() * 4
        _close(out["mueller"][n], np.array(M.rotate_mueller_basis(m, w, bc, bt, w2, bc2, bt2)), s, f"#{n}")
        _close(out["collinear"][n], np.array(M.rotate_mueller_basis_collinear(m, w, bc, bt)), s, f"#{n}")


def test_oblique_bases():
    """Bases not orthogonal to the direction: by default the rotation is the
    one between the bases projected along it (what an observer looking along
    the ray sees); ``in_space`` gives Mitsuba's formula, their angle in space
    (its retarder's case)."""
    mi = _mitsuba()
    ins, out = frames_run()
    w = ins["w"]
    project = lambda b: _unit(b - w * np.sum(b * w, 1, keepdims=True))      # noqa: E731
    pc, pt = project(ins["bc2"]), project(ins["bt2"])
    cos = np.sum(pc * pt, 1)
    sin = np.sum(w * np.cross(pc, pt), 1)
    theta = np.arctan2(sin, cos)
    for n in range(8, N):      # (the first rows' special cases are for orthogonal bases)
        # (float32 against float64 projections: a few bases nearly along w lose digits)
        np.testing.assert_allclose(out["oblique"][n], _np_rotator(theta[n]), atol=3e-5, err_msg=f"projected #{n}")
        V = mi.Vector3f
        ref = mi.mueller.rotate_stokes_basis(*(V(*map(float, ins[k][n])) for k in ("w", "bc2", "bt2")))
        _close(out["oblique_in_space"][n], np.array(ref), what=f"in space #{n}")
    assert np.abs(out["oblique"] - out["oblique_in_space"]).max() > 0.1     # they do differ


def _mi_fresnel(mi, c, eta):
    import drjit as dr
    er, ei = eta
    r = mi.mueller.specular_reflection(float(c), dr.scalar.Complex2f(float(er), float(ei)))
    if ei:
        return np.array(r), None
    return np.array(r), np.array(mi.mueller.specular_transmission(float(c), float(er)))


def test_fresnel_matches_mitsuba():
    mi = _mitsuba()
    c, eta, out = fresnel_run()
    for n in range(len(c)):
        r, t = _mi_fresnel(mi, c[n], eta[n])
        what = f"cos_theta_i={c[n]}, eta={eta[n]}"
        _close(out["r_complex"][n], r, what="reflection, complex eta: " + what)
        if t is not None:
            _close(out["r_real"][n], r, what="reflection, real eta: " + what)
            if eta[n][0] == 1 and 0 < abs(c[n]) < 0.01:
                # index matched at grazing incidence Mitsuba's float32 ratio cos_theta_t / cos_theta_i
                # is off by up to 1% (1.0066 at 1e-3); ours is exact to 2e-5 (the energy test)
                continue
            _close(out["t_real"][n], t, what="transmission: " + what)


# ---------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------

def test_malus_law():
    ins, out = elements_run()
    th = ins["p"][:, 3]
    np.testing.assert_allclose(out["malus"][:, 0], 0.5 * np.cos(th) ** 2, atol=2e-6)


@pytest.mark.parametrize("theta, s3", [(math.pi / 4, 1.0), (-math.pi / 4, -1.0)])
def test_quarter_wave_plate_at_45_degrees_makes_circular_light(theta, s3):
    _, out = elements_run(theta, math.pi / 2)
    np.testing.assert_allclose(out["plate"][0], [1.0, 0.0, 0.0, s3], atol=1e-6)
    # the same with Python floats, no trace: right circular light passes the right circular polarizer only
    s = mu.apply(mu.rotated_element(theta, mu.linear_retarder(math.pi / 2)), Vec(1.0, 1.0, 0.0, 0.0))
    np.testing.assert_allclose(list(s), [1.0, 0.0, 0.0, s3], atol=1e-12)
    right, left = (mu.apply(m, s)[0] for m in (mu.right_circular_polarizer(), mu.left_circular_polarizer()))
    assert (right, left) == pytest.approx((1.0, 0.0) if s3 > 0 else (0.0, 1.0), abs=1e-12)


def test_rotators_compose_and_rotated_elements_turn():
    ins, out = elements_run()
    np.testing.assert_allclose(out["rot_rot"], out["rot_sum"], atol=3e-6)
    # rotator(45 degrees) sees horizontal light as -45 degrees (Mitsuba's docstring)
    assert list(mu.apply(mu.rotator(math.pi / 4), Vec(1.0, 1.0, 0.0, 0.0))) == pytest.approx([1, 0, -1, 0], abs=1e-12)
    # a polarizer turned by theta passes light polarized at theta: (1, cos 2t, sin 2t, 0)
    t = 0.3
    s = mu.apply(mu.rotated_element(t, mu.linear_polarizer()), Vec(1.0, math.cos(2 * t), math.sin(2 * t), 0.0))
    assert s[0] == pytest.approx(1.0)


def test_stokes_bases_and_their_rotations():
    ins, out = frames_run()
    b = out["basis"]
    np.testing.assert_allclose(np.sum(b * ins["w"], 1), 0.0, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=2e-6)
    np.testing.assert_allclose(b[0], [1.0, 0.0, 0.0], atol=1e-7)               # w = +z: x
    np.testing.assert_allclose(out["round_trip"], np.broadcast_to(np.eye(4), (N, 4, 4)), atol=3e-6)
    np.testing.assert_allclose(out["rotate"][0] @ [1, 1, 0, 0], [1, 0, 1, 0], atol=1e-6)
    np.testing.assert_allclose(out["rotate"][5], np.eye(4), atol=1e-6)         # same basis
    np.testing.assert_allclose(out["rotate"][6], np.eye(4), atol=1e-6)         # opposite: the same frame
    # the rotator's angle is the angle from bc to bt about w
    ang = np.arctan2(np.einsum("ni,ni->n", ins["w"], np.cross(ins["bc"], ins["bt"])),
                     np.einsum("ni,ni->n", ins["bc"], ins["bt"]))
    np.testing.assert_allclose(out["rotate"][:, 1, 2], np.sin(2 * ang), atol=3e-6)
    # collinear is the general rotation with the same frames on both sides
    rot = out["rotate"]
    np.testing.assert_allclose(out["collinear"], rot @ ins["m"] @ np.transpose(rot, (0, 2, 1)), rtol=1e-5, atol=2e-5)


def test_fresnel_m00_is_the_unpolarized_reflectance():
    c, eta, out = fresnel_run()
    real = eta[:, 1] == 0
    np.testing.assert_allclose(out["r_real"][real, 0, 0], out["f"][real], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["r_complex"][real], out["r_real"][real], rtol=1e-5, atol=1e-6)
    front = ~real & (c >= 0)
    np.testing.assert_allclose(out["r_complex"][front, 0, 0], out["f_conductor"][front], rtol=1e-5, atol=1e-6)


def test_fresnel_energy_and_total_internal_reflection():
    """M00(R) + M00(T) = 1: the transmission carries the power factor
    eta_it cos_theta_t / cos_theta_i and no 1/eta^2 radiance scaling."""
    c, eta, out = fresnel_run()
    real = eta[:, 1] == 0
    R, T = out["r_real"][real], out["t_real"][real]
    lit = (np.abs(c[real]) >= 0.01) | (eta[real, 0] != 1)    # eta = 1 at grazing incidence: below
    np.testing.assert_allclose(R[lit, 0, 0] + T[lit, 0, 0], 1.0, atol=2e-6)
    np.testing.assert_allclose(R[:, 0, 1] + T[:, 0, 1], 0.0, atol=2e-6)        # what is not reflected passes
    # total internal reflection: all is reflected, linear light turns elliptical (|M22|^2 + |M23|^2 = 1)
    e_it = np.where(c[real] >= 0, eta[real, 0], 1 / eta[real, 0])
    tir = 1 - (1 - c[real] ** 2) / e_it ** 2 < -1e-4
    assert tir.sum() > 10
    np.testing.assert_allclose(R[tir, 0, 0], 1.0, atol=1e-6)
    np.testing.assert_allclose(R[tir, 2, 2] ** 2 + R[tir, 2, 3] ** 2, 1.0, atol=2e-6)
    np.testing.assert_allclose(T[tir], 0.0, atol=1e-7)
    # normal incidence: ((eta - 1) / (eta + 1))^2, and a_p = -a_s (Verdet) so M22 = -M00
    normal = np.abs(c[real]) == 1
    e = eta[real, 0][normal]
    np.testing.assert_allclose(R[normal, 0, 0], ((e - 1) / (e + 1)) ** 2, atol=1e-6)
    np.testing.assert_allclose(R[normal, 2, 2], -R[normal, 0, 0], atol=1e-7)
    # index matched: nothing reflected, everything passes unchanged (but at grazing incidence, where
    # both are 0 as in Mitsuba; near it float32 cos_theta_t is ill-conditioned)
    matched = eta[real, 0] == 1
    assert np.all(R[matched] == 0)
    through = T[matched & (c[real] != 0)]
    np.testing.assert_allclose(through, np.broadcast_to(np.eye(4), through.shape), atol=2e-5)


def test_specular_transmission_rejects_a_complex_eta():
    with pytest.raises(TypeError):
        mu.specular_transmission(0.5, (0.2, 3.6))
