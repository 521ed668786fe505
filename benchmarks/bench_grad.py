"""Gradient benchmark: jaxrender's adjoint vs its primal, Mitsuba 3 prb and a plain JAX tracer.

    apt-get install -y libllvm19     # Mitsuba's LLVM backend needs LLVM >= 19
    python benchmarks/bench_grad.py [--res 128] [--spp 16] [--max-depth 8] [--reps 3] [--json out.json]

Scene: the built-in Cornell box (``jaxrender.cornell_box()``, the same dict as
``mitsuba.cornell_box()``) at --res x --res. Loss:
``mean((render(params) - target) ** 2)`` differentiated w.r.t. the red and
green wall reflectances and the light's radiance, evaluated at perturbed
values (red x0.8, green x1.2, radiance x0.9); the target is each renderer's
own render of the unperturbed scene (seed 1). Times are warm (after a first
call that compiles), median of --reps, as wall time and as process CPU time
(all threads; less sensitive to other load on the machine).

1. jaxrender: time of ``jax.jit(jax.value_and_grad(loss))`` / time of
   ``jax.jit(loss)`` (target <= 3x).
2. Mitsuba 3 ``prb`` (variant llvm_ad_rgb, same max_depth, rr_depth 5 as
   ours): render + loss + ``dr.backward``, and the ratio Mitsuba time /
   jaxrender time (target > 1). Prints both gradients side by side.
3. jaxrender gradient peak memory for max_depth in --mem-depths x spp in
   --mem-spps, each in a fresh subprocess (target: flat). Columns: peak RSS
   after imports + scene load (baseline), peak RSS at the end, their
   difference, and the measured call's own peak above the RSS just before
   it (VmHWM reset through /proc/self/clear_refs after the compile), and
   the time of that call. Peaks are /proc/self/status VmHWM, not
   ``ru_maxrss``: on Linux a child's ``ru_maxrss`` starts from its parent's
   peak (inherited across fork + exec), which would hide everything below
   the parent's ~1 GiB. (``ru_maxrss`` is still written to --json.)
4. A plain JAX path tracer (``benchmarks/jax_pathtracer.py``) under
   ``jax.value_and_grad`` for the same configurations (plus --max-depth x
   --spp), each in a fresh subprocess with its address space capped at
   --mem-cap-gb; a configuration that runs out of memory (or past
   --child-timeout) is reported as such. Its image mean is checked against
   jaxrender's first.

XLA:CPU's YNN fusions in jaxlib 0.10.2 miscompile brute-force ray/triangle
code at some array sizes (wrong hits for 910 <= N < 65536 rows; see also
jax-ml/jax#39257 and #37465), so this script turns them off
(``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=``) in every process.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import time

YNN_OFF = "--xla_cpu_experimental_ynn_fusion_type="
if YNN_OFF not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_OFF).strip()

import numpy as np

LIBLLVM = "/usr/lib/x86_64-linux-gnu/libLLVM-19.so"
KEYS = ("red.reflectance.value", "green.reflectance.value", "light.emitter.radiance.value")
SCALE = {"red.reflectance.value": 0.8, "green.reflectance.value": 1.2, "light.emitter.radiance.value": 0.9}
HERE = os.path.dirname(os.path.abspath(__file__))


def scene_dict(factory, res: int, spp: int, max_depth: int, integrator: str = "path") -> dict:
    d = factory()
    d["sensor"]["film"]["width"] = res
    d["sensor"]["film"]["height"] = res
    d["sensor"]["sampler"]["sample_count"] = spp
    d["integrator"] = {"type": integrator, "max_depth": max_depth}
    return d


def median_time(reps: int, run) -> tuple[float, float]:
    """Median wall time and median process CPU time (all threads) of run()."""
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def mb(kb: float) -> float:
    return kb / 1024.0


def proc_status(field: str) -> float:
    """A /proc/self/status memory field in kB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    return float("nan")


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")      # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- jaxrender
def jaxrender_setup(res: int, spp: int, max_depth: int):
    """(scene, params at the perturbed values, target image, loss(params, spp))."""
    import jax.numpy as jnp

    import jaxrender
    scene = jaxrender.load_dict(scene_dict(jaxrender.cornell_box, res, spp, max_depth))
    params = {k: jnp.asarray(np.asarray(scene.params[k]) * SCALE[k], jnp.float32) for k in KEYS}
    target = jaxrender.render(scene, spp=spp, seed=1)
    extra = {"method": "prb"} if "method" in inspect.signature(jaxrender.render).parameters else {}

    def loss(p, n_spp):
        return jnp.mean((jaxrender.render(scene, p, spp=n_spp, seed=0, **extra) - target) ** 2)
    return scene, params, target, loss


