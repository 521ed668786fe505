"""What makes the first image and the first gradient fast: kernels compiled
on a background thread (the adjoint of a value_and_grad while the primal
compiles), LLVM calls made without llvmlite's process-wide lock, and no
eager XLA compilations besides the kernel launch itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from jaxrender import ir
from jaxrender.lowering import cpu

WORKER = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp
    from jax._src import monitoring
    import jaxrender
    from jaxrender.lowering import cache, cpu
    from jaxrender.kernels import integrators

    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 8
    scene = jaxrender.load_dict(d)
    key = "red.reflectance.value"
    x = jnp.asarray(scene.params[key])
    out = {}

    compiles = []
    monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(kw.get("fun_name"))
        if event == "/jax/core/compile/backend_compile_duration" else None)
    jaxrender.render(scene, spp=1).block_until_ready()
    out["primal_xla_compiles"] = compiles[:]
    out["after_render"] = dict(cpu.stats)
    out["shared_cached"] = cache.load(cpu.shared_key(cpu.simd_lanes())) is not None

    v, g = jax.value_and_grad(lambda x: jnp.mean(jaxrender.render(scene, {key: x}, spp=1)))(x)
    out["grad"] = g.tolist()
    out["after_grad"] = dict(cpu.stats)
    # What the background thread stored is what a serial compile makes.
    integ = integrators.create(scene.integrator)
    adjoint = integ.adjoint_kernel(("bsdf_data",), "prb", scene.structure)
    k = cpu.kernel_key(adjoint, 0, cpu.simd_lanes())
    out["same_object"] = cache.load(k) == cpu._optimize_and_emit(cpu.generate_llvm_ir(adjoint, 0))

    t = jax.jvp(lambda x: jaxrender.render(scene, {key: x}, spp=1), (x,), (jnp.ones(3),))[1]
    t.block_until_ready()
    out["after_jvp"] = dict(cpu.stats)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def worker(tmp_path_factory) -> dict:
    """One fresh process with an empty kernel cache (its results serve
    every test here)."""
    env = dict(os.environ, JAXRENDER_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    env.pop("JAXRENDER_DISABLE_DISK_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_derivative_kernels_compile_in_the_background(worker):
    r = worker
    # The first render started the film's two overlap-add kernels (image and
    # weights of the gaussian filter's splats) before its own kernel
    # compiled. value_and_grad: the adjoint, the film-weights kernel and the
    # gather of the image's cotangents were started before the primal
    # compiled, and their launches used those compiles (six in all).
    assert r["after_render"]["prefetched"] == 2 and r["after_render"]["prefetch_hits"] == 2, r
    assert r["after_render"]["compiled"] == 3, r
    assert r["after_grad"]["prefetched"] == 5 and r["after_grad"]["prefetch_hits"] == 5, r
    assert r["after_grad"]["compiled"] == 6, r
    assert r["same_object"]
    assert r["shared_cached"]  # the BVH routines the kernels link, on disk like a kernel
    assert np.all(np.isfinite(r["grad"])) and np.any(np.asarray(r["grad"]) != 0)
    # jvp: the forward kernel is the one started.
    assert r["after_jvp"]["prefetched"] == 6 and r["after_jvp"]["prefetch_hits"] == 6, r
    assert r["after_jvp"]["compiled"] == 7, r


def test_first_render_compiles_nothing_in_xla_but_the_launch(worker):
    """Eager jax.numpy operations on parameter values (or a zero row padded
    onto an empty input) would each be an XLA compilation in every new
    process: most of a warm first render. The launch, and the reshape of its
    result into an image, are all that should remain."""
    assert len(worker["primal_xla_compiles"]) <= 2, worker["primal_xla_compiles"]


def _kernels() -> list[ir.Kernel]:
    def body(x, s):
        i = ir.item_index()
        v = x[i]
        n, acc = ir.while_loop(lambda st: st[0] < 7, lambda st: (st[0] + 1, ir.sin(st[1]) * s.value + v), (0, v))
        return acc + ir.cast(n, "f32")
    return [ir.trace(lambda x, s, k=k: body(x, s) * float(k), {"x": ir.In("f32"), "s": ir.Scalar("f32")},
                     {"y": ir.Out("f32")}, name=f"parallel_probe{k}") for k in range(1, 4)]


def test_concurrent_llvm_compiles_match_serial_ones():
    """Compiles on several threads at once (each with its own LLVM context
    and target machine, outside llvmlite's lock) give the bytes a lone
    compile gives."""
    texts = [cpu.generate_llvm_ir(k, 0) for k in _kernels()] * 2
    serial = [cpu._optimize_and_emit(t) for t in texts]
    results = [None] * len(texts)

    def work(i):
        results[i] = cpu._optimize_and_emit(texts[i])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == serial


@pytest.mark.parametrize("method", ["prb", "rb"])
def test_derivative_kernels_trace_paths_without_derivatives_once(method):
    """Under moving geometry the adjoint traces plain paths from two
    places (PRB's first pass or RB's re-estimates, and the radiance arriving
    across the edges seen from each vertex): one function of the kernel's
    module that both call, not two copies of the path tracer."""
    import re

    import jaxrender
    from jaxrender.kernels import integrators
    from test_geometry_gradients import shadow_scene

    scene = jaxrender.load_dict(shadow_scene(integrator={"type": "path", "max_depth": 3}))
    adjoint = integrators.create(scene.integrator).adjoint_kernel(("tris",), method, scene.structure)
    text = cpu.generate_llvm_ir(adjoint, 0, 8)
    assert len(re.findall(r'define internal void @"jaxrender\.subroutine\.path_run\.\d+"', text)) == 1
    assert len(re.findall(r'call void @"jaxrender\.subroutine\.path_run\.\d+"', text)) == 2


def test_kernels_build_with_the_collector_paused_and_restored():
    """Tracing a kernel and generating its module run without Python's
    cyclic collector (ir/gcpause.py: it doubled the code generator's time
    in a process holding JAX's objects), and leave it as they found it:
    enabled, or disabled by the caller, also under nested and concurrent
    pauses."""
    import gc
    from jaxrender.ir.gcpause import gc_paused

    seen = []

    def body(x):
        seen.append(gc.isenabled())
        return x[ir.item_index()] * 2.0

    def module(name):
        k = ir.trace(body, {"x": ir.In("f32")}, {"y": ir.Out("f32")}, name=name)
        return cpu.generate_llvm_ir(k, 0, 4)

    assert gc.isenabled()
    module("paused_a")
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        module("paused_b")
        assert not gc.isenabled()
    finally:
        gc.enable()
    # overlapping pauses on two threads: enabled again only after the last
    inside, release = threading.Event(), threading.Event()

    def hold():
        with gc_paused():
            inside.set()
            release.wait(10)
    t = threading.Thread(target=hold)
    t.start()
    inside.wait(10)
    with gc_paused():
        pass
    assert not gc.isenabled()
    release.set()
    t.join()
    assert gc.isenabled()
