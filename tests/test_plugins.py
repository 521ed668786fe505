"""The public plugin API's error paths: what a user gets wrong while
writing a BSDF or texture plugin is a clear Python exception naming it."""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrender
from jaxrender import ir, plugins
from jaxrender.ir import Vec
from jaxrender.kernels import layout, sampling
from jaxrender.kernels import textures as ktex
from jaxrender.kernels.bsdfs import registry


def _matte(read):
    """eval / pdf / sample of a Lambertian BSDF whose colour is ``read(p)``."""
    def eval(p, wi, wo):
        ok = (wi.z > 0.0) & (wo.z > 0.0)
        return ir.select(ok, read(p) * (wo.z / math.pi), Vec(0.0, 0.0, 0.0))

    def pdf(p, wi, wo):
        return ir.select((wi.z > 0.0) & (wo.z > 0.0), sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)

    def sample(p, wi, u1, u2):
        wo = sampling.square_to_cosine_hemisphere(u2)
        return (wo, sampling.square_to_cosine_hemisphere_pdf(wo), ir.select(wi.z > 0.0, read(p), Vec(0.0, 0.0, 0.0)),
                ir.Bool(False))
    return eval, pdf, sample


@pytest.fixture
def cleanup():
    """Forget the plugins a test registers."""
    yield
    for table, hooks in ((registry.TYPES, registry._on_change), (ktex.PLUGINS, ktex._on_change)):
        for name in [n for n in table if n.startswith("test_")]:
            del table[name]
        for hook in hooks:
            hook()


def _scene(bsdf: dict) -> jaxrender.Scene:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 8
    d["white"] = bsdf
    return jaxrender.load_dict(d)


def test_a_misspelled_parameter_in_plugin_code_names_the_parameters(cleanup):
    plugins.register_bsdf("test_typo", [plugins.Param("albedo", plugins.COLOR, 0.5)], *_matte(lambda p: p.albdo))
    scene = _scene({"type": "test_typo"})
    with pytest.raises(AttributeError, match="BSDF 'test_typo' has no parameter 'albdo' \\(it has albedo\\)"):
        jaxrender.render(scene, spp=1)


def test_a_plugin_renders_and_differentiates(cleanup):
    plugins.register_bsdf("test_matte", [plugins.Param("albedo", plugins.COLOR, 0.5)], *_matte(lambda p: p.albedo))
    scene = _scene({"type": "test_matte", "albedo": {"type": "rgb", "value": [0.7, 0.6, 0.5]}})
    key = "white.albedo.value"
    g = jaxrender.render(scene, spp=2)
    assert np.all(np.isfinite(np.asarray(g)))
    import jax
    grad = jax.grad(lambda a: jnp.sum(jaxrender.render(scene, {key: a}, spp=2)))(jnp.asarray(scene.params[key]))
    assert np.all(np.asarray(grad) > 0)            # a brighter wall brightens the image


@pytest.mark.parametrize("name, message", [
    ("diffuse", "'diffuse' is a built-in BSDF and cannot be replaced"),
    ("roughconductor", "'roughconductor' is a built-in BSDF and cannot be replaced"),
])
def test_built_in_bsdfs_cannot_be_replaced(name, message):
    with pytest.raises(ValueError, match=message):
        plugins.register_bsdf(name, [plugins.Param("albedo", plugins.COLOR, 0.5)], *_matte(lambda p: p.albedo))


def test_registering_a_name_twice_needs_replace(cleanup):
    args = ([plugins.Param("albedo", plugins.COLOR, 0.5)], *_matte(lambda p: p.albedo))
    plugins.register_bsdf("test_twice", *args)
    with pytest.raises(ValueError, match="'test_twice' is already registered \\(pass replace=True"):
        plugins.register_bsdf("test_twice", *args)
    plugins.register_bsdf("test_twice", *args, replace=True)
    tex = ([plugins.Param("c", plugins.COLOR, 0.5)], lambda p, uv: p.c)
    plugins.register_texture("test_tex", *tex)
    with pytest.raises(ValueError, match="'test_tex' is already registered"):
        plugins.register_texture("test_tex", *tex)
    with pytest.raises(ValueError, match="'bitmap' is a built-in texture"):
        plugins.register_texture("bitmap", *tex)


def test_bad_declarations_are_refused():
    matte = _matte(lambda p: p.albedo)
    with pytest.raises(ValueError, match="OPTION parameters select built-in variants"):
        plugins.register_bsdf("test_opt", [plugins.Param("mode", plugins.OPTION, "a", choices=("a",))], *matte)
    free = layout.TWOSIDED_SLOT
    with pytest.raises(ValueError, match=f"take {free + 1} floats of a row, more than the {free}"):
        plugins.register_bsdf("test_wide", [plugins.Param(f"c{k}", plugins.FLOAT, 0.5) for k in range(free + 1)],
                              *matte)
    with pytest.raises(ValueError, match="'table' is reserved"):
        plugins.register_bsdf("test_table", [plugins.Param("table", plugins.FLOAT, 0.5)], *matte)
    with pytest.raises(ValueError, match="array parameter 'w': its default must be a non-empty sequence"):
        plugins.Param("w", plugins.ARRAY, [])
    with pytest.raises(ValueError, match="parameters \\['s'\\] must be COLOR, FLOAT or ARRAY"):
        plugins.register_texture("test_badtex", [plugins.Param("s", plugins.SCALAR, 0.5)], lambda p, uv: p.s)
    assert "test_opt" not in registry.TYPES and "test_badtex" not in ktex.PLUGINS
