"""``primitives/staged.py``: the JAX code around geometry derivatives'
kernels compiled as one computation also when called eagerly.

* a staged function is traced once per structure and constant contents
  (numpy arguments keyed by their contents, not identity), again when
  they change, and gives the unstaged function's values;
* it runs as it would inside a user's ``jax.jit``: JAX arrays traced,
  numpy arrays constants (shapes may depend on them);
* an eager gradient of moving geometry traces the film's silhouette code
  once, not on every call, and equals the jitted gradient;
* called eagerly, its executable is kept in the disk cache and loaded by
  the next process instead of compiled.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender.primitives import boundary
from jaxrender.primitives.staged import staged
from test_geometry_gradients import shadow_scene

traces = []


@staged
def _gather_scaled(x, rows: np.ndarray, scale: float, extra=None):
    traces.append(len(rows))
    # (numpy drives a shape here, as the boundary code's topology does)
    out = x[np.asarray(rows)] * scale
    return out if extra is None else out + extra["shift"]


def test_traced_once_per_structure_and_constant_contents():
    traces.clear()
    x = jnp.arange(6.0)
    rows = np.array([0, 2, 5])
    a = _gather_scaled(x, rows, 2.0)
    b = _gather_scaled(x + 1.0, np.array([0, 2, 5]), 2.0)        # (new values, equal constants)
    assert traces == [3]
    np.testing.assert_array_equal(a, [0.0, 4.0, 10.0])
    np.testing.assert_array_equal(b, [2.0, 6.0, 12.0])
    _gather_scaled(x, np.array([1, 2]), 2.0)                       # (new contents, new shape)
    _gather_scaled(x, np.array([1, 3]), 2.0)                       # (new contents, same shape)
    _gather_scaled(x, np.array([1, 3]), 3.0)                       # (a new Python constant)
    c = _gather_scaled(x, np.array([1, 3]), 3.0, {"shift": jnp.float32(1.0)})   # (a new structure)
    assert traces == [3, 2, 2, 2, 2]
    np.testing.assert_array_equal(c, [4.0, 10.0])
    # (an int64 and an int32 array of equal values are different constants)
    _gather_scaled(x, np.array([1, 3], np.int64), 3.0)
    _gather_scaled(x, np.array([1, 3], np.int32), 3.0)
    assert len(traces) == 6
    # (nor a numpy scalar and its one-element array)
    a = _gather_scaled(x, np.array([1]), np.float32(2.0))
    b = _gather_scaled(x, np.array([1]), np.array([2.0], np.float32))
    assert len(traces) == 8 and a.shape == b.shape == (1,)


def test_staged_functions_differentiate_and_nest_in_jit():
    rows = np.array([4, 1])
    f = lambda x: jnp.sum(_gather_scaled(x, rows, 3.0) ** 2)
    x = jnp.arange(6.0)
    expected = np.zeros(6)
    expected[[4, 1]] = 2 * 9.0 * np.array([4.0, 1.0])
    np.testing.assert_allclose(jax.grad(f)(x), expected)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x), expected)
    np.testing.assert_allclose(jax.vmap(jax.grad(f))(jnp.stack([x, 2 * x])), np.stack([expected, 2 * expected]))


def test_eager_geometry_gradients_trace_the_film_boundary_once(monkeypatch):
    """Called eagerly, the silhouette code (``film_segments``) ran every
    call, each of its few hundred operations dispatched (and the first time
    compiled) alone. Staged, the second call with a new value reuses the
    first call's computation; the gradient equals the jitted one."""
    calls = []
    maps = boundary._camera_maps
    monkeypatch.setattr(boundary, "_camera_maps", lambda *a, **k: calls.append(1) or maps(*a, **k))
    boundary.film_segments.clear_cache()     # (another test may have staged this scene's)
    scene = jaxrender.load_dict(shadow_scene("sphere"))
    key = "occluder.to_world"
    value = jnp.asarray(scene.params[key])
    grad = jax.grad(lambda v: jnp.sum(jaxrender.render(scene, {key: v}, spp=4, seed=1)))
    first = grad(value)
    traced = len(calls)
    assert traced >= 1
    moved = value.at[0, 3].add(0.01)
    second = grad(moved)
    assert len(calls) == traced
    assert np.abs(np.asarray(first[:3, 3])).max() > 0
    np.testing.assert_allclose(second, jax.jit(grad)(moved), rtol=1e-5, atol=1e-6)


def test_only_the_last_computations_are_kept():
    """Each computation holds its numpy constants (a large mesh's edge
    topology): a process going through many scenes keeps the last few."""
    traces.clear()
    _gather_scaled.clear_cache()
    x = jnp.arange(20.0)
    for i in range(12):
        _gather_scaled(x, np.array([i]), 1.0)
    assert len(_gather_scaled.computations) == 8
    assert len(traces) == 12
    _gather_scaled(x, np.array([11]), 1.0)      # (kept)
    assert len(traces) == 12
    _gather_scaled(x, np.array([0]), 1.0)       # (dropped: traced again)
    assert len(traces) == 13


def test_eager_executables_are_kept_on_disk(monkeypatch, tmp_path):
    """Called eagerly, a staged computation's executable goes to the disk
    cache, and a process that meets the same computation loads it instead
    of compiling (here: the in-memory computations cleared); an entry that
    does not load is compiled again, another host CPU or XLA_FLAGS makes
    another entry, and one larger than MAX_STORED_BYTES is not stored.
    Values are the same each way."""
    from jax import stages
    monkeypatch.setenv("JAXRENDER_CACHE_DIR", str(tmp_path))
    x, rows = jnp.arange(6.0), np.array([5, 0])
    _gather_scaled.clear_cache()
    first = np.asarray(_gather_scaled(x, rows, 2.0))
    entries = list(tmp_path.rglob("*.xla"))
    assert len(entries) == 1
    _gather_scaled.clear_cache()
    compile_ = stages.Lowered.compile
    monkeypatch.setattr(stages.Lowered, "compile", lambda *a, **k: pytest.fail("compiled, not loaded"))
    np.testing.assert_array_equal(_gather_scaled(x + 1.0, rows, 2.0), first + 2.0)
    # (a corrupt payload under a valid header, as another XLA's would be: compiled again)
    monkeypatch.setattr(stages.Lowered, "compile", compile_)
    from jaxrender.lowering import cache
    key = entries[0].name[:-len(".xla")]
    cache.store(key, b"not an executable", ".xla")
    _gather_scaled.clear_cache()
    np.testing.assert_array_equal(_gather_scaled(x, rows, 2.0), first)
    assert cache.load(key, ".xla") != b"not an executable"
    # (another host CPU or XLA_FLAGS: another entry, never this machine code)
    from jaxrender.lowering import cpu
    description = cpu.target_description()
    monkeypatch.setattr(cpu, "target_description", lambda: description + "|another-cpu")
    _gather_scaled.clear_cache()
    _gather_scaled(x, rows, 2.0)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    _gather_scaled.clear_cache()
    _gather_scaled(x, rows, 2.0)
    assert len(list(tmp_path.rglob("*.xla"))) == 3
    # (nothing larger than MAX_STORED_BYTES is stored)
    from jaxrender.primitives import staged as staged_module
    monkeypatch.setattr(staged_module, "MAX_STORED_BYTES", 0)
    _gather_scaled(x, np.array([1, 2]), 2.0)
    assert len(list(tmp_path.rglob("*.xla"))) == 3
