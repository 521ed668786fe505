"""Gradients: jaxrender vs Mitsuba 3 prb at equal error, vs its own primal, and vs a plain JAX tracer.

    apt-get install -y libllvm19     # Mitsuba's LLVM backend needs LLVM >= 19
    python benchmarks/bench_grad.py [--res 128] [--spp 16] [--max-depth 8] [--seeds 8]
        [--filters box,tent,gaussian] [--parts efficiency] [--json out.json]

Scene: the built-in Cornell box (``jaxrender.cornell_box()``, the same dict as
``mitsuba.cornell_box()``) at --res x --res. Loss:
``mean((render(params, seed) - target) ** 2)`` differentiated w.r.t. the red
and green wall reflectances and the light's radiance (9 components),
evaluated at perturbed values (red x0.8, green x1.2, radiance x0.9). The
target is one fixed image for both renderers (jaxrender's render of the
unperturbed scene at 4x --spp), so that both estimate the same gradient.

Parts (--parts, comma list; default ``efficiency``, ``all`` for every one):

efficiency  For each reconstruction filter in --filters (the film's rfilter;
   gaussian is Mitsuba's default): jaxrender's ``jax.jit(loss)`` and
   ``jax.jit(jax.value_and_grad(loss))``, and Mitsuba 3 ``prb`` (variant
   llvm_ad_rgb, same max_depth, rr_depth 5 as ours) render + loss +
   ``dr.backward`` and its primal loss, each run for seeds 0 .. --seeds-1,
   the four taking turns seed by seed after one warm-up call each; then
   jaxrender's two again by themselves, taking turns, for its
   value_and_grad / primal time (right after Mitsuba's backward pass our
   primal ran ~10% slower). Times are medians over the seeds (wall).
   Prints jaxrender's value_and_grad / primal time (target <= 2.5x), both
   renderers' mean gradients with the z-score of their difference (a
   sanity check: Mitsuba's prb is a peer, not ground truth; on these
   non-geometric parameters the two should agree within noise), and a table of time, gradient variance over seeds and
   the efficiency ratio (t_mitsuba * var_mitsuba) / (t_ours * var_ours)
   (target >= 1.5). The gradient variance is relative: each component's
   variance over seeds divided by its mean square g**2 pooled over both
   renderers' seeds (one scale for both, so that the light's radiance,
   with gradients of another magnitude, does not outweigh the
   reflectances), averaged over the 9 components.
memory  jaxrender gradient peak memory for max_depth in --mem-depths x spp
   in --mem-spps, each in a fresh subprocess (target: flat). Columns: peak
   RSS after imports + scene load (baseline), peak RSS at the end, their
   difference, and the measured call's own peak above the RSS just before
   it (VmHWM reset through /proc/self/clear_refs after the compile), and
   the time of that call. Peaks are /proc/self/status VmHWM, not
   ``ru_maxrss``: on Linux a child's ``ru_maxrss`` starts from its parent's
   peak (inherited across fork + exec), which would hide everything below
   the parent's ~1 GiB. (``ru_maxrss`` is still written to --json.)
plain  A plain JAX path tracer (``benchmarks/jax_pathtracer.py``) under
   ``jax.value_and_grad`` for the same configurations (plus --max-depth x
   --spp), each in a fresh subprocess with its address space capped at
   --mem-cap-gb; a configuration that runs out of memory (or past
   --child-timeout) is reported as such. Its image mean is checked against
   jaxrender's first. Slow: minutes per configuration.

XLA:CPU's YNN fusions in jaxlib 0.10.2 miscompile brute-force ray/triangle
code at some array sizes (wrong hits for 910 <= N < 65536 rows; see also
jax-ml/jax#39257 and #37465), so this script turns them off
(``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=``) in every process.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

YNN_OFF = "--xla_cpu_experimental_ynn_fusion_type="
if YNN_OFF not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_OFF).strip()

import numpy as np

import grad_compare
from efficiency import FILTERS, finish, import_mitsuba, note_load, parse_filters, set_filter
from peak_memory import cap_address_space, describe_failure, failure, mb, measure_call, proc_status, report, run_child

KEYS = ("red.reflectance.value", "green.reflectance.value", "light.emitter.radiance.value")
SCALE = {"red.reflectance.value": 0.8, "green.reflectance.value": 1.2, "light.emitter.radiance.value": 0.9}
TARGET_SPP_FACTOR = 4
TARGET_SEED = 999_983
PARTS = ("efficiency", "memory", "plain")
HERE = os.path.dirname(os.path.abspath(__file__))


def scene_dict(factory, res: int, spp: int, max_depth: int, integrator: str = "path") -> dict:
    d = factory()
    d["sensor"]["film"]["width"] = res
    d["sensor"]["film"]["height"] = res
    d["sensor"]["sampler"]["sample_count"] = spp
    d["integrator"] = {"type": integrator, "max_depth": max_depth}
    return d


# ---------------------------------------------------------------- jaxrender
def jaxrender_setup(res: int, spp: int, max_depth: int):
    """(scene, params at the perturbed values, target image, loss(params, spp)),
    for the memory children."""
    import jax.numpy as jnp

    import jaxrender
    scene = jaxrender.load_dict(scene_dict(jaxrender.cornell_box, res, spp, max_depth))
    params = {k: jnp.asarray(np.asarray(scene.params[k]) * SCALE[k], jnp.float32) for k in KEYS}
    target = jaxrender.render(scene, spp=spp, seed=1)

    def loss(p, n_spp):
        return jnp.mean((jaxrender.render(scene, p, spp=n_spp, seed=0) - target) ** 2)
    return scene, params, target, loss


def jaxrender_runners(args, rfilter: str) -> tuple[dict, np.ndarray]:
    """jaxrender's primal-loss and value_and_grad runners (seed -> result)
    with reconstruction filter ``rfilter``, and the target image of both
    renderers' losses: jaxrender's render of the unperturbed scene at
    TARGET_SPP_FACTOR x spp, seed TARGET_SEED (one fixed image for both, so
    that they estimate the same gradient)."""
    import jaxrender
    scene = jaxrender.load_dict(set_filter(scene_dict(jaxrender.cornell_box, args.res, args.spp, args.max_depth),
                                           rfilter))
    target = np.asarray(jaxrender.render(scene, spp=TARGET_SPP_FACTOR * args.spp, seed=TARGET_SEED))
    return grad_compare.jaxrender_runners(jaxrender, scene, SCALE, target, args.spp), target


def mitsuba_runners(args, mi, rfilter: str, target: np.ndarray) -> dict:
    """Mitsuba prb's primal-loss and render + dr.backward runners (seed ->
    result), the loss against the same ``target`` image as jaxrender's."""
    d = set_filter(scene_dict(mi.cornell_box, args.res, args.spp, args.max_depth, "prb"), rfilter)
    return grad_compare.mitsuba_runners(mi, mi.load_dict(d), SCALE, target, args.spp)


