"""Chi-square goodness of fit of the sample warps against their own pdf
functions (Mitsuba's chi2 approach): histogram N warped samples on a grid
over the domain and compare with the pdf integrated over each cell."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.kernels import sampling
from jaxrender.primitives import launch

N = 400_000


def chi2_reject(observed, expected, min_expected=5.0):
    """Pool cells with small expectation; Wilson-Hilferty approximation of
    the chi-square tail. Returns (statistic, dof, z); reject when z > 4.5
    (p ~ 3e-6), so a correct warp essentially never fails."""
    order = np.argsort(expected)
    obs, exp = observed[order], expected[order]
    pooled_o, pooled_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(obs, exp):
        acc_o += o
        acc_e += e
        if acc_e >= min_expected:
            pooled_o.append(acc_o)
            pooled_e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and pooled_e:
        pooled_o[-1] += acc_o
        pooled_e[-1] += acc_e
    o, e = np.array(pooled_o), np.array(pooled_e)
    stat = float(np.sum((o - e) ** 2 / e))
    k = len(e) - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return stat, k, z


@functools.cache
def warp_kernel(name: str) -> ir.Kernel:
    warp = getattr(sampling, name)

    def body(seed):
        u = ir.rng.uniform4(seed.value, ir.item_index(), 0)
        v = warp(Vec(u[0], u[1]))
        return tuple(v) + (0.0,) * (3 - len(v))
    return ir.trace(body, {"seed": ir.Scalar("u32")}, {"p": ir.Out("f32", (3,))}, name=name)


@functools.cache
def pdf_kernel(name: str) -> ir.Kernel:
    pdf = getattr(sampling, name)

    def body(d):
        i = ir.item_index()
        return pdf(Vec(d.read(i, 0), d.read(i, 1), d.read(i, 2)))
    return ir.trace(body, {"d": ir.In("f32", (3,))}, {"pdf": ir.Out("f32")}, name=name)


def samples(name, seed=3):
    return np.asarray(launch(warp_kernel(name), (N,), seed=np.uint32(seed))["p"], np.float64)


def sphere_cells(nz=20, nphi=40, hemisphere=False):
    """Cell edges in (cos theta, phi) and a fine quadrature grid per cell."""
    z = np.linspace(0.0 if hemisphere else -1.0, 1.0, nz + 1)
    phi = np.linspace(-math.pi, math.pi, nphi + 1)
    return z, phi


def integrate_pdf_over_cells(pdf_name, z_edges, phi_edges, sub=8):
    """Integral of the kernel's pdf (solid angle) over each (z, phi) cell by a
    midpoint rule with sub x sub points per cell (dω = dz dφ)."""
    nz, nphi = len(z_edges) - 1, len(phi_edges) - 1
    zz = (np.repeat(z_edges[:-1], sub) + (np.tile(np.arange(sub), nz) + 0.5) * np.repeat(np.diff(z_edges), sub) / sub)
    pp = (np.repeat(phi_edges[:-1], sub) + (np.tile(np.arange(sub), nphi) + 0.5)
          * np.repeat(np.diff(phi_edges), sub) / sub)
    Z, P = np.meshgrid(zz, pp, indexing="ij")
    r = np.sqrt(np.maximum(0, 1 - Z * Z))
    d = np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3).astype(np.float32)
    pdf = np.asarray(launch(pdf_kernel(pdf_name), (len(d),), d=d)["pdf"], np.float64).reshape(Z.shape)
    w = np.outer(np.repeat(np.diff(z_edges), sub) / sub, np.repeat(np.diff(phi_edges), sub) / sub)
    return (pdf * w).reshape(nz, sub, nphi, sub).sum((1, 3))


@pytest.mark.parametrize("warp, pdf, hemi", [
    ("square_to_cosine_hemisphere", "square_to_cosine_hemisphere_pdf", True),
    ("square_to_uniform_sphere", "square_to_uniform_sphere_pdf", False),
])
def test_direction_warps_match_their_pdf(warp, pdf, hemi):
    p = samples(warp)
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)
    z_edges, phi_edges = sphere_cells(hemisphere=hemi)
    hist, _, _ = np.histogram2d(np.clip(p[:, 2], z_edges[0], 1.0), np.arctan2(p[:, 1], p[:, 0]),
                                bins=[z_edges, phi_edges])
    integral = integrate_pdf_over_cells(pdf, z_edges, phi_edges)
    total = integral.sum()
    assert abs(total - 1.0) < 2e-3, f"pdf integrates to {total}"
    _, _, z = chi2_reject(hist.ravel(), integral.ravel() * N)
    assert z < 4.5


def test_broken_warp_is_rejected():
    """The test above catches a warp whose samples don't follow the pdf."""
    p = samples("square_to_uniform_sphere")
    z_edges, phi_edges = sphere_cells(hemisphere=True)
    up = p[:, 2] > 0
    hist, _, _ = np.histogram2d(p[up, 2], np.arctan2(p[up, 1], p[up, 0]), bins=[z_edges, phi_edges])
    # Claim the cosine pdf for uniform hemisphere samples.
    integral = integrate_pdf_over_cells("square_to_cosine_hemisphere_pdf", z_edges, phi_edges)
    assert chi2_reject(hist.ravel(), integral.ravel() * up.sum())[2] > 4.5


