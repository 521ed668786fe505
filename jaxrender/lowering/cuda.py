"""Compile kernels for NVIDIA GPUs and hand XLA a CUDA FFI target.

``compile_kernel(kernel, nb)`` (called while JAX lowers ``kernel_call_p``
for the "cuda" platform):

1. picks the PTX target from the devices' compute capability,
2. gets the PTX from the disk cache or generates it (:mod:`.ptx`),
3. compiles the host handler (:mod:`.cuda_ffi`, object code cached on disk
   like the CPU kernels'),
4. loads the PTX into every JAX GPU device's primary context with
   cuda-python (``cuModuleLoadData`` + ``cuModuleGetFunction``; the driver
   compiles the PTX for the device) and writes the (context, function)
   pairs and the driver entry points (resolved in libcuda with ctypes)
   into the handler's tables,
5. registers the handler with ``jax.ffi.register_ffi_target(...,
   platform="CUDA")``.

Nothing here is imported on a CPU-only install: :mod:`jaxrender.primitives`
imports this module inside the CUDA lowering rule only, and cuda-python and
libcuda are touched only in :class:`DriverRuntime`. Tests replace the
runtime with a mock (``compile_kernel(..., runtime=...)``).
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
from dataclasses import dataclass, field

import llvmlite.binding as llvm

from ..ir.kernel import Kernel
from . import cache, cuda_ffi, ptx
from .cpu import CompileError, codegen_digest, target_description, _new_target_machine, _optimize_and_emit

stats = {"compiled": 0, "memory_hits": 0, "modules_loaded": 0}


class CudaError(RuntimeError):
    """The CUDA driver refused something (no driver, no device, bad PTX)."""


# ---------------------------------------------------------------------------
# The driver, through cuda-python (module loading) and ctypes (entry points)
# ---------------------------------------------------------------------------

def _bindings():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6 / cuda-bindings
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError:
            raise CudaError("jaxrender's GPU backend needs cuda-python: pip install 'jaxrender[gpu]'") from None
    return driver


class DriverRuntime:
    """What :func:`compile_kernel` needs from CUDA; the real one."""

    def __init__(self):
        self.cu = _bindings()
        self._check(self.cu.cuInit(0), "cuInit")

    def _check(self, result, what: str):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            _, name = self.cu.cuGetErrorName(err)
            raise CudaError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
        return rest[0] if len(rest) == 1 else rest

    def devices(self) -> list[int]:
        """CUDA ordinals of the GPUs JAX uses."""
        import jax
        try:
            devs = jax.local_devices(backend="gpu")
        except RuntimeError:
            devs = []
        ords = sorted({int(d.id if getattr(d, "local_hardware_id", None) is None else d.local_hardware_id)
                       for d in devs})
        if not ords:
            n = self._check(self.cu.cuDeviceGetCount(), "cuDeviceGetCount")
            ords = list(range(int(n)))
        if not ords:
            raise CudaError("no CUDA device")
        return ords

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        cu = self.cu
        dev = self._check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = cu.CUdevice_attribute
        major = self._check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                            "cuDeviceGetAttribute")
        minor = self._check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                            "cuDeviceGetAttribute")
        return int(major), int(minor)

    def load(self, image: bytes, ordinal: int, symbol: str, source=None):
        """Load ``image`` (PTX, NUL-terminated) into the device's primary
        context (XLA's); returns (CUcontext, CUfunction, CUmodule).
        (``source``, the kernel and batch dims, is for emulators.)"""
        cu = self.cu
        dev = self._check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        ctx = self._check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self._check(cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            mod = self._check(cu.cuModuleLoadData(image), f"cuModuleLoadData (device {ordinal})")
            fn = self._check(cu.cuModuleGetFunction(mod, symbol.encode()), "cuModuleGetFunction")
        finally:
            self._check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")
        return int(ctx), int(fn), mod

    def driver_addresses(self) -> dict[str, int]:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise CudaError(f"cannot load the CUDA driver library libcuda.so.1: {exc}") from None
        out = {}
        for name, _ in cuda_ffi.DRIVER_FUNCTIONS:
            out[name] = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        return out

    def register(self, target_name: str, handler_address: int) -> None:
        from .cpu import register_ffi_target
        register_ffi_target(target_name, handler_address, "CUDA")


_runtime: DriverRuntime | None = None


def runtime() -> DriverRuntime:
    global _runtime
    if _runtime is None:
        _runtime = DriverRuntime()
    return _runtime


# ---------------------------------------------------------------------------
# The host handler: object code (cached) in an MCJIT engine
# ---------------------------------------------------------------------------

def handler_key(kernel: Kernel, nb: int, xla_stream: bool = True) -> str:
    parts = [target_description(), codegen_digest(), "cuda-handler", f"nb={nb}",
             f"xla_stream={xla_stream}", kernel.text]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def handler_object(kernel: Kernel, nb: int, xla_stream: bool = True) -> bytes:
    key = handler_key(kernel, nb, xla_stream)
    obj = cache.load(key)
    if obj is not None:
        return obj
    text = cuda_ffi.generate_handler_ir(kernel, nb, llvm.get_process_triple(), xla_stream)
    # Compiled as a CPU kernel is, with the kernels' short pipeline, not
    # -O2: the handler runs once per launch (its checks cost microseconds
    # either way), and -O2's inliner and unroller made it 3x the machine
    # code and 8x the compile time (PRB adjoint's handler: 0.85 -> 0.10 s,
    # one per kernel).
    obj = _optimize_and_emit(text)
    cache.store(key, obj)
    return obj


@dataclass
class LoadedHandler:
    engine: object                      # keeps the machine code alive
    address: int
    driver_table: int
    function_table: int
    function_count: int

    def set_driver(self, addresses: dict[str, int]) -> None:
        table = (ctypes.c_void_p * len(cuda_ffi.DRIVER_FUNCTIONS)).from_address(self.driver_table)
        for k, (name, _) in enumerate(cuda_ffi.DRIVER_FUNCTIONS):
            if not addresses.get(name):
                raise CudaError(f"CUDA driver entry point {name} not found")
            table[k] = addresses[name]

    def add_function(self, context: int, function: int) -> None:
        count = ctypes.c_int64.from_address(self.function_count)
        n = count.value
        if n >= cuda_ffi.MAX_CONTEXTS:
            raise CudaError(f"more than {cuda_ffi.MAX_CONTEXTS} CUDA contexts")
        table = (ctypes.c_void_p * (2 * cuda_ffi.MAX_CONTEXTS)).from_address(self.function_table)
        table[2 * n], table[2 * n + 1] = context, function
        count.value = n + 1  # published after the pair is written


def load_handler(obj: bytes) -> LoadedHandler:
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addr = engine.get_function_address(cuda_ffi.HANDLER_SYMBOL)
    tables = [engine.get_global_value_address(n) for n in
              (cuda_ffi.DRIVER_TABLE, cuda_ffi.FUNCTION_TABLE, cuda_ffi.FUNCTION_COUNT)]
    if not addr or not all(tables):
        raise CompileError("CUDA handler symbols missing from object code")
    return LoadedHandler(engine, addr, *tables)


# ---------------------------------------------------------------------------
# Compile and register
# ---------------------------------------------------------------------------

@dataclass
class CompiledCudaKernel:
    key: str
    target_name: str
    sm: int
    ptx: str
    handler: LoadedHandler
    has_error_buffer: bool
    wide_results: tuple = ()    # results the device holds in float64 (ptx.wide_accumulators)
    modules: list = field(default_factory=list)   # keeps the loaded modules referenced


_compiled: dict[str, CompiledCudaKernel] = {}
_lock = threading.Lock()


def compile_kernel(kernel: Kernel, nb: int = 0, lanes: int | None = None,
                   runtime_: object | None = None) -> CompiledCudaKernel:
    """Compile (or fetch) ``kernel`` for the GPUs JAX uses and register it
    as an XLA FFI target for platform "CUDA". ``lanes`` (the CPU's SIMD
    packet width) does not apply: one work item per CUDA thread."""
    rt = runtime_ if runtime_ is not None else runtime()
    with _lock:
        devices = rt.devices()
        caps = [rt.compute_capability(d) for d in devices]
        sm = min(ptx.pick_sm(*c) for c in caps)
        mkey = f"{ptx.ptx_key(kernel, nb, sm)}|{id(rt)}"
        hit = _compiled.get(mkey)
        if hit is not None:
            stats["memory_hits"] += 1
            return hit
        key, text = ptx.ptx_for(kernel, nb, sm)
        handler = load_handler(handler_object(kernel, nb, getattr(rt, "xla_stream", True)))
        handler.set_driver(rt.driver_addresses())
        image = text.encode() + b"\0"
        name = f"jaxrender_cuda_{kernel.name}_{key[:20]}{getattr(rt, 'name_suffix', '')}"
        wide = tuple(len(kernel.item_outputs) + j for j, w in enumerate(ptx.wide_accumulators(kernel)) if w)
        ck = CompiledCudaKernel(key, name, sm, text, handler, cuda_ffi.has_error_buffer(kernel), wide)
        for d in devices:
            ctx, fn, mod = rt.load(image, d, ptx.KERNEL_SYMBOL, source=(kernel, nb))
            handler.add_function(ctx, fn)
            ck.modules.append(mod)
            stats["modules_loaded"] += 1
        rt.register(ck.target_name, handler.address)
        stats["compiled"] += 1
        _compiled[mkey] = ck
        return ck


def ffi_call(compiled: CompiledCudaKernel, out_types: list, info_words, *buffers):
    """Bind the registered target: ``buffers`` are the CPU ABI's arguments
    (launch info as int32 pairs, then the inputs); ``info_words`` (int64)
    goes along as the ``info`` attribute for the host side. The float
    accumulators come back from the device in float64 and are rounded
    once, here."""
    import jax
    import numpy as np
    types = [jax.ShapeDtypeStruct(t.shape, np.float64) if k in compiled.wide_results else t
             for k, t in enumerate(out_types)]
    extra = [jax.ShapeDtypeStruct((1,), np.int32)] if compiled.has_error_buffer else []
    call = jax.ffi.ffi_call(compiled.target_name, types + extra, has_side_effect=False)
    outs = list(call(*buffers, info=np.asarray(info_words, np.int64)))[:len(out_types)]
    return [jax.lax.convert_element_type(x, t.dtype) if k in compiled.wide_results else x
            for k, (x, t) in enumerate(zip(outs, out_types))]
