"""The GPU backend on a real NVIDIA GPU: results against numpy and the CPU
backend (same checks as test_gpu_emulation.py, with NaN payloads compared
as values), the megakernels' images and gradients within noise of the CPU
backend, checks raising Python errors, jit / vmap, and timings.

Skipped unless JAX has a CUDA backend (``pip install 'jax[cuda12]'`` or
``'jax[cuda13]'`` and ``'jaxrender[gpu]'`` on a machine with an NVIDIA GPU
of compute capability 8.0 or newer). Run them with ``pytest -m gpu -s -n 0``
(in one process: the suite runs its files in parallel workers, whose
output pytest does not show).
"""
from __future__ import annotations

import faulthandler
import importlib.util
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import ir
from jaxrender.lowering import cuda
from jaxrender.primitives import launch


def _gpu():
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None


GPU = _gpu()
_why = None
if GPU is None:
    _why = "no GPU: JAX has no CUDA backend here (needs jax[cuda12|cuda13] and an NVIDIA GPU)"
elif importlib.util.find_spec("cuda") is None:
    _why = "cuda-python is not installed: pip install 'jaxrender[gpu]'"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_why is not None, reason=_why or "")]

if _why is None:
    import gpu_checks


def gpu():
    return jax.default_device(GPU)


def cpu():
    return jax.default_device(jax.devices("cpu")[0])


def test_default_backend_renders_on_the_gpu_without_code_changes():
    scene = jaxrender.load_dict(jaxrender.cornell_box())
    before = cuda.stats["compiled"] + cuda.stats["memory_hits"]
    img = jaxrender.render(scene, spp=4)          # no device argument anywhere
    assert GPU in img.devices()
    assert cuda.stats["compiled"] + cuda.stats["memory_hits"] > before
    assert np.isfinite(np.asarray(img)).all()


def test_exact_ops_match_numpy():
    fails = gpu_checks.exact_op_failures(gpu, nan_bits=False)
    assert not [f for f in fails if f], "\n".join(f for f in fails if f)


def test_transcendentals_within_stated_ulp_bounds(capsys):
    fails, worst = gpu_checks.transcendental_failures(gpu, cpu)
    with capsys.disabled():
        print(f"\n  {GPU.device_kind} math, worst ulp (vs correctly rounded, vs CPU backend): "
              + ", ".join(f"{op} {a}/{b}" for op, (a, b) in sorted(worst.items())), end="")
    assert not [f for f in fails if f], "\n".join(f for f in fails if f)


def test_transcendental_special_values():
    assert gpu_checks.special_value_failures(gpu) == []


def test_control_flow_dispatch_and_scatter_match_the_cpu():
    assert gpu_checks.kitchen_sink_failures(gpu, cpu) == []


def test_image_matches_the_cpu_within_noise(capsys):
    r, t = gpu_checks.render_comparison(gpu, cpu, size=64, spp=16)
    with capsys.disabled():
        print(f"\n  image 64x64x16spp: GPU vs CPU mean |diff| {r['diff']:.3g} (noise {r['noise']:.3g}), "
              f"{r['identical']:.1%} pixels identical, GPU render {t['render'] * 1e3:.1f} ms", end="")
    assert r["finite"]
    assert r["diff"] < 0.02 * r["noise"], r
    assert abs(r["mean_gpu"] - r["mean_cpu"]) < 0.01 * r["noise"], r


def test_polarized_stokes_image_matches_the_cpu_within_noise(capsys):
    """spectral_polarized Stokes images (Mueller matrices per wavelength; the
    kernels spill on the GPU, see test_gpu_ptx.POLARIZED)."""
    r, t = gpu_checks.render_comparison(gpu, cpu, size=32, spp=8, scene_dict=gpu_checks.polarized_scene(32),
                                        variant="spectral_polarized")
    with capsys.disabled():
        print(f"\n  stokes 32x32x8spp: GPU vs CPU mean |diff| {r['diff']:.3g} (noise {r['noise']:.3g}), "
              f"GPU render {t['render'] * 1e3:.1f} ms", end="")
    assert r["finite"]
    assert r["diff"] < 0.02 * r["noise"], r


@pytest.mark.parametrize("geometry", [False, True])
def test_gradients_match_the_cpu_within_noise(capsys, geometry):
    rows = gpu_checks.gradient_comparison(gpu, cpu, geometry=geometry)
    with capsys.disabled():
        print("\n  gradients GPU vs CPU: " + str(rows), end="")
    for k, row in rows.items():
        if k == "jvp":
            assert row["diff"] <= 1e-2 * row["scale"], rows
        else:
            assert row["diff"] <= 0.05 * row["spread"] + 1e-5 * row["scale"], rows


