"""Compile kernels for the host CPU and hand XLA a callable FFI target.

``compile_kernel(kernel, nb)`` returns the name of a registered XLA FFI
target running ``kernel`` with ``nb`` batch dimensions. Compilation is
cached in memory (per process) and on disk (object code, see :mod:`.cache`);
:data:`stats` counts what each request cost, so tests can prove that a warm
process does not compile. :func:`prefetch` starts a kernel's compile on a
background thread when it is known to be needed soon (the adjoint of a
``value_and_grad``), so that two kernels compile at once.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
from llvmlite.binding import ffi
from llvmlite import ir as ll

from ..ir.gcpause import gc_paused
from ..ir.kernel import Kernel
from . import bvh_traversal, cache, perfmap
from .abi import InfoLayout
from .codegen import ItemCodegen, PacketCodegen, build_worker, context_type, queries_bvh
from .ffi import build_handler

# Bump when the generated code's meaning changes without the IR text changing.
CODEGEN_VERSION = "2"

stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0, "prefetched": 0, "prefetch_hits": 0}

# The handler points an input with no rows at a zero row of its own, so the
# JAX bridge passes empty inputs unpadded (see primitives.kernel_call).
ZERO_ROW_FOR_EMPTY_INPUTS = True


class CompileError(RuntimeError):
    pass


_lock = threading.Lock()
_target_machine = None
_native_ready = False


def _new_target_machine(reloc: str = "pic"):
    global _native_ready
    if not _native_ready:  # once (its registration must not race a background compile)
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _native_ready = True
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=host_features().flatten(),
        opt=3, reloc=reloc, codemodel="jitdefault")


def target_machine():
    """A shared target machine (the GPU backends' host code, the emulator).
    CPU kernels compile with one of their own each, see ``_unlocked``; an
    execution engine takes ownership of the machine it is given, so engines
    get their own too (:func:`load_object`)."""
    global _target_machine
    if _target_machine is None:
        _target_machine = _new_target_machine()
    return _target_machine


@functools.cache
def host_features():
    """The host CPU's features (llvmlite's FeatureMap), asked of LLVM once:
    each query takes ~0.3 ms, and every render needs them for its kernels'
    cache keys and SIMD width."""
    return llvm.get_host_cpu_features()


@functools.cache
def _host_description() -> str:
    """The host's part of :func:`target_description`, asked of LLVM once
    (its queries took ~0.4 ms of every render's cache keys)."""
    target_machine()
    return "|".join([llvm.get_process_triple(), llvm.get_host_cpu_name(), host_features().flatten(),
                     llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info))])


def target_description() -> str:
    return "|".join([_host_description(), CODEGEN_VERSION, repr(sorted(PIPELINE.items()))])


