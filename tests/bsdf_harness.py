"""Shared helpers for testing BSDF kernels (``jaxrender.kernels.bsdfs``)
against Mitsuba 3 (``scalar_rgb``) and against their own pdf.

API:

* ``bsdf_kernel(module, make_params, n_params, name, **kw) -> ir.Kernel``:
  one kernel evaluating ``module.eval``, ``module.pdf`` and ``module.sample``
  per work item. ``make_params(row)`` builds the params pytree from a tuple of
  ``n_params`` Floats read from that item's parameter row; ``kw`` are
  trace-time keywords forwarded to the three functions. Cached per
  arguments (``make_params`` must be hashable, e.g. a module-level function).
  Inputs: ``prm (n_params,)``, ``wi (3,)``, ``wo (3,)``, ``u (3,)`` (u1, u2.x,
  u2.y); outputs ``eval (3,)``, ``pdf``, ``s_wo (3,)``, ``s_pdf``,
  ``s_weight (3,)``, ``s_delta`` (1.0 / 0.0).
* ``run_bsdf(kernel, prm, wi, wo, u) -> dict`` of float64 numpy arrays; a
  single parameter row is broadcast to all items.
* ``mitsuba_bsdf(desc)``: ``mi.load_dict`` in the ``scalar_rgb`` variant;
  ``mitsuba_query(bsdf, wi, wo, u) -> dict`` with the same keys as
  ``run_bsdf`` (``s_delta`` from the sampled type).
* ``rgb(v)``: Mitsuba's ``{'type': 'rgb', 'value': v}``.
* ``param_row(t, props)``: the parameter row of BsdfType ``t`` for Mitsuba
  properties ``props`` (floats, or rgb triples for COLOR params; defaults
  for the others); ``mitsuba_plugin(plugin, props)``: Mitsuba's BSDF for them.
* ``random_wi(rng, n, below=0.0)``, ``uniform_sphere(rng, n)``: float32 unit
  vectors (``below``: fraction of wi below the horizon).
* ``rel_err(a, b, floor)``: elementwise |a - b| / max(|b|, floor).
* ``glossy_pairs(n, seed, below, through=0.0)``: ``(wi, wo, u)`` with a
  third of ``wo`` near wi's mirror direction (a fraction ``through`` of
  those mirrored through the surface), the rest uniform.
* ``compare_with_mitsuba(kernel, prm, bsdf, wi, wo, u, tol)``: eval / pdf
  (NaN where Mitsuba's is) and sample() against Mitsuba's, then eval / pdf
  again at the sampled directions; returns the largest errors.
* ``wi_at(theta_deg, phi_deg=20)``: a float32 direction.
* ``check_chi2(kernel, prm_row, wi, seed)``: :func:`chi2_sample_vs_pdf`
  with 100k samples accepted (z < 4.5, pdf integrating to at most 1).
* ``cbox_with(large, small, size=16, spp=16, **integrator)``: a small
  Cornell box scene dict (path tracer, max_depth 4) whose boxes have the
  BSDFs ``large`` and ``small``.
* ``assert_params_are_traverse(d, mine)``: the parameters jaxrender loads
  from scene dict ``d`` whose keys satisfy ``mine`` are ``mi.traverse``'s
  (keys and values).
* ``chi2_sample_vs_pdf(kernel, prm_row, wi, n=..., seed=...)``: histogram
  ``n`` samples on a (cos theta, phi) grid of the sphere and compare with the
  kernel's pdf integrated over each cell (midpoint rule); returns
  ``(z, pdf_integral, samples_dict)`` where ``z`` follows
  ``test_sampling.chi2_reject`` (reject when z > 4.5). Samples with zero
  weight are treated as failures (not histogrammed); the expected counts are
  the pdf integral times n, so a pdf integrating to < 1 requires the same
  fraction of failed samples.
"""
from __future__ import annotations

import functools
import math

import numpy as np

import jaxrender
from jaxrender import ir
from jaxrender.ir import Vec
from jaxrender.primitives import launch

try:
    from test_sampling import chi2_reject
except ImportError:  # pragma: no cover - run from another directory
    from tests.test_sampling import chi2_reject


@functools.cache
def bsdf_kernel(module, make_params, n_params: int, name: str = "bsdf", **kw) -> ir.Kernel:
    def body(prm, wi, wo, u):
        i = ir.item_index()
        p = make_params(tuple(prm.read(i, c) for c in range(n_params)))
        vi = Vec(*wi[i])
        vo = Vec(*wo[i])
        uu = u[i]
        e = module.eval(p, vi, vo, **kw)
        pd = module.pdf(p, vi, vo, **kw)
        s_wo, s_pdf, s_w, s_delta = module.sample(p, vi, uu[0], Vec(uu[1], uu[2]), **kw)
        return {"eval": tuple(e), "pdf": pd, "s_wo": tuple(s_wo), "s_pdf": s_pdf,
                "s_weight": tuple(s_w), "s_delta": ir.select(s_delta, 1.0, 0.0)}
    return ir.trace(body, {"prm": ir.In("f32", (n_params,)), "wi": ir.In("f32", (3,)),
                           "wo": ir.In("f32", (3,)), "u": ir.In("f32", (3,))},
                    {"eval": ir.Out("f32", (3,)), "pdf": ir.Out("f32"), "s_wo": ir.Out("f32", (3,)),
                     "s_pdf": ir.Out("f32"), "s_weight": ir.Out("f32", (3,)), "s_delta": ir.Out("f32")},
                    name=name)


