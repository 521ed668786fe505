"""The primal benchmark scenes (bench_primal.py: Cornell box, Cornell box +
1M-triangle mesh, mesh + envmap) on an NVIDIA GPU against the CPU backend
of the same machine: render time (median of --repeats after a first,
compiling call), the gradient of an image loss (value_and_grad), and how far
the GPU's image is from the CPU's at the same seed (the kernels compute the
same samples, so the difference is float rounding, far below the noise).

    python3 benchmarks/bench_gpu.py --size 256 --spp 64 [--kernels]

``--kernels`` also prints, per device, how the value_and_grad call's time
splits over its kernels (JAX's profiler, ``kernel_times.py``).

Needs a CUDA build of JAX and cuda-python (README, NVIDIA GPUs); no Mitsuba
and no OpenEXR (the sky is passed as an array).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_primal import SCENES, scenes, sky_image, sphere_ply  # noqa: E402
from kernel_times import kernel_times  # noqa: E402


def timed(fn, repeats: int) -> tuple[float, float, object]:
    """(first call's seconds, median of ``repeats`` later calls, last result)."""
    import jax
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(0))
    first = time.perf_counter() - t0
    times = []
    for seed in range(1, repeats + 1):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(seed))
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times), out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scenes", default="cornell,mesh,envmap")
    ap.add_argument("--mesh-tris", type=int, default=1_000_000)
    ap.add_argument("--kernels", action="store_true", help="print value_and_grad's time per kernel")
    args = ap.parse_args(argv)
    wanted = [s.strip() for s in args.scenes.split(",") if s.strip()]
    if not wanted or any(s not in ("cornell", "mesh", "envmap") for s in wanted):
        raise SystemExit(f"--scenes: {args.scenes!r}: choose from cornell, mesh, envmap")
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")

    import jax
    import jax.numpy as jnp
    import jaxrender
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        raise SystemExit("no GPU: JAX has no CUDA backend here")
    cpu = jax.devices("cpu")[0]
    print(f"{gpu.device_kind} against the CPU backend; {args.size}x{args.size}, {args.spp} spp, "
          f"median of {args.repeats} calls after a first (compiling) one\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        mesh = Path(tmp) / "sphere.ply"
        sphere_ply(mesh, args.mesh_tris)
        for key in wanted:
            name = SCENES[key]
            d = scenes(args.size, args.spp, mesh, jaxrender.cornell_box, Path(tmp) / "sky.exr")[name]
            if "sky" in d:
                d["sky"].pop("filename")
                d["sky"]["bitmap"] = sky_image()
            t0 = time.perf_counter()
            scene = jaxrender.load_dict(d)
            load = time.perf_counter() - t0
            pkey = "white.reflectance.value"
            x0 = jnp.asarray(scene.params[pkey])

            def loss(x, seed):
                return jnp.mean(jaxrender.render(scene, {pkey: x}, seed=seed) ** 2)

            vg = jax.jit(jax.value_and_grad(loss))
            out = {}
            for dev_name, dev in (("gpu", gpu), ("cpu", cpu)):
                with jax.default_device(dev):
                    first, med, img = timed(lambda s: jaxrender.render(scene, seed=s), args.repeats)
                    gfirst, gmed, (_, g) = timed(lambda s: vg(x0, s), args.repeats)
                    out[dev_name] = dict(first=first, median=med, img=np.asarray(img),
                                         gfirst=gfirst, gmedian=gmed, grad=np.asarray(g))
                    if args.kernels:
                        out[dev_name]["kernels"] = kernel_times(vg, x0, 0)
            a, b = out["gpu"]["img"], out["cpu"]["img"]
            diff = float(np.abs(a - b).mean())
            mean = float(np.abs(b).mean())
            gd = float(np.abs(out["gpu"]["grad"] - out["cpu"]["grad"]).max())
            gs = float(np.abs(out["cpu"]["grad"]).max())
            finite = bool(np.isfinite(a).all() and np.isfinite(out["gpu"]["grad"]).all())
            rows.append((name, out, diff, mean, gd, gs, finite))
            print(f"{name}: load + BVH {load:.2f} s; finite {finite}; same-seed image |gpu - cpu| mean {diff:.3g} "
                  f"(image mean {mean:.3g}); gradient max |gpu - cpu| {gd:.3g} (of {gs:.3g})")
            for dn in ("gpu", "cpu"):
                o = out[dn]
                print(f"  {dn}: primal first {o['first'] * 1e3:.0f} ms, then {o['median'] * 1e3:.1f} ms; "
                      f"value_and_grad first {o['gfirst'] * 1e3:.0f} ms, then {o['gmedian'] * 1e3:.1f} ms "
                      f"({o['gmedian'] / o['median']:.2f}x primal)", flush=True)
                for label, ms in o.get("kernels", []):
                    print(f"    {ms:9.2f} ms  {label}")
    print("\nscene | GPU primal ms | CPU primal ms | CPU/GPU | GPU value_and_grad ms | CPU/GPU")
    for name, out, *_ in rows:
        g, c = out["gpu"], out["cpu"]
        print(f"{name} | {g['median'] * 1e3:.1f} | {c['median'] * 1e3:.1f} | {c['median'] / g['median']:.1f} | "
              f"{g['gmedian'] * 1e3:.1f} | {c['gmedian'] / g['gmedian']:.1f}")
    if not all(r[6] for r in rows):
        raise SystemExit("non-finite values in a GPU image or gradient")


if __name__ == "__main__":
    main()
