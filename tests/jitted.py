"""Derivatives of a function of a render, taken under ``jax.jit``. Taken
eagerly, the first call of a geometry or camera derivative compiles the JAX
code around its kernels (``primitives/staged.py``: the film boundary's
segments, the shadows' edges; the BVH refit) as several XLA computations
and the rest op by op; jitted, it is one module (a moving sphere's shadow:
3.4-4.2 s eagerly, 1.4-1.7 s jitted)."""
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
