"""Derivatives of a function of a render, taken under ``jax.jit``. Taken
eagerly, the JAX code around a geometry or camera derivative's kernels (the
film boundary's segments, the BVH refit) compiles op by op: hundreds of XLA
compiles per call (the GPU emulation's gradient check: ~850, 19 s of its
40), against one module jitted."""
import jax


def jvp(f, x, t):
    """The tangent of ``f`` at ``x`` along ``t``."""
    return jax.jit(lambda x, t: jax.jvp(f, (x,), (t,))[1])(x, t)


def vjp(f, x, c):
    """The cotangent ``c`` of ``f``'s output pulled back to ``x``."""
    return jax.jit(lambda x, c: jax.vjp(f, x)[1](c)[0])(x, c)


def grad(f, x):
    """The gradient of the scalar ``f`` at ``x``."""
    return jax.jit(jax.grad(f))(x)
