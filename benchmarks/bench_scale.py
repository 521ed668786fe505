"""Scaling over devices: the render megakernels sharded with JAX.

    python benchmarks/bench_scale.py [--devices 1 2 4] [--reps 5]

For each device count N, a fresh process with N CPU devices (XLA's forced
host device count) times, after a warm-up call, the median of ``--reps``
steady calls of:

* views: ``jax.vmap`` of ``render`` over 8 camera poses of the Cornell box
  (``--size``, ``--spp``), the views sharded over the N devices;
* views grad: ``jax.value_and_grad`` of a loss over those views (primal,
  forward-mode film weights and the path-replay adjoint), the gradient of
  the shared wall colour summed across devices;
* one image: a single image of 2x the size split by rows, ``render(mesh=...)``.

Throughput is samples per second (pixels x spp x views); speedup is
throughput over the one-device run's and scaling efficiency the speedup
over N. Each device's launches use ``cores / N`` threads
(``$JAXRENDER_NUM_THREADS``), as a device of a real machine brings its own
cores: with forced host devices the N devices share this machine's cores,
so the best a run here can show is a speedup of 1 (no overhead), not N;
what it measures is the cost of partitioning (collectives, halo exchange,
launch overhead per device), not added hardware. ``--threads 1 --devices 1
2`` on a 2-core machine gives each device one core of its own: then the
speedup measures scaling with added hardware (ideal: 2).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(n: int, size: int, spp: int, reps: int) -> dict:
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxrender

    assert jax.device_count() == n
    key = "red.reflectance.value"

    def scene_of(res):
        d = jaxrender.cornell_box()
        d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = res
        return jaxrender.load_dict(d)

    def median_time(f, *args):
        jax.block_until_ready(f(*args))
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            jax.block_until_ready(f(*args))
            times.append(time.perf_counter() - t)
        return float(np.median(times))

    mesh = Mesh(np.array(jax.devices()), ("d",))
    scene = scene_of(size)
    x0 = jnp.asarray(scene.params[key])
    base = np.asarray(scene.params["sensor.to_world"], np.float32)
    views = np.stack([base + np.pad(np.array([[0, 0, 0, 0.05 * i - 0.2]], np.float32), ((0, 3), (0, 0)))
                      for i in range(8)])
    views = jax.device_put(views, NamedSharding(mesh, P("d")))

    def multiview(x, v):
        return jax.vmap(lambda m: jaxrender.render(scene, {key: x, "sensor.to_world": m}, spp=spp))(v)

    def loss(x, v):
        return jnp.mean(multiview(x, v) ** 2)

    big = scene_of(2 * size)
    out = {"views": median_time(jax.jit(multiview), x0, views),
           "views grad": median_time(jax.jit(jax.value_and_grad(loss)), x0, views),
           "one image": median_time(jax.jit(lambda x: jaxrender.render(big, {key: x}, spp=spp, mesh=mesh)), x0)}
    samples = {"views": 8 * size * size * spp, "views grad": 8 * size * size * spp,
               "one image": 4 * size * size * spp}
    return {k: {"time": t, "throughput": samples[k] / t} for k, t in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0,
                    help="launch threads per device (default: cores / devices); 1 with --devices 1 2 on a "
                         "2-core machine gives each device a core of its own, so speedup can reach 2")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.size, args.spp, args.reps)))
        return 0
    cores = len(os.sched_getaffinity(0))
    results = {}
    for n in args.devices:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}",
                   JAXRENDER_NUM_THREADS=str(args.threads or max(1, cores // n)),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, __file__, "--child", str(n), "--size", str(args.size),
                               "--spp", str(args.spp), "--reps", str(args.reps)],
                              env=env, capture_output=True, text=True)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
        results[n] = json.loads(line[len("RESULT "):])
    threads = f"{args.threads} thread(s)" if args.threads else "cores / devices threads"
    print(f"{cores} cores, {threads} per device; Cornell box {args.size}x{args.size} x 8 views and one {2 * args.size}x{2 * args.size} "
          f"image, {args.spp} spp; median of {args.reps}")
    print(f"{'workload':<12}{'devices':>8}{'time ms':>10}{'Msamples/s':>12}{'speedup':>9}{'efficiency':>11}")
    first = args.devices[0]
    for work in results[first]:
        for n in args.devices:
            r = results[n][work]
            speedup = r["throughput"] / results[first][work]["throughput"]
            print(f"{work:<12}{n:>8}{r['time'] * 1e3:>10.1f}{r['throughput'] / 1e6:>12.2f}{speedup:>9.2f}"
                  f"{speedup * first / n:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