def num_threads() -> int:
    """Worker threads per launch: ``$JAXRENDER_NUM_THREADS`` or the usable cores."""
    env = os.environ.get("JAXRENDER_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"JAXRENDER_NUM_THREADS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"JAXRENDER_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def simd_lanes(preferred: int | None = None) -> int:
    """Work items per SIMD packet: ``$JAXRENDER_SIMD_LANES``, else a
    kernel's ``preferred`` width (at most the host's), else what the host's
    widest float vectors hold (16 with AVX-512, 8 with AVX2, else 4).
    1 selects the one-lane code generator (real branches, no masks)."""
    env = os.environ.get("JAXRENDER_SIMD_LANES")
    if env:
        return check_lanes(env, "JAXRENDER_SIMD_LANES")
    if preferred is not None:
        return min(check_lanes(preferred, "preferred lanes"), simd_lanes())
    feats = host_features()
    if feats.get("avx512f"):
        return 16
    if feats.get("avx2") or feats.get("avx"):
        return 8
    return 4


def check_lanes(value, what: str) -> int:
    if str(value) not in ("1", "2", "4", "8", "16"):
        raise ValueError(f"{what} must be 1, 2, 4, 8 or 16, got {value!r}")
    return int(value)


def generate_llvm_ir(kernel: Kernel, nb: int, lanes: int | None = None) -> str:
    """The LLVM module (text) for ``kernel`` with ``nb`` batch dims. With
    SIMD packets (``lanes`` > 1) it declares the BVH traversal routines
    that :func:`shared_object` defines."""
    with gc_paused():
        return _module_text(kernel, nb, simd_lanes() if lanes is None else lanes)


def _module_text(kernel: Kernel, nb: int, lanes: int) -> str:
    m = ll.Module(name=f"jaxrender.{kernel.name}")
    m.triple = llvm.get_process_triple()
    layout = InfoLayout(nb, len(kernel.inputs), len(kernel.item_outputs), len(kernel.accumulators))
    ctx_t = context_type(kernel)
    if lanes == 1:
        item = ItemCodegen(kernel, m, layout, ctx_t).build_item()
        worker = build_worker(m, item, ctx_t)
    else:
        item = PacketCodegen(kernel, m, layout, ctx_t, lanes).build_item()
        worker = build_worker(m, item, ctx_t, lanes)
    build_handler(m, kernel, layout, ctx_t, worker, "jaxrender_handler")
    return str(m)


@dataclass
class CompiledKernel:
    key: str
    target_name: str
    engine: object          # keeps the machine code alive while XLA may call it
    handler_address: int


_compiled: dict[str, CompiledKernel] = {}


# The optimisation pipeline: LLVM's always-inliner, then a short list of
# function passes, not -O2's. The code generator already writes SIMD
# packets with values numbered and constants folded (ir/passes.py), and the
# kernels' loops (paths, samples, BVH traversal) run a data-dependent
# number of times: what -O2 adds beyond these passes (its inliner, loop
# passes, vectorizers) cost 60% of the optimisation time and changed no run
# time beyond noise. Measured on 2 cores: PRB adjoint (all BSDFs) 3.07 ->
# 1.13 s of passes, the path primal 0.88 -> 0.31 s (machine code
# generation unchanged, 2.3 and 0.65 s); steady-state renders, best of 10
# (Cornell box 128x128 64 spp, a 300k-triangle mesh under an environment
# map) 223 / 80 ms with either, the Cornell box's colour and camera
# gradients 182 / 201 ms with either. (-O2, speed level 2 without its
# vectorizers and unroller, had replaced -O3 at -25%.)
PIPELINE = dict(module_first=("always_inliner",),
                function=("sroa", "instruction_combine", "simplify_cfg", "new_gvn", "dead_code_elimination",
                          "simplify_cfg"),
                module_last=("global_dead_code_eliminate",))


def parse_llvm_ir(text: str, context=None):
    """The module ``text`` parsed into ``context`` (default: LLVM's global
    one) and verified."""
    try:
        mod = llvm.parse_assembly(text, context=context)
        mod.verify()
    except RuntimeError as exc:  # a code generator bug, not user error
        raise CompileError(f"jaxrender generated invalid LLVM IR: {exc}") from exc
    return mod


def _unlocked(fn):
    """The ctypes function beneath one of llvmlite's binding functions,
    called without llvmlite's process-wide lock. That lock serialises every
    LLVM call of the process, while LLVM itself lets threads work at once on
    modules of different LLVMContexts: each compile here has a context and
    a target machine of its own, so the two long calls (the optimisation
    pipeline, machine code generation) of two kernels run in parallel, and
    release the GIL. Falls back to the locked call if llvmlite's wrapper
    changes shape."""
    return getattr(fn, "_cfn", fn)


def optimize_module(mod, tm) -> None:
    """Run :data:`PIPELINE` on ``mod`` (see ``_unlocked``: no llvmlite lock)."""
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=2))

    def manager(create, passes):
        pm = create()
        for name in passes:
            getattr(pm, f"add_{name}_pass")()
        return pm
    run_module = _unlocked(ffi.lib.LLVMPY_RunNewModulePassManager)
    run_function = _unlocked(ffi.lib.LLVMPY_RunNewFunctionPassManager)
    run_module(manager(llvm.create_new_module_pass_manager, PIPELINE["module_first"]), mod, pb)
    fpm = manager(llvm.create_new_function_pass_manager, PIPELINE["function"])
    for fn in mod.functions:
        if not fn.is_declaration:
            run_function(fpm, fn, pb)
    run_module(manager(llvm.create_new_module_pass_manager, PIPELINE["module_last"]), mod, pb)