# ---------------------------------------------------------------- equal error
def bench_efficiency(args, filters: list[str]) -> dict:
    """Per filter: both renderers' value_and_grad over --seeds seeds, and
    their primal losses, all four taking turns seed by seed (then ours
    alone: ``grad_compare.run_all``)."""
    mi = import_mitsuba("llvm_ad_rgb")
    if isinstance(mi, str):
        print(f"   {mi}: timing jaxrender alone")
        mi = None
    out: dict = {"rows": []}
    for rfilter in filters:
        runners, target = jaxrender_runners(args, rfilter)
        if mi is not None:
            runners.update(mitsuba_runners(args, mi, rfilter, target))
        times, results, own = grad_compare.run_all(runners, range(args.seeds))
        row = grad_compare.gradient_row("cornell box", rfilter, times, results, own)
        out["rows"].append(row)
        print(f"   {rfilter}: {grad_compare.timing_line(row)}", flush=True)
        if mi is not None:
            grad_compare.print_means(row, {k: 3 for k in KEYS})   # every parameter in KEYS is an RGB colour
    if mi is not None:
        grad_compare.print_table(out["rows"])
    return out


# ---------------------------------------------------------------- children
def child(args) -> None:
    """One configuration in this fresh process; prints one JSON line."""
    cap_address_space(args.mem_cap_gb)
    out = {"kind": args._child, "max_depth": args.max_depth, "spp": args.spp}
    try:
        import jax
        import jax.numpy as jnp
        jnp.zeros(1).block_until_ready()
        if args._child == "jaxrender":
            _, params, _, loss = jaxrender_setup(args.res, args.spp, args.max_depth)
            jax.block_until_ready(params)
            out["baseline_mb"] = mb(proc_status("VmHWM"))
            t0 = time.perf_counter()
            vg = jax.jit(jax.value_and_grad(loss), static_argnums=1)
            jax.block_until_ready(vg(params, 1))   # builds the kernels (spp is runtime data in them)
            compiled = vg.lower(params, args.spp).compile()
            out["compile_s"] = time.perf_counter() - t0
            run = lambda: compiled(params)
        else:
            sys.path.insert(0, HERE)
            import jaxrender
            from jax_pathtracer import PlainTracer
            scene = jaxrender.load_dict(scene_dict(jaxrender.cornell_box, args.res, args.spp, args.max_depth))
            tracer = PlainTracer(scene)
            params = {k: jnp.asarray(np.asarray(scene.params[k]) * SCALE[k], jnp.float32) for k in KEYS}
            target = jnp.asarray(np.load(args.target)) if args.target else jnp.zeros((args.res, args.res, 3))
            key = jax.random.key(0)
            jax.block_until_ready((params, target))
            out["baseline_mb"] = mb(proc_status("VmHWM"))

            def loss(p):
                return jnp.mean((tracer.render(p, key, args.spp) - target) ** 2)
            t0 = time.perf_counter()
            compiled = jax.jit(jax.value_and_grad(loss)).lower(params).compile()
            out["compile_s"] = time.perf_counter() - t0
            run = lambda: compiled(params)
        (value, grads), measured = measure_call(lambda: jax.block_until_ready(run()))
        out.update(measured, loss=float(value), grads={k: np.asarray(grads[k]).tolist() for k in KEYS}, ok=True)
    except Exception as exc:
        out.update(failure(exc))
    report(out)