def run_bsdf(kernel, prm, wi, wo, u) -> dict:
    wi = np.asarray(wi, np.float32)
    n = len(wi)
    prm = np.asarray(prm, np.float32)
    if prm.ndim == 1:
        prm = np.broadcast_to(prm, (n, len(prm)))
    out = launch(kernel, (n,), prm=np.ascontiguousarray(prm), wi=wi,
                 wo=np.asarray(wo, np.float32), u=np.asarray(u, np.float32))
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def rgb(v):
    return {"type": "rgb", "value": [float(x) for x in v]}


def param_row(t, props: dict) -> np.ndarray:
    from jaxrender.kernels.bsdfs.base import COLOR, OPTION
    out = []
    for p in t.params:
        if p.kind != OPTION:
            v = props.get(p.name, p.default)
            out.extend(np.broadcast_to(np.asarray(v, np.float32), (3,)) if p.kind == COLOR else [v])
    return np.array(out, np.float32)


def mitsuba_plugin(plugin: str, props: dict):
    return mitsuba_bsdf({"type": plugin, **{k: rgb(v) if isinstance(v, (tuple, list)) else float(v)
                                            for k, v in props.items()}})


@functools.cache
def _mi():
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    return mi


def mitsuba_bsdf(desc: dict):
    return _mi().load_dict(desc)


def mitsuba_query(bsdf, wi, wo, u) -> dict:
    mi = _mi()
    ctx = mi.BSDFContext()
    si = mi.SurfaceInteraction3f()
    si.sh_frame = mi.Frame3f(mi.Vector3f(0.0, 0.0, 1.0))
    n = len(wi)
    out = {"eval": np.zeros((n, 3)), "pdf": np.zeros(n), "s_wo": np.zeros((n, 3)), "s_pdf": np.zeros(n),
           "s_weight": np.zeros((n, 3)), "s_delta": np.zeros(n)}
    delta = int(mi.BSDFFlags.Delta)
    for j in range(n):
        si.wi = mi.Vector3f(*map(float, wi[j]))
        v = mi.Vector3f(*map(float, wo[j]))
        out["eval"][j] = list(bsdf.eval(ctx, si, v))
        out["pdf"][j] = bsdf.pdf(ctx, si, v)
        bs, w = bsdf.sample(ctx, si, float(u[j][0]), mi.Point2f(float(u[j][1]), float(u[j][2])))
        out["s_wo"][j] = list(bs.wo)
        out["s_pdf"][j] = bs.pdf
        out["s_weight"][j] = list(w)
        out["s_delta"][j] = float(int(bs.sampled_type) & delta != 0)
    return out


def uniform_sphere(rng, n):
    v = rng.normal(size=(n, 3))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def random_wi(rng, n, below=0.0):
    v = uniform_sphere(rng, n)
    v[:, 2] = np.abs(v[:, 2])
    flip = rng.random(n) < below
    v[flip, 2] *= -1
    return v


def rel_err(a, b, floor):
    return np.abs(a - b) / np.maximum(np.abs(b), floor)


def wi_at(theta_deg, phi_deg=20.0):
    t, p = np.radians(theta_deg), np.radians(phi_deg)
    return np.array([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], np.float32)


def glossy_pairs(n, seed, below, through=0.0):
    rng = np.random.default_rng(seed)
    wi = random_wi(rng, n, below=below)
    wo = uniform_sphere(rng, n)
    k = n // 3
    near = wi[:k] * np.float32([-1, -1, 1]) + rng.normal(0, 0.15, (k, 3)).astype(np.float32)
    near[k - int(k * through):, 2] *= -1
    wo[:k] = near / np.linalg.norm(near, axis=1, keepdims=True)
    u = rng.random((n, 3), dtype=np.float32)
    return wi, wo, u


