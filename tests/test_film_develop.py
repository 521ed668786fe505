"""The film's overlap-add and its transpose (``primitives/film.py``): the
sum of the splat blocks against a plain loop, the transpose against the
dot-product identity, the JAX rules (jvp, vjp, vmap, jit), and the reason
they are kernels: a jitted render's program does not grow with the
filter's footprint."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender.primitives import film

SHAPES = [(5, 7, 3, 3), (4, 4, 5, 1), (6, 3, 7, 4), (1, 9, 5, 2)]  # rows, width, footprint, channels


def _loop_sum(blocks, rows, width, k, channels):
    b = np.asarray(blocks, np.float64).reshape(rows, width, k, k, channels)
    out = np.zeros((rows + k - 1, width + k - 1, channels))
    for r in range(rows):
        for c in range(width):
            for dy in range(k):
                for dx in range(k):
                    out[r + dy, c + dx] += b[r, c, dy, dx]
    return out


def _blocks(rng, rows, width, k, channels, batch=()):
    return jnp.asarray(rng.standard_normal(batch + (rows * width, k * k * channels)), jnp.float32)


@pytest.mark.parametrize("rows,width,k,channels", SHAPES)
def test_overlap_add_is_the_sum_of_the_blocks_on_the_canvas(rows, width, k, channels):
    rng = np.random.default_rng(rows * 100 + k)
    b = _blocks(rng, rows, width, k, channels)
    got = film.splat_canvas(b, rows, width, k, channels)
    np.testing.assert_allclose(got, _loop_sum(b, rows, width, k, channels), rtol=1e-5, atol=1e-5)
    # The formulation XLA partitions across devices gives the same floats.
    np.testing.assert_array_equal(got, film.splat_canvas(b, rows, width, k, channels, by_rows=True))


@pytest.mark.parametrize("rows,width,k,channels", SHAPES)
def test_block_gather_is_the_transpose_and_every_rule_agrees(rows, width, k, channels):
    rng = np.random.default_rng(rows * 10 + width)
    b = _blocks(rng, rows, width, k, channels)
    canvas = jnp.asarray(rng.standard_normal((rows + k - 1, width + k - 1, channels)), jnp.float32)
    add = lambda x: film.splat_canvas(x, rows, width, k, channels)  # noqa: E731
    # Dot-product test: <A b, c> = <b, A^T c>.
    gathered = jax.vjp(add, b)[1](canvas)[0]
    lhs = float(jnp.vdot(add(b).astype(jnp.float64), canvas))
    rhs = float(jnp.vdot(b.astype(jnp.float64), gathered))
    assert abs(lhs - rhs) <= 1e-4 * (1 + abs(lhs)), (lhs, rhs)
    # Entry (dy, dx) of item (r, c) is the canvas at [r + dy, c + dx].
    g = np.asarray(gathered).reshape(rows, width, k, k, channels)
    r, c, dy, dx = rows - 1, 0, k - 1, k // 2
    np.testing.assert_array_equal(g[r, c, dy, dx], np.asarray(canvas)[r + dy, c + dx])
    # The transpose of the transpose, forward mode and jit.
    back = jax.linear_transpose(lambda c: jax.vjp(add, b)[1](c)[0], canvas)(gathered)[0]
    np.testing.assert_allclose(back, add(gathered), rtol=1e-6, atol=1e-6)
    tangent = jax.jvp(add, (b,), (2.0 * b,))[1]
    np.testing.assert_allclose(tangent, 2.0 * add(b), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(jax.jit(add)(b), add(b))


def test_batched_overlap_add_and_its_gradient_are_per_view():
    rows, width, k, channels = 4, 6, 5, 3
    rng = np.random.default_rng(7)
    views = _blocks(rng, rows, width, k, channels, batch=(2, 3))
    add = lambda x: film.splat_canvas(x, rows, width, k, channels)  # noqa: E731
    loss = lambda x: jnp.sum(jnp.sin(add(x)))  # noqa: E731
    got = jax.vmap(jax.vmap(add))(views)
    grads = jax.jit(jax.vmap(jax.vmap(jax.grad(loss))))(views)
    for i in range(2):
        for j in range(3):
            np.testing.assert_array_equal(got[i, j], add(views[i, j]))
            np.testing.assert_allclose(grads[i, j], jax.grad(loss)(views[i, j]), rtol=1e-6, atol=1e-6)
    # A batch axis that is not the first one.
    across = jnp.moveaxis(views[1], 0, 1)  # (items, views, entries)
    np.testing.assert_array_equal(jax.vmap(add, in_axes=1)(across)[2], add(views[1, 2]))


def _ops(lowered) -> int:
    return sum(1 for line in lowered.as_text().splitlines() if " = " in line and "stablehlo." in line)


def test_jitted_render_program_does_not_grow_with_the_filter_footprint():
    # Written with JAX's pad and add, developing a 7 x 7 footprint (lanczos)
    # is 49 shifted sums per canvas, which XLA compiles anew in every
    # program: seconds of a first render and of each derivative.
    def program_size(rfilter):
        scene = jaxrender.cornell_box()
        scene["sensor"]["film"].update(width=8, height=8, rfilter=rfilter)
        scene = jaxrender.load_dict(scene)
        key = "red.reflectance.value"
        x = jnp.asarray(scene.params[key])
        render = jax.jit(lambda v: jaxrender.render(scene, {key: v}, spp=1))
        grad = jax.jit(jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=1))))
        return _ops(render.lower(x)), _ops(grad.lower(x))

    tent, lanczos = program_size({"type": "tent"}), program_size({"type": "lanczos"})
    assert lanczos == tent, (tent, lanczos)
