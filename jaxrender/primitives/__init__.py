"""JAX primitives: the bridge from traced kernels to jax.Array in, jax.Array out."""
from .kernel_call import KernelHandle, kernel_call_p, launch

__all__ = ["KernelHandle", "kernel_call_p", "launch"]
