"""Recover the Cornell box's wall colours from many views, sharded across
every device of every process with JAX's own sharding.

Run it on one machine with as many CPU "devices" as you like::

    python examples/multiview_sharded.py --devices 4 --views 8 --steps 30

or on several hosts (or several processes of one host), each process
running the same command with its own ``--process-id``::

    python examples/multiview_sharded.py --coordinator host0:1234 --num-processes 2 --process-id 0
    python examples/multiview_sharded.py --coordinator host0:1234 --num-processes 2 --process-id 1

The views (camera poses) are one array sharded along its first axis over a
``jax.sharding.Mesh`` of all devices; ``jax.vmap`` of ``jaxrender.render``
over them under ``jax.jit`` launches each device's views on that device
(the scene's buffers are replicated), and the gradient of the wall colours,
a parameter every view shares, is summed across devices by XLA. The
optimisation is plain optax Adam on replicated parameters.

Prints which views each of this process's devices renders, the time per
step, each device's time for its own views and the recovered colours.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

KEYS = ("red.reflectance.value", "green.reflectance.value", "white.reflectance.value")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--views", type=int, default=8, help="camera views (a multiple of the device count)")
    ap.add_argument("--res", type=int, default=32)
    ap.add_argument("--spp", type=int, default=4)
    ap.add_argument("--target-spp", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--devices", type=int, default=0,
                    help="CPU devices this process exposes (XLA's forced host device count); 0: leave as is")
    ap.add_argument("--coordinator", default=None, help="host:port of process 0, for several processes")
    ap.add_argument("--num-processes", type=int, default=1)
    ap.add_argument("--process-id", type=int, default=0)
    return ap.parse_args(argv)


def setup(args: argparse.Namespace) -> None:
    """Device count and the distributed runtime: before JAX starts a backend."""
    if args.devices:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={args.devices}".strip()
    if args.num_processes > 1:
        import jax
        if args.coordinator is None:
            raise SystemExit("--num-processes > 1 needs --coordinator host:port")
        # CPU devices of different processes talk through gloo.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, num_processes=args.num_processes, process_id=args.process_id)


def camera_views(base, n: int):
    """``n`` camera poses swinging across the box's opening."""
    import numpy as np
    views = []
    for dx in np.linspace(-0.4, 0.4, n):
        m = np.array(base, np.float32)
        m[0, 3] += dx
        views.append(m)
    return np.stack(views)


def run(args: argparse.Namespace, log=print) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxrender

    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = args.res
    d["integrator"]["max_depth"] = 3
    scene = jaxrender.load_dict(d)
    truth = {k: jnp.asarray(scene.params[k]) for k in KEYS}

    devices = jax.devices()
    if args.views % len(devices):
        raise SystemExit(f"--views ({args.views}) must be a multiple of the {len(devices)} devices")
    mesh = Mesh(np.array(devices), ("views",))
    all_views = camera_views(scene.params["sensor.to_world"], args.views)
    by_view = NamedSharding(mesh, P("views"))
    # Each process supplies the views of its own devices.
    views = jax.make_array_from_callback(all_views.shape, by_view, lambda idx: all_views[idx])
    for shard in views.addressable_shards:
        rows = range(*shard.index[0].indices(args.views))
        log(f"process {jax.process_index()} device {shard.device.id}: views {list(rows)}")

    # Arrays spanning several processes' devices enter jitted functions as
    # arguments (a function may not close over them).
    def render_views(colours, views, seed, spp):
        def one(to_world):
            return jaxrender.render(scene, {**colours, "sensor.to_world": to_world}, spp=spp, seed=seed)
        return jax.vmap(one)(views)

    targets = jax.jit(render_views, static_argnums=3)(truth, views, 7, args.target_spp)
    params = {k: jnp.full(3, 0.5, jnp.float32) for k in KEYS}
    opt = optax.adam(args.lr)
    state = opt.init(params)

    def loss_fn(colours, views, targets, seed):
        return jnp.mean((render_views(colours, views, seed, args.spp) - targets) ** 2)

    @jax.jit
    def step(colours, state, views, targets, seed):
        loss, g = jax.value_and_grad(loss_fn)(colours, views, targets, seed)
        updates, state = opt.update(g, state)
        return optax.apply_updates(colours, updates), state, loss

    history, times = [], []
    for i in range(args.steps):
        start = time.perf_counter()
        params, state, loss = step(params, state, views, targets, jnp.uint32(i))
        loss = float(loss)
        times.append(time.perf_counter() - start)
        history.append(loss)
        if i in (0, 1) or i == args.steps - 1 or (i + 1) % 10 == 0:
            log(f"step {i:3d}  loss {loss:.3e}  {times[-1] * 1e3:7.1f} ms")
    # Each of this process's devices alone, rendering its own views once more.
    local = jax.jit(render_views, static_argnums=3)
    for shard in views.addressable_shards:
        # (the colours are replicated: this process's copy, on that device)
        mine = {k: jax.device_put(np.asarray(v.addressable_shards[0].data), shard.device) for k, v in params.items()}
        jax.block_until_ready(local(mine, shard.data, 0, args.spp))
        start = time.perf_counter()
        jax.block_until_ready(local(mine, shard.data, 0, args.spp))
        log(f"process {jax.process_index()} device {shard.device.id}: {shard.data.shape[0]} views in "
            f"{(time.perf_counter() - start) * 1e3:.1f} ms (primal alone)")
    err = max(float(jnp.max(jnp.abs(params[k] - truth[k]))) for k in KEYS)
    steady = times[1:] or times
    log(f"{len(devices)} devices, {args.views} views of {args.res}x{args.res} at {args.spp} spp: "
        f"median step {np.median(steady) * 1e3:.1f} ms after the first ({times[0]:.1f} s with compiling); "
        f"largest colour error {err:.3f}")
    return {"loss": history, "params": {k: np.asarray(v) for k, v in params.items()},
            "truth": {k: np.asarray(v) for k, v in truth.items()}, "times": times}


def main(argv=None) -> int:
    args = parse_args(argv)
    setup(args)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