def emit_object(mod, tm) -> bytes:
    with ffi.OutputString() as err:
        buf = _unlocked(ffi.lib.LLVMPY_TargetMachineEmitToMemory)(tm, mod, 1, err)
        if not buf:
            raise CompileError(f"LLVM could not emit object code: {err}")
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buf), ffi.lib.LLVMPY_GetBufferSize(buf))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buf)


def _optimize_and_emit(text: str, reloc: str = "pic") -> bytes:
    context = llvm.create_context()  # private: see _unlocked
    mod = parse_llvm_ir(text, context)
    tm = _new_target_machine(reloc)
    optimize_module(mod, tm)
    obj = emit_object(mod, tm)
    mod.close()  # before its context
    return obj


_codegen_digest: str | None = None


def codegen_digest() -> str:
    """Hash of the code generator's own source. The machine code is a pure
    function of (kernel graph, batch dims, lanes, this source, target), so
    keying on these identifies the generated code without generating it."""
    global _codegen_digest
    if _codegen_digest is None:
        h = hashlib.sha256(CODEGEN_VERSION.encode())
        for f in sorted(Path(__file__).parent.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        _codegen_digest = h.hexdigest()
    return _codegen_digest


def kernel_key(kernel: Kernel, nb: int, lanes: int) -> str:
    """Cache key: kernel graph, batch dims, SIMD lanes, code generator,
    target CPU and features, llvmlite and LLVM versions."""
    parts = [target_description(), codegen_digest(), f"nb={nb}", f"lanes={lanes}", kernel.text]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _build_object(kernel: Kernel, nb: int, lanes: int, key: str) -> tuple[bytes, str]:
    """(object code, which stats counter it counts for): the disk cache's
    entry, else generated, optimised, emitted and stored. Safe to run on a
    background thread (it touches no shared state but the disk cache)."""
    obj = cache.load(key)
    if obj is not None:
        return obj, "disk_hits"
    obj = _optimize_and_emit(generate_llvm_ir(kernel, nb, lanes))
    cache.store(key, obj)
    return obj, "compiled"


def object_code(kernel: Kernel, nb: int = 0, lanes: int | None = None) -> tuple[str, bytes]:
    """``(key, object code)`` for ``kernel``: from a background compile
    started by :func:`prefetch`, from the disk cache when a valid entry
    exists, else generated, optimised, emitted and stored."""
    lanes = simd_lanes() if lanes is None else lanes
    key = kernel_key(kernel, nb, lanes)
    with _prefetch_lock:
        pending = _prefetched.pop(key, None)
    if pending is not None:
        obj, counter = pending.result()
        stats["prefetch_hits"] += 1
    else:
        obj, counter = _build_object(kernel, nb, lanes, key)
    stats[counter] += 1
    return key, obj


# Kernels being compiled ahead of their launch (see prefetch): key -> Future.
_prefetched: dict = {}
_prefetch_lock = threading.Lock()
_compiler_thread = None


def prefetch(kernel: Kernel, nb: int = 0, lanes: int | None = None) -> None:
    """Start compiling ``kernel`` (or reading it from the disk cache) on a
    background thread and return at once; :func:`compile_kernel` then
    waits for that result instead of starting over.

    For a kernel that is sure to be launched soon after another one: the
    adjoint of a ``value_and_grad`` compiles while the primal compiles and
    runs. The two compiles overlap where they are in LLVM (no lock, no GIL:
    see ``_unlocked``), the Python code generation of one with the LLVM
    work of the other. A prefetched kernel that is never launched costs
    only the background work (``stats`` counts it when it is used)."""
    global _compiler_thread
    lanes = simd_lanes() if lanes is None else lanes
    key = kernel_key(kernel, nb, lanes)
    with _prefetch_lock:
        if key in _compiled or key in _prefetched:
            return
        if _compiler_thread is None:
            _compiler_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxrender-compile")
        _prefetched[key] = _compiler_thread.submit(_build_object, kernel, nb, lanes, key)
        stats["prefetched"] += 1


def shared_key(lanes: int) -> str:
    """Cache key of :func:`shared_object` (as :func:`kernel_key`'s)."""
    parts = [target_description(), codegen_digest(), f"bvh routines, lanes={lanes}"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _build_shared(lanes: int) -> bytes:
    key = shared_key(lanes)
    obj = cache.load(key)
    if obj is None:
        # Absolute addresses: it shares an engine with a kernel's object,
        # and MCJIT resolves _GLOBAL_OFFSET_TABLE_ (position-independent
        # code's base for its constants) to one object's table only.
        obj = _optimize_and_emit(str(bvh_traversal.shared_module(lanes, llvm.get_process_triple())), "static")
        cache.store(key, obj)
    return obj


_shared: dict = {}             # lanes -> Future of the shared object code
_shared_thread = None


def shared_object(lanes: int) -> concurrent.futures.Future:
    """The object code of the BVH packet routines for ``lanes`` (see
    ``bvh_traversal.shared_module``), linked with every kernel that queries
    the BVH: compiled once per target and cached on disk like a kernel, on
    a thread of its own, so that it builds while the first kernel does."""
    global _shared_thread
    with _prefetch_lock:
        fut = _shared.get(lanes)
        if fut is None:
            if _shared_thread is None:
                _shared_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxrender-shared")
            fut = _shared[lanes] = _shared_thread.submit(_build_shared, lanes)
        return fut


def load_object(obj: bytes, shared: bytes | None = None, label: str = "kernel"):
    """Link object code (and the ``shared`` routines' object code it calls,
    if any) into a fresh MCJIT engine; returns (engine, handler address).
    With ``JAXRENDER_PERF_MAP=1`` its functions are named for ``perf``
    (``perfmap.py``), the kernel's under ``label``."""
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    if shared is not None:
        engine.add_object_file(llvm.ObjectFileRef.from_data(shared))
    engine.finalize_object()
    addr = engine.get_function_address("jaxrender_handler")
    if not addr:
        raise CompileError("handler symbol missing from object code")
    if perfmap.enabled():
        perfmap.record(engine, obj, label)
        if shared is not None:
            perfmap.record(engine, shared, "shared")
    return engine, addr


def compile_kernel(kernel: Kernel, nb: int = 0, lanes: int | None = None) -> CompiledKernel:
    """Compile (or fetch from cache) and register ``kernel`` as an XLA FFI target.

    A registered target's machine code is kept for the life of the process:
    XLA holds its address and may call it from any compiled computation.
    ``lanes`` is the SIMD packet width (default :func:`simd_lanes`)."""
    lanes = simd_lanes() if lanes is None else lanes
    key = kernel_key(kernel, nb, lanes)
    with _lock:
        hit = _compiled.get(key)
        if hit is not None:
            stats["memory_hits"] += 1
            return hit
        shared = shared_object(lanes) if lanes > 1 and queries_bvh(kernel) else None
        key, obj = object_code(kernel, nb, lanes)
        engine, addr = load_object(obj, shared.result() if shared else None, kernel.name)
        name = f"jaxrender_{kernel.name}_{key[:20]}"
        register_ffi_target(name, addr)
        ck = CompiledKernel(key, name, engine, addr)
        _compiled[key] = ck
        return ck


def ffi_call(compiled: CompiledKernel, out_types: list, info_words, *buffers):
    """Bind the registered target: ``buffers`` are the ABI's arguments
    (launch info as int32 pairs, then the inputs); ``info_words`` (the same
    info as int64) is what the GPU backend needs besides, unused here."""
    import jax
    return jax.ffi.ffi_call(compiled.target_name, out_types, has_side_effect=False)(*buffers)


def register_ffi_target(name: str, address: int, platform: str = "cpu") -> None:
    """Register the handler at ``address`` (``void* handler(XLA_FFI_CallFrame*)``)
    as XLA FFI target ``name`` for ``platform`` ("cpu" or "CUDA")."""
    import jax  # imported here: lowering/ is usable without JAX for inspection

    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    jax.ffi.register_ffi_target(name, new_capsule(address, None, None), platform=platform, api_version=1)
