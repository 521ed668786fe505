"""Per-BSDF lookup tables the path kernel reads from its ``bsdf_table`` buffer.

Some BSDFs need a precomputed table that depends on their parameters
(rough plastic: Mitsuba's coating transmittance and internal reflectance,
functions of alpha and eta). The table is computed by its own small kernel
from the current ``bsdf_data`` rows, so parameter overrides (also traced
ones, under ``jit`` / ``vmap``) are honoured, and it is *detached*: like
Mitsuba, which fills it from scalar copies of alpha and eta, no derivative
flows through it. Its quadrature costs about 0.1 s a table on two cores, as
much as a small render: concrete rows are computed once, when first met,
and kept (``_host_table``); only traced ones launch the kernel in every
call. Scenes without such BSDFs get a one-float placeholder and launch
nothing.

Layout: ``layout.BSDF_TABLE_STRIDE`` floats per BSDF row, in ``bsdf_data``
order; rows of BSDFs without a table are zero.

Example::

    table, internal = precompute("ggx", 0.3, 1.5)          # numpy, for tests
    buf = bsdf_table(scene.bsdf_types, inputs["bsdf_data"])
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..kernels import layout
from ..kernels.bsdfs import roughplastic
from .kernel_call import launch


def roughplastic_tables(distribution: str, alpha_eta) -> tuple[jax.Array, jax.Array]:
    """(transmittance (N, RES), internal reflectance (N,)) for N rough
    plastics given as rows (alpha, eta)."""
    prm = jax.lax.stop_gradient(jnp.asarray(alpha_eta, jnp.float32).reshape(-1, 2))
    n = prm.shape[0]
    out = launch(roughplastic.table_kernel(distribution), (n * 2 * roughplastic.RES,), prm=prm,
                 gl=roughplastic.gauss_legendre_nodes())["value"]
    return roughplastic.tables_from_values(out)


def precompute(distribution: str, alpha: float, eta: float) -> tuple[np.ndarray, float]:
    """Host values of one rough plastic's table, as Mitsuba's
    ``RoughPlastic::parameters_changed`` computes them."""
    table, internal = roughplastic_tables(distribution, np.array([[alpha, eta]], np.float32))
    return np.asarray(table[0], np.float32), float(internal[0])


@functools.lru_cache(maxsize=256)
def _host_table(distribution: str, alpha: float, eta: float) -> np.ndarray:
    """One rough plastic's table row (RES transmittances, then the internal
    reflectance), computed now even inside a trace."""
    with jax.ensure_compile_time_eval():
        table, internal = precompute(distribution, alpha, eta)
    row = np.append(table, np.float32(internal))
    row.setflags(write=False)
    return row


def bsdf_table(types, bsdf_data) -> jax.Array:
    """The kernels' ``bsdf_table`` input for BSDF rows of types ``types``
    (one ``BsdfType`` per row) with parameters ``bsdf_data`` (N, BSDF_ROW)."""
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(types):
        if t.table is not None:
            groups.setdefault(t.table, []).append(i)
    if not groups:
        return np.zeros((1,), np.float32)
    if not isinstance(bsdf_data, jax.core.Tracer):
        data = np.asarray(bsdf_data, np.float32)
        if data.ndim == 2:
            out = np.zeros((len(types), layout.BSDF_TABLE_STRIDE), np.float32)
            for (distribution, alpha, eta), idx in groups.items():
                t = types[idx[0]]
                for i in idx:
                    row = _host_table(distribution, float(data[i, t.slot(alpha)]), float(data[i, t.slot(eta)]))
                    out[i, :len(row)] = row
            return out.reshape(-1)
    data = jax.lax.stop_gradient(jnp.asarray(bsdf_data, jnp.float32))
    rows = jnp.zeros((len(types), layout.BSDF_TABLE_STRIDE), jnp.float32)
    for (distribution, alpha, eta), idx in groups.items():
        t = types[idx[0]]
        idx = np.array(idx)
        prm = jnp.stack([data[..., idx, t.slot(alpha)], data[..., idx, t.slot(eta)]], -1)
        table, internal = roughplastic_tables(distribution, prm)
        rows = rows.at[idx, :roughplastic.RES + 1].set(jnp.concatenate([table, internal[:, None]], -1))
    return rows.reshape(-1)
