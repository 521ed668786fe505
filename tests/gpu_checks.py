"""Checks of the GPU backend against numpy references and the CPU backend,
shared by tests/test_gpu_emulation.py (the GPU path emulated on the CPU)
and tests/test_gpu.py (a real GPU). Each takes ``gpu`` and ``cpu``: context
managers inside which launches run on that backend.
"""
from __future__ import annotations

import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np

import jaxrender
from jaxrender.lowering.ptx import ULP_BOUND_GPU, ulp_bound_vs_cpu
from op_harness import (F32_EDGES, I32_EDGES, U32_EDGES, all_pairs, check_exact, check_ulp, mismatches,
                        random_f32, random_i32, random_u32, ref64, run, ulp_distance)

import test_codegen_lanes
import test_ir_ops as T
from test_gradients import cbox, material_cbox


def _relax(mode: str, nan_bits: bool) -> str:
    # A GPU's arithmetic may return its own NaN (payload, sign): compare
    # NaNs as values there. The emulation runs the host's instructions.
    return mode if nan_bits or mode != "bits" else "value"


def exact_op_failures(gpu, nan_bits: bool) -> list:
    """Every non-transcendental op, on edge-value pairs and random values,
    bit for bit against the numpy references (the CPU backend's test)."""
    rng = np.random.default_rng(1234)
    fails = []
    a, b = all_pairs(F32_EDGES)
    sets = [(a, b, np.roll(b, 7)),
            (random_f32(rng, 8192), random_f32(rng, 8192), random_f32(rng, 8192))]
    with gpu():
        for a, b, c in sets:
            res = run(T.float_kernel(), a=a, b=b, c=c)
            for name, (_, _, ref, mode) in T.FLOAT_UNARY.items():
                fails.append(check_exact(name, res["u_" + name], ref(a), [a], _relax(mode, nan_bits)))
            for name, (_, _, ref, mode) in T.FLOAT_BINARY.items():
                fails.append(check_exact(name, res["b_" + name], ref(a, b), [a, b], _relax(mode, nan_bits)))
            for name, (_, _, ref, mode) in T.FLOAT_TERNARY.items():
                fails.append(check_exact(name, res["t_" + name], ref(a, b, c), [a, b, c], _relax(mode, nan_bits)))
        for kern, binary, unary, edges, rnd, dt in (
                (T.int_kernel, T.INT_BINARY, T.INT_UNARY, I32_EDGES, random_i32, np.int32),
                (T.uint_kernel, T.UINT_BINARY, T.UINT_UNARY, U32_EDGES, random_u32, np.uint32)):
            for a, b in (all_pairs(edges), (rnd(rng, 8192), rnd(rng, 8192))):
                a, b = np.asarray(a, dt), np.asarray(b, dt)
                fails += T.check_int(binary, unary, a, b, run(kern(), a=a, b=b), f"{dt.__name__} ")
    return fails


def _domains():
    out = {}
    for op in sorted(T.TRANS_UNARY):
        x = T.unary_domain(op, np.random.default_rng(zlib.crc32(op.encode())))
        out[op] = (x, np.ones_like(x))
    for op in sorted(T.TRANS_BINARY):
        out[op] = T.binary_domain(op, np.random.default_rng(zlib.crc32(op.encode())))
    return out


def transcendental_failures(gpu, cpu) -> tuple[list, dict]:
    """Each transcendental within ``ULP_BOUND_GPU`` of the correctly rounded
    result and within ``ulp_bound_vs_cpu`` of the CPU backend, over the
    domains the CPU's bounds are claimed on; returns the failures and the
    measured worst cases {op: (vs correctly rounded, vs CPU)}."""
    doms = _domains()
    with gpu():
        g = {op: run(T.trans_kernel(), x=x, y=y)[op] for op, (x, y) in doms.items()}
    with cpu():
        c = {op: run(T.trans_kernel(), x=x, y=y)[op] for op, (x, y) in doms.items()}
    fails, worst = [], {}
    for op, (x, y) in doms.items():
        args = [x] if op in T.TRANS_UNARY else [x, y]
        ref = ref64(op, *args)
        fails.append(check_ulp(f"{op} vs correctly rounded", g[op], ref, ULP_BOUND_GPU[op], args))
        fails.append(check_ulp(f"{op} vs CPU backend", g[op], c[op], ulp_bound_vs_cpu(op), args))
        worst[op] = (int(ulp_distance(g[op], ref).max()), int(ulp_distance(g[op], c[op]).max()))
    return fails, worst


def special_value_failures(gpu) -> list:
    """The CPU's table of special values (infinities, NaNs, signed zeros,
    overflow, denormals): exact where it is exact, within ULP_BOUND_GPU
    where it allows rounding."""
    with gpu():
        got = T._special_results()
    lines = []
    for (op, args, want), g in zip(T.SPECIALS, got):
        w = np.float32(want)
        if isinstance(want, T.approx):
            ok = ulp_distance([g], [w])[0] <= ULP_BOUND_GPU.get(op, 0)
        else:
            ok = not mismatches(np.float32([g]), np.float32([w]), "value")[0]
        if not ok:
            lines.append(f"{op}{args} = {float(g)!r}, want {float(w)!r}")
    return lines