def child_run(args, kind: str, max_depth: int, spp: int, target: str | None) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", kind, "--res", str(args.res), "--spp", str(spp),
           "--max-depth", str(max_depth), "--mem-cap-gb", str(args.mem_cap_gb)]
    if target:
        cmd += ["--target", target]
    return run_child(cmd, args.child_timeout, {"kind": kind, "max_depth": max_depth, "spp": spp})


# ---------------------------------------------------------------- image check
def image_check(args) -> dict:
    """Plain tracer vs jaxrender image means (max_depth --max-depth, --check-spp)."""
    import jax

    import jaxrender
    sys.path.insert(0, HERE)
    from jax_pathtracer import PlainTracer
    res, spp = args.check_res, args.check_spp
    scene = jaxrender.load_dict(scene_dict(jaxrender.cornell_box, res, spp, args.max_depth))
    ref = np.asarray(jaxrender.render(scene, spp=spp, seed=3))
    tracer = PlainTracer(scene)
    img = np.asarray(jax.jit(lambda k: tracer.render(None, k, spp))(jax.random.key(3)))
    rel = img.mean((0, 1)) / ref.mean((0, 1)) - 1
    return {"res": res, "spp": spp, "plain_mean": img.mean((0, 1)).tolist(), "jaxrender_mean": ref.mean((0, 1)).tolist(),
            "rel_diff": rel.tolist(), "ok": bool(np.abs(rel).max() < 0.1), "finite": bool(np.isfinite(img).all())}