def compare_with_mitsuba(kernel, prm, bsdf, wi, wo, u, tol, label="") -> dict:
    """Sampled directions within 1e-4; eval and pdf within ``tol`` relative
    (floor 1e-3), sampled pdf and weight within ``tol`` for 99% of samples
    and 1e-2 for all; the same samples valid on both sides."""
    mine = run_bsdf(kernel, prm, wi, wo, u)
    ref = mitsuba_query(bsdf, wi, wo, u)
    np.testing.assert_array_equal(np.isnan(mine["pdf"]), np.isnan(ref["pdf"]))
    errs = {"eval": rel_err(mine["eval"], ref["eval"], 1e-3).max(),
            "pdf": np.nanmax(rel_err(mine["pdf"], ref["pdf"], 1e-3))}
    assert errs["eval"] <= tol and errs["pdf"] <= tol, f"{label}: {errs}"
    ok_ref = np.any(ref["s_weight"] != 0, axis=1)
    ok = np.any(mine["s_weight"] != 0, axis=1)
    assert np.array_equal(ok, ok_ref), f"{label}: sampling validity differs at {np.flatnonzero(ok != ok_ref)[:5]}"
    errs["s_wo"] = np.abs(mine["s_wo"][ok] - ref["s_wo"][ok]).max()
    assert errs["s_wo"] <= 1e-4, f"{label}: {errs}"
    for key in ("s_pdf", "s_weight"):
        e = rel_err(mine[key][ok], ref[key][ok], 1e-3).reshape(ok.sum(), -1).max(1)
        assert np.quantile(e, 0.99) <= tol and e.max() <= 1e-2, f"{label}: {key} {e.max()}"
        errs[key] = e.max()
    # eval / pdf again at the sampled directions (the lobes' peaks)
    s_wo = ref["s_wo"][ok].astype(np.float32)
    r2 = run_bsdf(kernel, prm, wi[ok], s_wo, u[ok])
    b2 = mitsuba_query(bsdf, wi[ok], s_wo, u[ok])
    for key in ("eval", "pdf"):
        errs[key + "@sampled"] = e = rel_err(r2[key], b2[key], 1e-3).max()
        assert e <= tol, f"{label}: {key} at sampled directions {e}"
    errs["valid"] = ok.mean()
    return errs


def sphere_grid(nz=24, nphi=48, sub=6):
    """Cell edges in (z, phi) and midpoint quadrature directions/weights."""
    z_edges = np.linspace(-1.0, 1.0, nz + 1)
    phi_edges = np.linspace(-math.pi, math.pi, nphi + 1)
    zz = (np.arange(nz * sub) + 0.5) * (2.0 / (nz * sub)) - 1.0
    pp = (np.arange(nphi * sub) + 0.5) * (2 * math.pi / (nphi * sub)) - math.pi
    Z, P = np.meshgrid(zz, pp, indexing="ij")
    r = np.sqrt(np.maximum(0.0, 1 - Z * Z))
    d = np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3).astype(np.float32)
    w = (2.0 / (nz * sub)) * (2 * math.pi / (nphi * sub))
    return z_edges, phi_edges, d, w, sub


def chi2_sample_vs_pdf(kernel, prm_row, wi, n=200_000, seed=0, nz=24, nphi=48, sub=6):
    rng = np.random.default_rng(seed)
    u = rng.random((n, 3), dtype=np.float32)
    wi_arr = np.broadcast_to(np.asarray(wi, np.float32), (n, 3))
    s = run_bsdf(kernel, prm_row, wi_arr, wi_arr, u)
    ok = np.any(s["s_weight"] != 0, axis=1)
    wo = s["s_wo"][ok]
    z_edges, phi_edges, d, w, sub = sphere_grid(nz, nphi, sub)
    hist, _, _ = np.histogram2d(np.clip(wo[:, 2], -1.0, 1.0), np.arctan2(wo[:, 1], wo[:, 0]),
                                bins=[z_edges, phi_edges])
    wi_q = np.broadcast_to(np.asarray(wi, np.float32), (len(d), 3))
    q = run_bsdf(kernel, prm_row, wi_q, d, np.zeros((len(d), 3), np.float32))
    integral = (q["pdf"].reshape(nz, sub, nphi, sub) * w).sum((1, 3))
    _, _, z = chi2_reject(hist.ravel(), integral.ravel() * n)
    return z, integral, s


def check_chi2(kernel, prm_row, wi, seed, label=""):
    z, integral, _ = chi2_sample_vs_pdf(kernel, prm_row, wi, n=100_000, seed=seed)
    assert integral.sum() <= 1.0 + 5e-3
    assert z < 4.5, f"chi2 {label}: z={z}"


def cbox_with(large, small, size=16, spp=16, **integrator) -> dict:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    d["sensor"]["sampler"]["sample_count"] = spp
    d["integrator"] = {"type": "path", "max_depth": 4, **integrator}
    d["large-box"]["bsdf"], d["small-box"]["bsdf"] = large, small
    return d


def assert_params_are_traverse(d, mine):
    try:
        from test_scene_parsing import to_mitsuba
    except ImportError:  # pragma: no cover - run from another directory
        from tests.test_scene_parsing import to_mitsuba
    mi = _mi()
    ours = {k: np.asarray(v, np.float64) for k, v in jaxrender.load_dict(d).params.items() if mine(k)}
    m = mi.traverse(mi.load_dict(to_mitsuba(mi, d)))
    theirs = {k: m[k] for k in m.keys() if mine(k) and not k.endswith(".to_uv")}
    assert set(ours) == set(theirs)
    for k in ours:
        np.testing.assert_allclose(ours[k], np.broadcast_to(np.asarray(theirs[k], np.float64), ours[k].shape),
                                   rtol=1e-7, err_msg=k)
