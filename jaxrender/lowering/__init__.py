"""IR -> LLVM IR -> machine code, the disk cache, and the XLA FFI handler.

Nothing here knows about rendering."""
from .cpu import CompileError, compile_kernel, generate_llvm_ir, num_threads, stats

__all__ = ["CompileError", "compile_kernel", "generate_llvm_ir", "num_threads", "stats"]