def test_colour_gradient_of_a_large_render_matches_the_cpus_float64_sums():
    """At 256x256, 64 spp a colour gradient sums some 4M samples' terms into
    one row. The CPU adds them into float64 copies per thread and rounds
    once (the same bits on any thread count), so with the same samples the
    GPU's gradient must agree with it to 0.1%. Float32 atomics, one per
    sample, were 1.8% low on an H100: the GPU sums each warp's lanes
    first and adds into float64 (lowering.ptx)."""
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 256
    scene = jaxrender.load_dict(d)
    key = "white.reflectance.value"
    x0 = jnp.asarray(scene.params[key])
    grad = jax.jit(jax.grad(lambda x: jnp.mean(jaxrender.render(scene, {key: x}, spp=64, seed=0) ** 2)))
    with gpu():
        g = np.asarray(grad(x0))
    with cpu():
        c = np.asarray(grad(x0))
    print(f"\n  256x256x64spp colour gradient, GPU / CPU float64 sums - 1: {g / c - 1}")
    assert np.all(np.abs(g - c) <= 1e-3 * np.abs(c)), (g, c)


def test_failed_check_is_a_python_error():
    def body(x):
        v = x[ir.item_index()]
        ir.check(v < 100.0, "x must be below 100")
        return v * 3.0
    k = ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name="gpu_checked")
    with gpu():
        np.testing.assert_array_equal(np.asarray(launch(k, (3,), x=np.float32([1, 2, 3]))["y"]), [3, 6, 9])
        with pytest.raises(Exception, match="check failed: x must be below 100"):
            np.asarray(launch(k, (3,), x=np.float32([1, 200, 3]))["y"])


def test_vmap_over_cameras_and_jit():
    scene = jaxrender.load_dict(gpu_checks.cbox(16))
    cam = "sensor.to_world"
    m = jnp.asarray(scene.params[cam])
    ms = jnp.stack([m, m.at[0, 3].add(0.1)])
    f = jax.jit(jax.vmap(lambda mm: jaxrender.render(scene, {cam: mm}, spp=2, seed=3)))
    with gpu():
        g = np.asarray(f(ms))
    with cpu():
        c = np.asarray(f(ms))
    assert g.shape == (2, 16, 16, 3)
    assert np.abs(g - c).mean() < 1e-3 * np.abs(c).mean()


def test_timings(capsys):
    """Cornell box 256x256: primal at 4, 16 and 64 spp, gradient (PRB) at
    16 spp, on the GPU then the CPU. Each phase prints as it ends, and a
    phase still running after two minutes dumps every thread's Python stack
    (faulthandler), so that a run cut short shows where its time went. (The
    64 spp primal once never returned on an H100: a warp split by a call of
    the BVH routine from divergent code counted its samples past ``spp``;
    the routine is inlined since, and test_gpu_ptx checks that it is.)"""
    scene = jaxrender.load_dict(jaxrender.cornell_box())
    key = "red.reflectance.value"
    x0 = jnp.asarray(scene.params[key])
    grad = jax.jit(jax.grad(lambda x: jnp.sum(jaxrender.render(scene, {key: x}, spp=16, seed=1) ** 2)))

    def say(text):   # as each phase ends
        with capsys.disabled():
            print(text, end="", flush=True)

    def timed(label, run):
        faulthandler.dump_traceback_later(120, file=sys.__stderr__)
        t = time.perf_counter()
        try:
            jax.block_until_ready(run())
        finally:
            faulthandler.cancel_dump_traceback_later()
        say(f" {label} {(time.perf_counter() - t) * 1e3:.1f} ms,")

    say(f"\n  timings on {GPU.device_kind}:")
    for name, ctx in (("gpu", gpu), ("cpu", cpu)):
        say(f"\n  {name}:")
        with ctx():
            for spp in (4, 16, 64):
                timed(f"first primal {spp} spp (may compile)", lambda: jaxrender.render(scene, spp=spp, seed=0))
                timed(f"primal {spp} spp", lambda: jaxrender.render(scene, spp=spp, seed=1))
            timed("first grad (compiles)", lambda: grad(x0))
            timed("grad 16 spp", lambda: grad(x0))