def fmt_grads(g: dict) -> str:
    return "  ".join(f"{k.split('.')[0]}=[" + ", ".join(f"{x:+.3e}" for x in g[k]) + "]" for k in KEYS)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--max-depth", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=8, help="gradients per renderer and filter (>= 2)")
    ap.add_argument("--filters", default=",".join(FILTERS), help="comma list of box, tent, gaussian")
    ap.add_argument("--parts", default="efficiency", help=f"comma list of {', '.join(PARTS)}, or all")
    ap.add_argument("--mem-depths", default="4,64")
    ap.add_argument("--mem-spps", default="16,256")
    ap.add_argument("--mem-cap-gb", type=float, default=12.0, help="address-space cap of each child (0: none)")
    ap.add_argument("--child-timeout", type=float, default=240.0)
    ap.add_argument("--check-res", type=int, default=64)
    ap.add_argument("--check-spp", type=int, default=64)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--_child", choices=["jaxrender", "plain"], help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        return child(args)
    parts = set(PARTS) if args.parts == "all" else set(filter(None, args.parts.split(",")))
    if not parts or parts - set(PARTS):
        raise SystemExit(f"--parts: {args.parts!r}: choose from {', '.join(PARTS)}, or all")
    filters = parse_filters(args.filters)
    if args.seeds < 2:
        raise SystemExit("--seeds must be at least 2")
    depths = [int(x) for x in args.mem_depths.split(",")]
    spps = [int(x) for x in args.mem_spps.split(",")]
    configs = [(d, s) for d in depths for s in spps]
    results: dict = {"config": {k: v for k, v in vars(args).items() if not k.startswith("_")}}
    t_start = note_load()
    print(f"Cornell box {args.res}x{args.res}, spp {args.spp}, max_depth {args.max_depth}, "
          f"d loss / d {{{', '.join(KEYS)}}}\n")

    ours_grad_s = None     # jaxrender's value_and_grad time with the scene's own (gaussian) filter
    if "efficiency" in parts:
        print(f"1. value_and_grad: jaxrender vs Mitsuba 3 prb (llvm_ad_rgb) at equal error, {args.seeds} seeds, "
              f"alternating")
        try:
            eff = bench_efficiency(args, filters)
            rows = eff["rows"]
            ours_grad_s = next((r for r in rows if r["filter"] == "gaussian"), rows[0])["times"]["ours grad"]
        except Exception as exc:
            eff = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(f"   failed: {eff['error']}")
        results["efficiency"] = eff
        print()

    if "memory" in parts:
        print(f"2. jaxrender gradient memory ({args.res}x{args.res}; fresh process each, RSS in MiB)")
        print(f"   {'max_depth':>9} {'spp':>5} {'baseline':>9} {'peak':>8} {'peak-base':>9} {'call':>7} {'wall s':>7} {'cpu s':>7}")
        rows = []
        for d, s in configs:
            r = child_run(args, "jaxrender", d, s, None)
            rows.append(r)
            if r.get("ok"):
                print(f"   {d:>9} {s:>5} {r['baseline_mb']:9.0f} {r['peak_mb']:8.0f} "
                      f"{r['peak_mb'] - r['baseline_mb']:9.0f} {r['call_mb']:7.1f} {r['time_s']:7.2f} {r['cpu_s']:7.2f}")
            else:
                print(f"   {d:>9} {s:>5}  {describe_failure(r, args.mem_cap_gb)}")
        results["jaxrender_memory"] = rows
        ok = [r for r in rows if r.get("ok")]
        if len(ok) > 1:
            deltas = [r["peak_mb"] - r["baseline_mb"] for r in ok]
            print(f"   peak-base spread: {min(deltas):.0f} .. {max(deltas):.0f} MiB (target: flat)")
        print()

    if "plain" in parts:
        print("3. plain JAX path tracer (jax_pathtracer.py) under jax.value_and_grad")
        try:
            chk = image_check(args)
            results["plain_image_check"] = chk
            print(f"   image check ({chk['res']}x{chk['res']}, {chk['spp']} spp, max_depth {args.max_depth}): "
                  f"mean RGB plain {np.round(chk['plain_mean'], 4).tolist()} vs jaxrender "
                  f"{np.round(chk['jaxrender_mean'], 4).tolist()}, rel diff "
                  f"{np.round(np.array(chk['rel_diff']) * 100, 2).tolist()} % -> {'OK' if chk['ok'] else 'MISMATCH'}")
        except Exception as exc:
            results["plain_image_check"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"   image check failed: {type(exc).__name__}: {str(exc)[:300]}")
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            target = None
            try:
                import jaxrender
                scene = jaxrender.load_dict(scene_dict(jaxrender.cornell_box, args.res, args.spp, args.max_depth))
                target = os.path.join(tmp, "target.npy")
                np.save(target, np.asarray(jaxrender.render(scene, spp=args.spp, seed=1)))
            except Exception as exc:
                print(f"   (no jaxrender target image, loss against zeros: {exc})")
                target = None
            print(f"   {'max_depth':>9} {'spp':>5} {'baseline':>9} {'peak':>8} {'peak-base':>9} {'call':>7} "
                  f"{'wall s':>7} {'cpu s':>7} {'compile s':>9}")
            rows = []
            for d, s in [(args.max_depth, args.spp)] + configs:
                r = child_run(args, "plain", d, s, target)
                rows.append(r)
                if r.get("ok"):
                    print(f"   {d:>9} {s:>5} {r['baseline_mb']:9.0f} {r['peak_mb']:8.0f} "
                          f"{r['peak_mb'] - r['baseline_mb']:9.0f} {r['call_mb']:7.1f} {r['time_s']:7.2f} {r['cpu_s']:7.2f} "
                          f"{r['compile_s']:9.2f}")
                else:
                    print(f"   {d:>9} {s:>5}  {describe_failure(r, args.mem_cap_gb)}")
            results["plain_grad"] = rows
            main_row = rows[0]
            if main_row.get("ok") and ours_grad_s:
                ratio = main_row["time_s"] / ours_grad_s
                results["plain_over_jaxrender"] = ratio
                print(f"   plain JAX / jaxrender gradient time at max_depth {args.max_depth}, spp {args.spp}: "
                      f"{ratio:.1f}x wall (plain: no Russian roulette, no BVH)")
            if main_row.get("ok"):
                print(f"   grads plain:     {fmt_grads(main_row['grads'])}")
        print()

    finish(results, t_start, args.json)


if __name__ == "__main__":
    main()
