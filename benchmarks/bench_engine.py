"""Engine benchmark: loop-heavy, divergent kernels vs the same computation in jax.jit.

Two workloads, each checked for equal output before it is timed:

* ambient occlusion of 256 spheres on a ground plane (``ao_scene.py`` has
  the spec, the numpy reference and the plain-JAX version;
  ``examples/ambient_occlusion.py`` the megakernel): per pixel a nearest-hit
  loop over all spheres, then K occlusion rays that each stop at the first
  occluder;
* an escape-time fractal (Mandelbrot): per pixel a loop whose trip count is
  the escape time.

Prints the time of each, the ratio (jax.jit time / jaxrender time; > 1 means
jaxrender is faster), the cold compile time (trace + codegen + LLVM -O3 +
object emission) and the warm-start time (object code from the disk cache).

    python benchmarks/bench_engine.py [--size 256] [--samples 32] [--reps 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "examples")]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import ambient_occlusion as ao_kernel  # noqa: E402
import ao_scene  # noqa: E402
from jaxrender import ir  # noqa: E402
from jaxrender.lowering import cpu as lowering_cpu  # noqa: E402
from jaxrender.primitives import launch  # noqa: E402


def best_time(fn, reps: int) -> float:
    jax.block_until_ready(fn())  # warm-up (compiles)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return min(ts)


def compile_times(kernel: ir.Kernel) -> tuple[float, float]:
    """(cold compile, warm start) in seconds, using a scratch disk cache.

    Cold: trace-to-object (codegen, LLVM -O3, object emission) plus linking.
    Warm: what a new process pays once the disk cache has the kernel
    (codegen to compute the key, cache read, linking)."""
    old = os.environ.get("JAXRENDER_CACHE_DIR")
    with tempfile.TemporaryDirectory() as d:
        os.environ["JAXRENDER_CACHE_DIR"] = d
        try:
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                _, obj = lowering_cpu.object_code(kernel, 0)
                lowering_cpu.load_object(obj)
                times.append(time.perf_counter() - t0)
        finally:
            if old is None:
                os.environ.pop("JAXRENDER_CACHE_DIR", None)
            else:
                os.environ["JAXRENDER_CACHE_DIR"] = old
    return times[0], times[1]


# -- escape-time fractal --------------------------------------------------------

def mandel_kernel() -> ir.Kernel:
    def body(view, width, max_iter):
        p = ir.item_index()
        w = width.value
        x0, y0, scale = view.read(0, 0), view.read(0, 1), view.read(0, 2)
        cr = x0 + ir.cast(p % w, "f32") * scale
        ci = y0 + ir.cast(p // w, "f32") * scale

        def step(s):
            n, x, y = s
            return n + 1, x * x - y * y + cr, 2.0 * x * y + ci

        n, _, _ = ir.while_loop(lambda s: (s[0] < max_iter.value) & (s[1] * s[1] + s[2] * s[2] <= 4.0),
                                step, (ir.Int(0), ir.Float(0.0), ir.Float(0.0)))
        return n
    return ir.trace(body, {"view": ir.In("f32", (3,)), "width": ir.Scalar("u32"),
                           "max_iter": ir.Scalar("i32")}, {"n": ir.Out("i32")}, name="mandelbrot")


def mandel_jax(size: int, max_iter: int, view):
    x0, y0, scale = (np.float32(v) for v in view)
    p = jnp.arange(size * size, dtype=jnp.uint32)
    cr = x0 + (p % size).astype(jnp.float32) * scale
    ci = y0 + (p // size).astype(jnp.float32) * scale

    @jax.jit
    def run(cr, ci):
        def cond(s):
            n, x, y, active = s
            return jnp.any(active)

        def step(s):
            n, x, y, active = s
            nx = x * x - y * y + cr
            ny = 2.0 * x * y + ci
            x = jnp.where(active, nx, x)
            y = jnp.where(active, ny, y)
            n = n + active.astype(jnp.int32)
            active = active & (n < max_iter) & (x * x + y * y <= 4.0)
            return n, x, y, active

        z = jnp.zeros_like(cr)
        n, *_ = jax.lax.while_loop(cond, step, (jnp.zeros(cr.shape, jnp.int32), z, z, jnp.ones(cr.shape, bool)))
        return n

    return lambda: run(cr, ci)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--spheres", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mandel-size", type=int, default=512)
    ap.add_argument("--max-iter", type=int, default=256)
    args = ap.parse_args(argv)
    W = H = args.size
    K = args.samples
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} cpus, "
          f"jaxrender threads {lowering_cpu.num_threads()}")

    # Ambient occlusion.
    scene = ao_scene.make_scene(args.spheres, 0)
    kernel = ao_kernel.trace_ao()
    cold, warm = compile_times(kernel)
    cam = ao_kernel.camera_buffer(W, H)
    ours = jax.jit(lambda s, seed: ao_kernel.render_ao(kernel, s, cam, W, H, K, seed))
    theirs = ao_scene.make_ao_jax(scene, W, H, K)
    seed = np.uint32(7)
    a = np.asarray(ours(scene["spheres"], seed))
    b = np.asarray(theirs(seed))
    diff = np.abs(a - b)
    assert diff.mean() < 1e-3, f"AO outputs differ: mean abs diff {diff.mean()}"
    t_ours = best_time(lambda: ours(scene["spheres"], seed), args.reps)
    t_jax = best_time(lambda: theirs(seed), args.reps)
    print(f"\nambient occlusion {W}x{H}, {K} rays/pixel, {args.spheres} spheres "
          f"(outputs agree: mean |diff| {diff.mean():.2e}, {np.mean(diff > 0):.2%} pixels differ)")
    print(f"  jaxrender  {t_ours * 1e3:9.1f} ms")
    print(f"  jax.jit    {t_jax * 1e3:9.1f} ms")
    print(f"  ratio jax.jit / jaxrender = {t_jax / t_ours:.2f}x   (target >= 5x)")
    print(f"  cold compile {cold * 1e3:.0f} ms, warm start from disk cache {warm * 1e3:.0f} ms")

    # Escape-time fractal.
    S, M = args.mandel_size, args.max_iter
    view = (-2.2, -1.5, 3.0 / S)
    mk = mandel_kernel()
    view_buf = np.array([view], np.float32)
    ours_m = jax.jit(lambda v: launch(mk, (S * S,), view=v, width=np.uint32(S), max_iter=np.int32(M))["n"])
    theirs_m = mandel_jax(S, M, view)
    na, nb = np.asarray(ours_m(view_buf)), np.asarray(theirs_m())
    # XLA may contract x*x - y*y + c into an fma, so rare boundary pixels can
    # escape one iteration apart; jaxrender rounds every operation as written.
    frac = np.mean(na != nb)
    assert frac < 0.01, f"fractal outputs differ in {frac:.2%} of pixels"
    t_ours = best_time(lambda: ours_m(view_buf), args.reps)
    t_jax = best_time(theirs_m, args.reps)
    cold, warm = compile_times(mk)
    print(f"\nescape-time fractal {S}x{S}, max_iter {M} ({frac:.2%} pixels differ; mean iterations "
          f"{na.mean():.1f} of {M})")
    print(f"  jaxrender  {t_ours * 1e3:9.1f} ms")
    print(f"  jax.jit    {t_jax * 1e3:9.1f} ms")
    print(f"  ratio jax.jit / jaxrender = {t_jax / t_ours:.2f}x   (target >= 5x)")
    print(f"  cold compile {cold * 1e3:.0f} ms, warm start from disk cache {warm * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