def bench_jaxrender(args) -> dict:
    import jax
    _, params, _, loss = jaxrender_setup(args.res, args.spp, args.max_depth)
    primal = jax.jit(lambda p: loss(p, args.spp))
    vg = jax.jit(jax.value_and_grad(lambda p: loss(p, args.spp)))
    t0 = time.perf_counter()
    jax.block_until_ready(primal(params))
    first_primal = time.perf_counter() - t0
    t0 = time.perf_counter()
    value, grads = jax.block_until_ready(vg(params))
    first_grad = time.perf_counter() - t0
    t_primal, c_primal = median_time(args.reps, lambda: jax.block_until_ready(primal(params)))
    t_grad, c_grad = median_time(args.reps, lambda: jax.block_until_ready(vg(params)))
    return {"primal_s": t_primal, "grad_s": t_grad, "ratio": t_grad / t_primal, "primal_cpu_s": c_primal,
            "grad_cpu_s": c_grad, "first_primal_s": first_primal,
            "first_grad_s": first_grad, "loss": float(value), "grads": {k: np.asarray(grads[k]).tolist() for k in KEYS}}


# ---------------------------------------------------------------- Mitsuba
def bench_mitsuba(args) -> dict:
    if not os.path.exists(LIBLLVM):
        return {"error": f"Mitsuba llvm_ad_rgb needs {LIBLLVM}: apt-get install -y libllvm19"}
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", LIBLLVM)
    import drjit as dr
    import mitsuba as mi
    mi.set_variant("llvm_ad_rgb")
    scene = mi.load_dict(scene_dict(mi.cornell_box, args.res, args.spp, args.max_depth, "prb"))
    params = mi.traverse(scene)
    missing = [k for k in KEYS if k not in params]
    if missing:
        return {"error": f"mi.traverse lacks {missing}"}
    target = mi.render(scene, params, spp=args.spp, seed=1)
    dr.eval(target)
    for k in KEYS:
        params[k] = params[k] * SCALE[k]
    params.update()

    def primal():
        img = mi.render(scene, params, spp=args.spp, seed=0)
        return float(np.asarray(dr.mean(dr.square(img - target), axis=None)).reshape(-1)[0])

    def grad():
        for k in KEYS:
            dr.enable_grad(params[k])
        params.update()
        img = mi.render(scene, params, spp=args.spp, seed=0)
        loss = dr.mean(dr.square(img - target), axis=None)
        dr.backward(loss)
        g = {k: np.asarray(dr.grad(params[k])).reshape(-1).tolist() for k in KEYS}
        for k in KEYS:
            dr.disable_grad(params[k])
        params.update()
        return float(np.asarray(loss).reshape(-1)[0]), g

    t0 = time.perf_counter()
    primal()
    first_primal = time.perf_counter() - t0
    t0 = time.perf_counter()
    value, g = grad()
    first_grad = time.perf_counter() - t0
    t_primal, c_primal = median_time(args.reps, primal)
    t_grad, c_grad = median_time(args.reps, grad)
    return {"primal_s": t_primal, "grad_s": t_grad, "ratio": t_grad / t_primal, "primal_cpu_s": c_primal,
            "grad_cpu_s": c_grad, "first_primal_s": first_primal,
            "first_grad_s": first_grad, "loss": value, "grads": g}


# ---------------------------------------------------------------- children
def child(args) -> None:
    """One configuration in this fresh process; prints one JSON line."""
    cap = int(args.mem_cap_gb * (1 << 30))
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
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
        before = mb(proc_status("VmHWM"))
        rss = mb(proc_status("VmRSS"))
        reset = reset_peak()
        t0, c0 = time.perf_counter(), time.process_time()
        value, grads = jax.block_until_ready(run())
        out["time_s"] = time.perf_counter() - t0
        out["cpu_s"] = time.process_time() - c0
        hwm = mb(proc_status("VmHWM"))
        out["peak_mb"] = max(before, hwm)
        out["call_mb"] = hwm - rss if reset else float("nan")
        out["ru_maxrss_mb"] = mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        out["loss"] = float(value)
        out["grads"] = {k: np.asarray(grads[k]).tolist() for k in KEYS}
        out["ok"] = True
    except MemoryError as exc:
        out.update(ok=False, oom=True, error=f"MemoryError: {exc}"[:300])
    except Exception as exc:  # XLA reports allocation failures as RESOURCE_EXHAUSTED
        msg = f"{type(exc).__name__}: {exc}"
        oom = any(s in msg for s in ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "bad_alloc",
                                     "Cannot allocate memory"))
        out.update(ok=False, oom=oom, error=msg[:300])
    print("@@" + json.dumps(out), flush=True)