def test_concentric_disk_is_uniform():
    p = samples("square_to_uniform_disk_concentric")
    r2 = p[:, 0] ** 2 + p[:, 1] ** 2
    assert r2.max() <= 1.0 + 1e-6
    hist, _, _ = np.histogram2d(r2, np.arctan2(p[:, 1], p[:, 0]), bins=[20, 40],
                                range=[[0, 1], [-math.pi, math.pi]])
    assert chi2_reject(hist.ravel(), np.full(hist.size, N / hist.size))[2] < 4.5


def test_triangle_barycentrics_are_uniform():
    p = samples("square_to_uniform_triangle")
    b1, b2 = p[:, 0], p[:, 1]
    assert np.all((b1 >= 0) & (b2 >= 0) & (b1 + b2 <= 1 + 1e-6))
    edges = np.linspace(0, 1, 21)
    hist, _, _ = np.histogram2d(b1, b2, bins=[edges, edges])
    # Area of each grid cell inside the triangle b1 + b2 <= 1, by fine sampling.
    g = (np.arange(400) + 0.5) / 400
    G1, G2 = np.meshgrid(g, g, indexing="ij")
    inside = (G1 + G2 <= 1).reshape(20, 20, 20, 20).mean((1, 3))
    expected = inside / inside.sum() * N
    assert chi2_reject(hist.ravel(), expected.ravel())[2] < 4.5


def _search(cdfs: np.ndarray, rows: np.ndarray, us: np.ndarray, guided: bool) -> np.ndarray:
    """sampling.sample_cdf over row ``rows[k]`` of ``cdfs`` for ``us[k]``:
    the row's CDF and, after all rows, their guide tables in one buffer."""
    from jaxrender.scene.textures import cdf_guides
    R, n = cdfs.shape
    buf = np.concatenate([cdfs.reshape(-1), cdf_guides(cdfs, np).reshape(-1)]).astype(np.float32)

    def body(buf, u, row):
        i = ir.item_index()
        r = row[i]
        guide = R * n + r * (n + 1) if guided else None
        return {"i": sampling.sample_cdf(buf, r * n, ir.Int(n), u[i], guide) - r * n}
    k = ir.trace(body, {"buf": ir.In("f32"), "u": ir.In("f32"), "row": ir.In("i32")}, {"i": ir.Out("i32")},
                 name=f"cdf_search_{'guided' if guided else 'plain'}")
    return np.asarray(launch(k, (len(us),), buf=buf, u=us.astype(np.float32), row=rows.astype(np.int32))["i"])


def test_guided_cdf_search_finds_the_entry_a_binary_search_does():
    """The guide table narrows the search without changing its result, the
    first entry whose CDF value exceeds u (numpy's searchsorted), also for u
    on and next to the buckets' edges j / n, zero-mass entries and a CDF
    whose mass sits in a few entries."""
    rng = np.random.default_rng(5)
    n = 37
    masses = [rng.uniform(0, 1, n), np.where(rng.uniform(size=n) < 0.5, 0.0, rng.uniform(size=n)),
              np.r_[np.full(n - 3, 1e-6), 5.0, 0.0, 9.0], np.r_[1.0, np.zeros(n - 1)], np.ones(n)]
    cdfs = np.stack([np.cumsum(m) / m.sum() for m in masses]).astype(np.float32)
    cdfs[:, -1] = 1.0
    edges = (np.arange(n) / np.float32(n)).astype(np.float32)
    us = np.concatenate([rng.uniform(0, 1, 4000), edges, np.nextafter(edges, np.float32(1)),
                         np.nextafter(edges, np.float32(-1)), cdfs.reshape(-1), np.nextafter(cdfs.reshape(-1), 0)])
    us = np.clip(us, 0.0, np.nextafter(np.float32(1), np.float32(0))).astype(np.float32)
    rows = np.repeat(np.arange(len(cdfs)), len(us))
    us = np.tile(us, len(cdfs))
    want = np.array([np.searchsorted(cdfs[r], u, side="right") for r, u in zip(rows, us)])
    np.testing.assert_array_equal(_search(cdfs, rows, us, guided=False), want)
    np.testing.assert_array_equal(_search(cdfs, rows, us, guided=True), want)


def test_cdf_guides_agree_in_numpy_and_jax():
    import jax.numpy as jnp
    from jaxrender.scene.textures import cdf_guides
    cdfs = np.cumsum(np.random.default_rng(2).uniform(size=(4, 19)), axis=1)
    cdfs = (cdfs / cdfs[:, -1:]).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(cdf_guides(jnp.asarray(cdfs), jnp)), cdf_guides(cdfs, np))
