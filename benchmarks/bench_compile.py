"""Compile latency: how long the first image and the first gradient take.

    python benchmarks/bench_compile.py [--reps 3] [--size 64] [--spp 4]
    python benchmarks/bench_compile.py --runtime [--runtime-size 256 --runtime-spp 64]

Each scenario runs in a fresh Python process with a private, initially
empty kernel cache (``$JAXRENDER_CACHE_DIR`` in a temporary directory, so
nothing is read from or written to the user's cache):

* cold primal: ``jaxrender.render`` of the Cornell box, empty cache;
* warm primal: the same in a new process, the kernel's object code on disk;
* cold grad: the first ``jax.value_and_grad`` of a loss of
  ``red.reflectance.value`` (primal and adjoint kernels), empty cache;
* warm grad: the same in a new process with the cache the cold run filled;
* cold / warm geometry: the first ``jax.value_and_grad`` of a loss of the
  small box's ``vertex_positions`` (the kernels of moving geometry: primal,
  adjoint with edge samples, film boundary).

The first call is split into phases by timing wrappers around the functions
that do each job (time spent in a nested phase counts for the inner one).
Phases that run on a background thread (kernels compiled concurrently) are
summed over threads, so the phases may add up to more than the wall time;
"other" is the rest of the first call on the calling thread (JAX tracing,
dispatch, eager operations, Python). "steady call" is a second identical
call in the same process: the kernel run plus dispatch. Each cell is the
minimum over ``--reps`` runs (the machine may be shared and noisy).

``--cpu`` adds CPU seconds per phase (the calling thread's, or for XLA's
compile the whole process's, which then includes a concurrent background
compile): steadier than wall time when other jobs share the machine.

``--runtime`` renders a larger image (default 256x256, 64 spp, and a
value_and_grad at 16 spp) in one process and prints the best of ``--reps``
steady-state calls: the kernel run time that a compile-time optimisation
must not slow down.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEY = "red.reflectance.value"
GEOMETRY_KEY = "small-box.vertex_positions"

PHASES = [
    ("import_jax", "Python import: jax"),
    ("import_jaxrender", "Python import: jaxrender (after jax)"),
    ("scene", "scene load + BVH"),
    ("ir_trace", "IR tracing (ir.trace, autodiff)"),
    ("ir_passes", "IR passes (ir/passes.py)"),
    ("llvm_ir", "LLVM IR emission (codegen.py, text)"),
    ("llvm_parse", "LLVM IR parse + verify"),
    ("llvm_opt", "LLVM optimisation passes"),
    ("llvm_codegen", "LLVM machine code generation"),
    ("cache", "cache key + disk cache I/O"),
    ("load", "object loading + FFI registration"),
    ("jax_lower", "JAX lowering (jaxpr -> MLIR)"),
    ("xla", "XLA compile"),
    ("other", "other: JAX tracing, dispatch, eager ops, run"),
    ("first_call", "= first call (wall)"),
    ("steady", "steady call (kernel run + dispatch)"),
]


# ---------------------------------------------------------------------------
# Child: one scenario in this process
# ---------------------------------------------------------------------------

class PhaseTimer:
    """Exclusive wall time per phase, per thread: a phase entered inside
    another one is subtracted from the outer phase."""

    def __init__(self):
        self.cpu = defaultdict(float)
        self.totals = defaultdict(float)
        self.main_totals = defaultdict(float)
        self.local = threading.local()
        self.main = threading.get_ident()
        self.lock = threading.Lock()

    def wrap(self, phase: str, fn, clock=time.thread_time):
        if getattr(fn, "_bench_phase", None):
            return fn
        timer = self

        def wrapped(*args, **kwargs):
            stack = timer.local.__dict__.setdefault("stack", [])
            stack.append([0.0, 0.0])
            t0, c0 = time.perf_counter(), clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed, cpu = time.perf_counter() - t0, clock() - c0
                nested, nested_cpu = stack.pop()
                if stack:
                    stack[-1][0] += elapsed
                    stack[-1][1] += cpu
                with timer.lock:
                    timer.totals[phase] += elapsed - nested
                    timer.cpu[phase] += cpu - nested_cpu
                    if threading.get_ident() == timer.main:
                        timer.main_totals[phase] += elapsed - nested
        wrapped._bench_phase = phase
        wrapped.__wrapped__ = fn
        return wrapped

    def patch_function(self, module, name: str, phase: str) -> None:
        """Wrap ``module.name`` wherever a jaxrender module imported it by name."""
        fn = getattr(module, name, None)
        if fn is None:
            return
        w = self.wrap(phase, fn)
        for mod in list(sys.modules.values()):
            if mod is None or not (mod is module or getattr(mod, "__name__", "").startswith("jaxrender")):
                continue
            for attr, val in list(vars(mod).items()):
                if val is fn:
                    setattr(mod, attr, w)

    def patch_method(self, cls, name: str, phase: str) -> None:
        fn = getattr(cls, name, None)
        if fn is not None:
            setattr(cls, name, self.wrap(phase, fn))


def instrument(timer: PhaseTimer) -> None:
    import llvmlite.binding as llvm
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from llvmlite.binding import newpassmanagers, targets

    from jaxrender.ir import kernel, passes
    from jaxrender.lowering import cache, cpu

    timer.patch_function(kernel, "trace", "ir_trace")
    for name in ("eliminate_dead_code",):
        timer.patch_function(passes, name, "ir_passes")
    timer.patch_function(cpu, "generate_llvm_ir", "llvm_ir")
    # Named steps of the CPU backend where it has them, llvmlite's entry
    # points otherwise (either way the same work is timed).
    for name, phase in (("parse_llvm_ir", "llvm_parse"), ("optimize_module", "llvm_opt"),
                        ("emit_object", "llvm_codegen")):
        timer.patch_function(cpu, name, phase)
    llvm.parse_assembly = timer.wrap("llvm_parse", llvm.parse_assembly)
    timer.patch_method(newpassmanagers.ModulePassManager, "run", "llvm_opt")
    timer.patch_method(targets.TargetMachine, "emit_object", "llvm_codegen")
    for name in ("kernel_key", "cached_kernel_key"):
        timer.patch_function(cpu, name, "cache")
    timer.patch_function(cache, "load", "cache")
    timer.patch_function(cache, "store", "cache")
    timer.patch_function(cpu, "load_object", "load")
    timer.patch_function(cpu, "register_ffi_target", "load")
    mlir.lower_jaxpr_to_module = timer.wrap("jax_lower", mlir.lower_jaxpr_to_module)
    # XLA compiles on its own threads: CPU time of the whole process.
    compiler.backend_compile_and_load = timer.wrap("xla", compiler.backend_compile_and_load, time.process_time)


def child(mode: str, size: int, spp: int) -> dict:
    t0 = time.perf_counter()
    import jax  # noqa: F401
    t1 = time.perf_counter()
    import jax.numpy as jnp

    import jaxrender
    t2 = time.perf_counter()
    timer = PhaseTimer()
    instrument(timer)
    import numpy as np
    from jaxrender.lowering import cpu

    t3 = time.perf_counter()
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    scene = jaxrender.load_dict(d)
    t4 = time.perf_counter()

    if mode == "primal":
        def call(seed):
            return jaxrender.render(scene, spp=spp, seed=seed).block_until_ready()
    else:
        key = GEOMETRY_KEY if mode == "geometry" else KEY
        x0 = jnp.asarray(scene.params[key], jnp.float32)

        def call(seed):
            def loss(x):
                return jnp.mean(jaxrender.render(scene, {key: x}, spp=spp, seed=seed) ** 2)
            v, g = jax.value_and_grad(loss)(x0)
            return g.block_until_ready()

    timer.totals.clear()
    timer.main_totals.clear()
    timer.cpu.clear()
    s0, c0 = time.perf_counter(), time.process_time()
    out = call(0)
    first, first_cpu = time.perf_counter() - s0, time.process_time() - c0
    phases = dict(timer.totals)
    cpu_phases = dict(timer.cpu, first_call=first_cpu, other=first_cpu - sum(timer.cpu.values()))
    main = dict(timer.main_totals)
    s1 = time.perf_counter()
    call(1)
    steady = time.perf_counter() - s1
    assert np.all(np.isfinite(np.asarray(out)))
    phases.update(import_jax=t1 - t0, import_jaxrender=t2 - t1, scene=t4 - t3,
                  other=first - sum(main.values()), first_call=first, steady=steady)
    background = {p: phases[p] - main.get(p, 0.0) for p in timer.totals if phases[p] - main.get(p, 0.0) > 1e-3}
    return {"phases": phases, "cpu": cpu_phases, "stats": dict(cpu.stats), "background": background}


def child_runtime(size: int, spp: int, grad_spp: int, reps: int) -> dict:
    import jax
    import jax.numpy as jnp

    import jaxrender
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = size
    scene = jaxrender.load_dict(d)
    x0 = jnp.asarray(scene.params[KEY], jnp.float32)

    def primal(seed):
        return jaxrender.render(scene, spp=spp, seed=seed).block_until_ready()

    def grad(seed):
        loss = lambda x: jnp.mean(jaxrender.render(scene, {KEY: x}, spp=grad_spp, seed=seed) ** 2)
        return jax.value_and_grad(loss)(x0)[1].block_until_ready()

    out = {}
    for name, fn in (("primal", primal), ("grad", grad)):
        fn(0)
        walls, cpus = [], []
        for r in range(reps):
            c0, w0 = time.process_time(), time.perf_counter()
            fn(r + 1)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        out[name] = {"wall": min(walls), "cpu": min(cpus), "walls": walls}
    return out


# ---------------------------------------------------------------------------
# Parent: fresh processes, private caches, the table
# ---------------------------------------------------------------------------

def run_child(args: list[str], cache_dir: str) -> dict:
    env = dict(os.environ, JAXRENDER_CACHE_DIR=cache_dir)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("JAXRENDER_DISABLE_DISK_CACHE", None)
    proc = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--spp", type=int, default=4)
    ap.add_argument("--runtime", action="store_true", help="measure the kernel run time instead")
    ap.add_argument("--runtime-size", type=int, default=256)
    ap.add_argument("--runtime-spp", type=int, default=64)
    ap.add_argument("--runtime-grad-spp", type=int, default=16)
    ap.add_argument("--scenarios", default="cold_primal,warm_primal,cold_grad,warm_grad",
                    help="comma list of cold_/warm_ primal, grad, geometry")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--cpu", action="store_true",
                    help="also print CPU seconds per phase (steadier than wall time on a busy machine)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        res = (child_runtime(args.runtime_size, args.runtime_spp, args.runtime_grad_spp, args.reps)
               if args.child == "runtime"
               else child(args.child, args.size, args.spp))
        print(json.dumps(res))
        return

    common = ["--size", str(args.size), "--spp", str(args.spp)]
    if args.runtime:
        with tempfile.TemporaryDirectory(prefix="jaxrender-bench-cache-") as d:
            r = run_child(["--child", "runtime", "--runtime-size", str(args.runtime_size),
                           "--runtime-spp", str(args.runtime_spp), "--runtime-grad-spp",
                           str(args.runtime_grad_spp), "--reps", str(args.reps)], d)
        n = args.runtime_size
        for name, what in (("primal", f"render {args.runtime_spp} spp"),
                           ("grad", f"value_and_grad {args.runtime_grad_spp} spp")):
            print(f"Cornell box {n}x{n}, {what}: best of {args.reps} {r[name]['wall']:.3f} s wall, "
                  f"{r[name]['cpu']:.3f} s CPU (all: {', '.join(f'{w:.3f}' for w in r[name]['walls'])})")
        if args.json:
            Path(args.json).write_text(json.dumps(r, indent=1))
        return

    scenarios = args.scenarios.split(",")
    runs: dict[str, list[dict]] = defaultdict(list)
    for rep in range(args.reps):
        for kind in ("primal", "grad", "geometry"):
            if not any(s.endswith(kind) for s in scenarios):
                continue
            d = tempfile.mkdtemp(prefix="jaxrender-bench-cache-")
            try:
                for temp in ("cold", "warm"):
                    if f"{temp}_{kind}" in scenarios or temp == "cold":
                        r = run_child(["--child", kind, *common], d)
                        if f"{temp}_{kind}" in scenarios:
                            runs[f"{temp}_{kind}"].append(r)
            finally:
                shutil.rmtree(d, ignore_errors=True)
            print(f"rep {rep + 1}/{args.reps} {kind} done", file=sys.stderr, flush=True)

    cols = [s for s in scenarios if runs[s]]
    print(f"\nCornell box {args.size}x{args.size}, {args.spp} spp; seconds, min of {args.reps} fresh processes")
    print(f"{'phase':46s}" + "".join(f"{c:>13s}" for c in cols))
    for key, label in PHASES:
        cells = []
        for c in cols:
            vals = [r["phases"].get(key, 0.0) for r in runs[c]]
            cells.append(f"{min(vals):13.3f}")
        print(f"{label:46s}" + "".join(cells))
    total = ("import_jax", "import_jaxrender", "scene", "first_call")
    print(f"{'import + scene + first call':46s}" + "".join(
        f"{min(sum(r['phases'][k] for k in total) for r in runs[c]):13.3f}" for c in cols))
    if args.cpu:
        print(f"\nCPU seconds (first call: all threads of the process), min of {args.reps}")
        for key, label in PHASES:
            if key in ("import_jax", "import_jaxrender", "scene", "steady", "other"):
                continue
            cells = "".join(f"{min(r['cpu'].get(key, 0.0) for r in runs[c]):13.3f}" for c in cols)
            print(f"{label.replace(' (wall)', ''):46s}" + cells)
    for c in cols:
        bg = [r["background"] for r in runs[c] if r["background"]]
        if bg:
            print(f"{c}: on background threads (summed above, min of runs): "
                  + ", ".join(f"{k} {min(b.get(k, 0.0) for b in bg):.3f}" for k in sorted(bg[0])))
        print(f"{c}: cpu.stats {runs[c][-1]['stats']}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
