"""Run jaxrender's CUDA lowering on the CPU (see jaxrender/lowering/emulate.py).

``with emulated_gpu() as rt:`` makes every kernel launch in the block go
through the GPU path: the primitive's CUDA lowering (same buffers plus the
launch-info attribute), the generated CUDA FFI handler registered with
XLA:CPU, a mock driver on host memory (``rt.driver.calls`` records what the
handler asked of it) and the GPU kernel module compiled for the host with
libdevice. Needs libdevice (CUDA toolkit or the nvidia-cuda-nvcc-cu12 wheel).
"""
from __future__ import annotations

import contextlib
import functools

import jax
import pytest
from jax.interpreters import mlir

from jaxrender.lowering import cuda, emulate, toolkit
from jaxrender.primitives import kernel_call as kc

_RUNTIME = None


def runtime() -> emulate.EmulatedRuntime:
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = emulate.EmulatedRuntime()
    return _RUNTIME


def _lower(platform):
    fn = functools.partial(kc._ffi_call, platform=platform) if platform != "cpu" else kc._ffi_call
    mlir.register_lowering(kc.kernel_call_p, mlir.lower_fun(fn, multiple_results=True), platform="cpu")


@contextlib.contextmanager
def emulated_gpu():
    rt = runtime()
    saved = cuda._runtime
    cuda._runtime = rt
    jax.clear_caches()
    _lower("cuda")
    try:
        yield rt
    finally:
        _lower("cpu")
        cuda._runtime = saved
        jax.clear_caches()


needs_libdevice = pytest.mark.skipif(
    toolkit.libdevice_path() is None,
    reason="libdevice.10.bc not found (install the CUDA toolkit or `pip install nvidia-cuda-nvcc-cu12`, "
           "the test extra does)")