def kitchen_sink_failures(gpu, cpu) -> list:
    """Loops with early exit, divergent branches, dispatch over instances,
    varying gathers and contended scatter-adds: every integer result and
    every float not touched by a transcendental matches the CPU exactly."""
    fails = []
    for n, seed in ((1000, 0), (37, 5)):
        with cpu():
            want = test_codegen_lanes.run_sink(1, n, seed)
        with gpu():
            got = test_codegen_lanes.run_sink(1, n, seed)
        for k in ("j", "counts"):
            if not np.array_equal(got[k], want[k]):
                fails.append(f"kitchen sink {k} (n={n}) differs")
        # y: loops of multiply-adds (exact ops); z/q: through sin (1 ulp).
        if ulp_distance(got["y"], want["y"]).max() > 0:
            fails.append(f"kitchen sink y (n={n}) differs")
        d = ulp_distance(got["z"], want["z"])
        if d.max() > 4:
            fails.append(f"kitchen sink z (n={n}) off by {d.max()} ulp")
        if np.mean(got["q"] != want["q"]) > 0.01:
            fails.append(f"kitchen sink q (n={n}) differs in {np.mean(got['q'] != want['q']):.1%}")
    return fails


def render_comparison(gpu, cpu, size=16, spp=4, scene_dict=None, variant=None):
    """Same scene (default: ``material_cbox(size)``; in ``variant``, default
    the selected one), seed and spp on both backends. Paths follow the same random
    numbers through the same IEEE arithmetic; only transcendental functions
    may differ by an ulp, which can flip a rare sampling decision. So the
    two images must agree far below Monte Carlo noise, measured by a CPU
    render with another seed. Returns (report, times)."""
    scene = jaxrender.load_dict(material_cbox(size) if scene_dict is None else scene_dict, variant=variant)
    times = {}
    with cpu():
        a = np.asarray(jaxrender.render(scene, spp=spp, seed=1))
        b = np.asarray(jaxrender.render(scene, spp=spp, seed=2))
    with gpu():
        jaxrender.render(scene, spp=spp, seed=1).block_until_ready()  # compile
        t = time.perf_counter()
        g = np.asarray(jaxrender.render(scene, spp=spp, seed=1))
        times["render"] = time.perf_counter() - t
    noise = np.abs(a - b).mean()
    diff = np.abs(g - a).mean()
    return dict(noise=float(noise), diff=float(diff), mean_gpu=float(g.mean()), mean_cpu=float(a.mean()),
                identical=float(np.mean(np.all(g == a, -1))), finite=bool(np.isfinite(g).all())), times


def polarized_scene(size=16) -> dict:
    """The Stokes images of reflections off glass, rough gold, a blend and a
    twosided rough mirror (tests/references/scenes.py), for spectral_polarized."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent / "references"))
    from scenes import cbox_stokes_rough
    d = cbox_stokes_rough(jaxrender.cornell_box())
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    return d


def gradient_comparison(gpu, cpu, size=8, spp=4, geometry=False):
    """jax.grad of a weighted image loss (PRB adjoint, forward mode through
    jvp) on both backends, against the spread between two seeds.
    ``geometry``: the direct integrator's kernels for a moving box and
    light instead (material form, the edges seen from the camera's point)."""
    if geometry:
        scene = jaxrender.load_dict(dict(cbox(size), integrator={"type": "direct"}))
        keys = ("small-box.vertex_positions", "light.to_world")
    else:
        scene = jaxrender.load_dict(cbox(size))
        keys = ("red.reflectance.value", "light.emitter.radiance.value", "sensor.to_world")
    w = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (size, size, 3)), jnp.float32)

    def loss(p, seed):
        return jnp.sum(jaxrender.render(scene, p, spp=spp, seed=seed, seed_grad=seed + 1) * w)
    p0 = {k: jnp.asarray(scene.params[k]) for k in keys}
    direction = {k: jnp.ones_like(v) for k, v in p0.items()}
    out = {}
    for name, ctx in (("gpu", gpu), ("cpu", cpu)):
        with ctx():
            # jitted: run eagerly, the film boundary's JAX code compiled op by
            # op, ~850 XLA compiles (19 s) per call of this function
            grad = jax.jit(jax.grad(loss))
            grads = [grad(p0, s) for s in (1, 7)]
            tangent = jax.jit(lambda p, d: jax.jvp(lambda q: loss(q, 1), (p,), (d,))[1])(p0, direction)
            out[name] = ({k: np.asarray(grads[0][k]) for k in keys},
                         {k: np.asarray(grads[1][k]) for k in keys}, float(tangent))
    rows = {}
    for k in keys:
        g, c, c2 = out["gpu"][0][k], out["cpu"][0][k], out["cpu"][1][k]
        rows[k] = dict(diff=float(np.abs(g - c).max()), spread=float(np.abs(c - c2).max()),
                       scale=float(np.abs(c).max()))
    rows["jvp"] = dict(diff=abs(out["gpu"][2] - out["cpu"][2]), scale=abs(out["cpu"][2]))
    return rows
