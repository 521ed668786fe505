"""Conductor material presets (``jaxrender.scene.conductors``) against
Mitsuba 3.9.1 (scalar_rgb): the table itself, and the kernel conductor /
roughconductor fed with a preset against Mitsuba's plugin given the same
``material`` name.

Kernels, parameter rows and tolerances are those of test_bsdfs_conductor.py
(float32 on both sides):
eval / pdf / delta-lobe weight within 1e-4 relative (floor 1e-3); rough
sample weights within 1e-4 for 99% of samples and 1e-2 for all.

AlSb's red channel has eta = k = 0 (Mitsuba clamps its slightly negative RGB
eta), where the conductor Fresnel term is 0 / 0 at normal incidence: Mitsuba
returns NaN there, and so must we, at the same places.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bsdf_harness import bsdf_kernel, mitsuba_bsdf, mitsuba_query, random_wi, rel_err, run_bsdf, uniform_sphere
from test_bsdfs_conductor import make_conductor, rough_kernel, wi_at

from jaxrender.kernels.bsdfs import conductor
from jaxrender.scene.conductors import MATERIALS, complex_ior

pytest.importorskip("mitsuba")  # (test_bsdfs_conductor, imported above, skips without it too)

# The everyday metals, a semiconductor whose red eta and k Mitsuba clamps to
# 0 (complex IOR exactly 0 in that channel), and the "none" mirror.
BEHAVIOUR_MATERIALS = ("Au", "Cu", "Ag", "Al", "Cr", "AlSb", "none")
ALPHA = 0.3


def conductor_row(name: str) -> np.ndarray:
    eta, k = complex_ior(name)
    return np.concatenate([eta, k, np.ones(3)]).astype(np.float32)


def mitsuba_ior(plugin: str, name: str) -> np.ndarray:
    """(2, 3) eta and k of ``plugin`` with ``material=name``; "none" has
    scalar (uniform) textures, broadcast here."""
    import mitsuba as mi
    params = mi.traverse(mitsuba_bsdf({"type": plugin, "material": name}))
    return np.array([np.broadcast_to(np.asarray(params[key], np.float64).ravel(), (3,))
                     for key in ("eta.value", "k.value")])


def run_per_material(kernel, rows, wi, wo, u) -> list[dict]:
    """Launch every (material row, direction) combination at once; one result dict per row."""
    n = len(wi)
    r = run_bsdf(kernel, np.repeat(np.stack(rows), n, axis=0), np.tile(wi, (len(rows), 1)),
                 np.tile(wo, (len(rows), 1)), np.tile(u, (len(rows), 1)))
    return [{key: v[j * n:(j + 1) * n] for key, v in r.items()} for j in range(len(rows))]


def relative_errors(mine: np.ndarray, ref: np.ndarray, what: str) -> np.ndarray:
    """Per-item max relative error (floor 1e-3), after checking that NaNs
    stand in exactly the same places; NaN entries count as 0."""
    np.testing.assert_array_equal(np.isnan(mine), np.isnan(ref), err_msg=f"NaN places, {what}")
    e = np.nan_to_num(rel_err(mine, ref, 1e-3), nan=0.0)
    return e.reshape(len(e), -1).max(1)


def test_materials_are_mitsubas_names():
    import mitsuba as mi
    ior_dir = Path(mi.__file__).parent / "data" / "ior"
    shipped = {p.name.removesuffix(".eta.spd") for p in ior_dir.glob("*.eta.spd")}
    assert mi.__version__ == "3.9.1"
    assert len(MATERIALS) == len(set(MATERIALS)) and MATERIALS[0] == "none"
    assert set(MATERIALS) == shipped | {"none"}


def test_table_equals_mitsuba():
    for name in MATERIALS:
        eta, k = complex_ior(name)
        assert eta.dtype == k.dtype == np.float64 and eta.shape == k.shape == (3,)
        for plugin in ("conductor", "roughconductor"):
            np.testing.assert_array_equal(np.stack([eta, k]), mitsuba_ior(plugin, name), err_msg=f"{plugin} {name}")


def test_none_is_the_kernels_default_mirror():
    eta, k = complex_ior("none")
    defaults = {p.name: p.default for p in conductor.PARAMS}
    np.testing.assert_array_equal(eta, [defaults["eta"]] * 3)
    np.testing.assert_array_equal(k, [defaults["k"]] * 3)


def test_complex_ior_returns_fresh_arrays():
    eta, _ = complex_ior("Au")
    eta[:] = 0.0
    assert complex_ior("Au")[0][0] != 0.0


@pytest.mark.parametrize("wrong, suggested", [("au", "'Au'"), ("Cu_palk", "'Cu_palik'"), ("Ni", "'Ni_palik'")])
def test_unknown_name_suggests_close_matches(wrong, suggested):
    with pytest.raises(KeyError, match=f"did you mean .*{suggested}.*{len(MATERIALS)} names"):
        complex_ior(wrong)


def test_unknown_name_without_close_match():
    with pytest.raises(KeyError, match=f"'Gold'; Mitsuba 3.9.1 has {len(MATERIALS)} names") as info:
        complex_ior("Gold")
    assert "did you mean" not in str(info.value)


def test_conductor_preset_matches_mitsuba():
    # Incident angles from normal to grazing, and one below the horizon (weight 0).
    wi = np.stack([wi_at(t) for t in (0.0, 20.0, 40.0, 60.0, 75.0, 85.0, 89.0, 95.0)])
    u = np.full((len(wi), 3), 0.5, np.float32)
    kern = bsdf_kernel(conductor, make_conductor, 9, "conductor")
    mine = run_per_material(kern, [conductor_row(m) for m in BEHAVIOUR_MATERIALS], wi, wi, u)
    for name, r in zip(BEHAVIOUR_MATERIALS, mine):
        ref = mitsuba_query(mitsuba_bsdf({"type": "conductor", "material": name}), wi, wi, u)
        ok = ref["s_weight"].any(axis=1)
        np.testing.assert_array_equal(ok, wi[:, 2] > 0, err_msg=name)
        assert relative_errors(r["s_weight"], ref["s_weight"], name).max() <= 1e-4, name
        assert np.abs(r["s_wo"][ok] - ref["s_wo"][ok]).max() <= 1e-6, name
        if name == "none":
            np.testing.assert_array_equal(r["s_weight"][ok], 1.0)
        if name == "AlSb":  # the 0 / 0 above, at normal incidence (wi[0]), red only
            assert np.isnan(r["s_weight"][0, 0]) and np.isfinite(r["s_weight"][0, 1:]).all()


def test_roughconductor_preset_matches_mitsuba():
    rng = np.random.default_rng(11)
    n = 64
    wi = random_wi(rng, n)
    wo = uniform_sphere(rng, n)
    wo[: n // 2] = wi[: n // 2] * [-1, -1, 1] + 0.2 * wo[: n // 2]  # near the specular peak
    wo /= np.linalg.norm(wo, axis=1, keepdims=True)
    wi[0] = wo[0] = (0.0, 0.0, 1.0)  # half vector on the normal: AlSb's NaN case
    u = rng.random((n, 3), dtype=np.float32)
    kern = rough_kernel("ggx", True)
    rows = [np.concatenate([[ALPHA, ALPHA], conductor_row(m)]).astype(np.float32) for m in BEHAVIOUR_MATERIALS]
    mine = run_per_material(kern, rows, wi, wo.astype(np.float32), u)
    for name, r in zip(BEHAVIOUR_MATERIALS, mine):
        b = mitsuba_bsdf({"type": "roughconductor", "material": name, "distribution": "ggx", "alpha": ALPHA})
        ref = mitsuba_query(b, wi, wo.astype(np.float32), u)
        assert np.any(ref["eval"] > 0), name
        assert relative_errors(r["eval"], ref["eval"], f"eval {name}").max() <= 1e-4
        assert relative_errors(r["pdf"], ref["pdf"], f"pdf {name}").max() <= 1e-4
        ok = ref["s_weight"].any(axis=1)
        e = relative_errors(r["s_weight"][ok], ref["s_weight"][ok], f"sample weight {name}")
        assert np.quantile(e, 0.99) <= 1e-4 and e.max() <= 1e-2, f"{name}: {e.max()}"
