"""IR -> LLVM IR -> machine code, the disk cache, and the XLA FFI handler.

Nothing here knows about rendering. One module per target (``cpu.py``,
``cuda.py``), each with ``compile_kernel(kernel, nb, lanes=None)`` (compile,
cache and register an XLA FFI target for a kernel with ``nb`` batch
levels) and ``ffi_call(compiled, out_types, info_words, *buffers)`` (bind
it); :func:`backend` picks one by JAX platform name. Adding a target: its
module plus an entry in :data:`BACKENDS` (the render primitives register a
lowering for every entry)."""
from __future__ import annotations

import importlib
from types import ModuleType

from .cpu import CompileError, compile_kernel, generate_llvm_ir, num_threads, stats

# JAX platform -> its lowering module (imported when a kernel is first
# lowered for that platform, so a CPU-only install never imports CUDA code).
BACKENDS = {"cpu": "cpu", "cuda": "cuda"}


def backend(platform: str) -> ModuleType:
    """The lowering module for JAX platform ``platform``."""
    if platform not in BACKENDS:
        raise ValueError(f"no jaxrender backend for JAX platform {platform!r} (have {', '.join(BACKENDS)})")
    return importlib.import_module(f".{BACKENDS[platform]}", __name__)


__all__ = ["BACKENDS", "CompileError", "backend", "compile_kernel", "generate_llvm_ir", "num_threads", "stats"]