def run_child(args, kind: str, max_depth: int, spp: int, target: str | None) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", kind, "--res", str(args.res), "--spp", str(spp),
           "--max-depth", str(max_depth), "--mem-cap-gb", str(args.mem_cap_gb)]
    if target:
        cmd += ["--target", target]
    res = {"kind": kind, "max_depth": max_depth, "spp": spp}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout)
    except subprocess.TimeoutExpired:
        return dict(res, ok=False, timeout=True, error=f"timeout after {args.child_timeout:.0f} s")
    res["wall_s"] = time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@")]
    if lines:
        return dict(res, **json.loads(lines[-1][2:]), wall_s=res["wall_s"])
    err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    oom = p.returncode in (-9, -6, 137, 134) or any(s in p.stderr for s in ("bad_alloc", "RESOURCE_EXHAUSTED",
                                                                            "Out of memory", "MemoryError"))
    return dict(res, ok=False, oom=oom, error=f"exit {p.returncode}: {err[:300]}")


def describe(r: dict, cap: float) -> str:
    if r.get("ok"):
        return ""
    if r.get("timeout"):
        return r["error"]
    if r.get("oom"):
        return f"OOM at max_depth {r['max_depth']}, spp {r['spp']} (cap {cap:g} GiB)"
    return "failed: " + r.get("error", "?")


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
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mem-depths", default="4,64")
    ap.add_argument("--mem-spps", default="16,256")
    ap.add_argument("--mem-cap-gb", type=float, default=12.0, help="address-space cap of each child (0: none)")
    ap.add_argument("--child-timeout", type=float, default=240.0)
    ap.add_argument("--check-res", type=int, default=64)
    ap.add_argument("--check-spp", type=int, default=64)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: jaxrender,mitsuba,memory,plain")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--_child", choices=["jaxrender", "plain"], help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        return child(args)
    skip = set(filter(None, args.skip.split(",")))
    depths = [int(x) for x in args.mem_depths.split(",")]
    spps = [int(x) for x in args.mem_spps.split(",")]
    configs = [(d, s) for d in depths for s in spps]
    results: dict = {"config": {k: v for k, v in vars(args).items() if not k.startswith("_")}}
    t_start = time.perf_counter()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"note: load average {load:.2f} at start on {os.cpu_count()} cores: other processes may skew times")
    print(f"Cornell box {args.res}x{args.res}, spp {args.spp}, max_depth {args.max_depth}, "
          f"d loss / d {{{', '.join(KEYS)}}}; warm, median of {args.reps}\n")

    jr = None
    if "jaxrender" not in skip:
        try:
            jr = bench_jaxrender(args)
        except Exception as exc:
            jr = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        results["jaxrender"] = jr
        print("1. jaxrender gradient vs primal")
        if "error" in jr:
            print(f"   jaxrender failed: {jr['error']}")
        else:
            print(f"   {'':29} {'wall s':>8} {'cpu s':>8}")
            print(f"   primal (jit loss)             {jr['primal_s']:8.3f} {jr['primal_cpu_s']:8.3f}   "
                  f"(first call {jr['first_primal_s']:.2f} s)")
            print(f"   gradient (jit value_and_grad) {jr['grad_s']:8.3f} {jr['grad_cpu_s']:8.3f}   "
                  f"(first call {jr['first_grad_s']:.2f} s)")
            print(f"   gradient / primal = {jr['ratio']:.2f}x wall, {jr['grad_cpu_s'] / jr['primal_cpu_s']:.2f}x cpu"
                  f"  (target <= 3x)")
        print()

    if "mitsuba" not in skip:
        try:
            mi_r = bench_mitsuba(args)
        except Exception as exc:
            mi_r = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        results["mitsuba"] = mi_r
        print("2. Mitsuba 3 prb (llvm_ad_rgb) vs jaxrender")
        if "error" in mi_r:
            print(f"   Mitsuba failed: {mi_r['error']}")
        else:
            print(f"   {'':29} {'wall s':>8} {'cpu s':>8}")
            print(f"   mitsuba primal                {mi_r['primal_s']:8.3f} {mi_r['primal_cpu_s']:8.3f}")
            print(f"   mitsuba render + dr.backward  {mi_r['grad_s']:8.3f} {mi_r['grad_cpu_s']:8.3f}   "
                  f"(gradient / primal {mi_r['ratio']:.2f}x wall)")
            if jr and "error" not in jr:
                ratio = mi_r["grad_s"] / jr["grad_s"]
                results["mitsuba_over_jaxrender"] = ratio
                print(f"   ratio mitsuba / jaxrender gradient = {ratio:.2f}x wall, "
                      f"{mi_r['grad_cpu_s'] / jr['grad_cpu_s']:.2f}x cpu  (target > 1)")
                print(f"   ratio mitsuba / jaxrender primal   = {mi_r['primal_s'] / jr['primal_s']:.2f}x wall, "
                      f"{mi_r['primal_cpu_s'] / jr['primal_cpu_s']:.2f}x cpu")
                print(f"   loss:  jaxrender {jr['loss']:.5g}  mitsuba {mi_r['loss']:.5g}")
                print(f"   grads jaxrender: {fmt_grads(jr['grads'])}")
            print(f"   grads mitsuba:   {fmt_grads(mi_r['grads'])}")
        print()

    if "memory" not in skip:
        print(f"3. jaxrender gradient memory ({args.res}x{args.res}; fresh process each, RSS in MiB)")
        print(f"   {'max_depth':>9} {'spp':>5} {'baseline':>9} {'peak':>8} {'peak-base':>9} {'call':>7} {'wall s':>7} {'cpu s':>7}")
        rows = []
        for d, s in configs:
            r = run_child(args, "jaxrender", d, s, None)
            rows.append(r)
            if r.get("ok"):
                print(f"   {d:>9} {s:>5} {r['baseline_mb']:9.0f} {r['peak_mb']:8.0f} "
                      f"{r['peak_mb'] - r['baseline_mb']:9.0f} {r['call_mb']:7.1f} {r['time_s']:7.2f} {r['cpu_s']:7.2f}")
            else:
                print(f"   {d:>9} {s:>5}  {describe(r, args.mem_cap_gb)}")
        results["jaxrender_memory"] = rows
        ok = [r for r in rows if r.get("ok")]
        if len(ok) > 1:
            deltas = [r["peak_mb"] - r["baseline_mb"] for r in ok]
            print(f"   peak-base spread: {min(deltas):.0f} .. {max(deltas):.0f} MiB (target: flat)")
        print()

    if "plain" not in skip:
        print("4. plain JAX path tracer (jax_pathtracer.py) under jax.value_and_grad")
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
                r = run_child(args, "plain", d, s, target)
                rows.append(r)
                if r.get("ok"):
                    print(f"   {d:>9} {s:>5} {r['baseline_mb']:9.0f} {r['peak_mb']:8.0f} "
                          f"{r['peak_mb'] - r['baseline_mb']:9.0f} {r['call_mb']:7.1f} {r['time_s']:7.2f} {r['cpu_s']:7.2f} "
                          f"{r['compile_s']:9.2f}")
                else:
                    print(f"   {d:>9} {s:>5}  {describe(r, args.mem_cap_gb)}")
            results["plain_grad"] = rows
            main_row = rows[0]
            if main_row.get("ok") and jr and "error" not in jr:
                ratio = main_row["time_s"] / jr["grad_s"]
                results["plain_over_jaxrender"] = ratio
                print(f"   plain JAX / jaxrender gradient time at max_depth {args.max_depth}, spp {args.spp}: "
                      f"{ratio:.1f}x wall, {main_row['cpu_s'] / jr['grad_cpu_s']:.1f}x cpu (plain: no Russian "
                      f"roulette, no BVH)")
                print(f"   grads plain:     {fmt_grads(main_row['grads'])}")
        print()

    results["total_s"] = time.perf_counter() - t_start
    results["loadavg_end"] = os.getloadavg()[0]
    print(f"total {results['total_s']:.0f} s (load average at the end {results['loadavg_end']:.2f})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
