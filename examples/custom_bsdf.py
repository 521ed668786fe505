"""A BSDF and a texture written in your own script, used like built-in plugins.

Run it::

    python examples/custom_bsdf.py --res 128 --spp 64 --out custom_bsdf

Registers two plugins written in jaxrender's kernel language:

* ``oren_nayar``: the Oren-Nayar rough diffuse BSDF (its "qualitative"
  model, Oren and Nayar 1994), with a ``reflectance`` (colour or texture)
  and the roughness ``sigma``, the standard deviation of the facet slope
  angle in radians; cosine-weighted sampling. With sigma = 0 it is
  Lambertian.
* ``stripes``: a procedural texture blending ``color0`` and ``color1`` by
  a sine wave of ``frequency`` periods along u.

Then loads a Cornell box whose tall box uses them by type name (the same
would work from an XML file), renders it, and checks ``jax.grad`` of an
image loss with respect to the new parameters (``sigma``, a stripe colour)
against central finite differences with the same random numbers. Writes
``render.png`` and ``gradients.txt`` to ``--out``.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxrender
from jaxrender import ir, plugins
from jaxrender.cli import write_image
from jaxrender.ir import Vec
from jaxrender.kernels import sampling

SIGMA_KEY = "large-box.bsdf.sigma.value"
COLOR_KEY = "large-box.bsdf.reflectance.color1.value"


# --- the Oren-Nayar BSDF ----------------------------------------------------------
def _zero() -> Vec:
    return plugins.black()      # (in the scene's colour type: the BSDF works in mono and spectral too)


def oren_nayar_eval(p, wi: Vec, wo: Vec) -> Vec:
    """reflectance / pi * (A + B max(0, cos(phi_i - phi_o)) sin(alpha) tan(beta)) * cos(theta_o),
    alpha = max(theta_i, theta_o), beta = min(...). Since sin(alpha) sin(beta)
    = sin(theta_i) sin(theta_o) and cos(beta) = max(cos theta_i, cos theta_o),
    the angular term is max(0, wi.x wo.x + wi.y wo.y) / max(cos theta_i, cos theta_o)."""
    s2 = p.sigma * p.sigma
    a = 1.0 - 0.5 * s2 / (s2 + 0.33)
    b = 0.45 * s2 / (s2 + 0.09)
    ok = (wi.z > 0.0) & (wo.z > 0.0)
    angular = ir.maximum(wi.x * wo.x + wi.y * wo.y, 0.0) / ir.maximum(ir.maximum(wi.z, wo.z), 1e-6)
    return ir.select(ok, p.reflectance * ((a + b * angular) * wo.z / math.pi), _zero())


def oren_nayar_pdf(p, wi: Vec, wo: Vec):
    return ir.select((wi.z > 0.0) & (wo.z > 0.0), sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)


def oren_nayar_sample(p, wi: Vec, u1, u2: Vec):
    wo = sampling.square_to_cosine_hemisphere(u2)
    pdf = sampling.square_to_cosine_hemisphere_pdf(wo)
    ok = (wi.z > 0.0) & (pdf > 0.0)
    f = oren_nayar_eval(p, wi, wo)
    return wo, pdf, ir.select(ok, f / ir.select(ok, pdf, 1.0), _zero()), ir.Bool(False)


# --- the stripes texture -------------------------------------------------------------
def stripes_eval(p, uv: Vec) -> Vec:
    t = 0.5 + 0.5 * ir.sin(2.0 * math.pi * p.frequency * uv.x)
    return p.color0 * (1.0 - t) + p.color1 * t


def register() -> None:
    """Register both plugins (again, if this script's code changed)."""
    plugins.register_bsdf(
        "oren_nayar", [plugins.Param("reflectance", plugins.COLOR, 0.5), plugins.Param("sigma", plugins.FLOAT, 0.3)],
        oren_nayar_eval, oren_nayar_pdf, oren_nayar_sample, albedo="reflectance", replace=True)
    plugins.register_texture(
        "stripes", [plugins.Param("color0", plugins.COLOR, 0.2), plugins.Param("color1", plugins.COLOR, 0.8),
                    plugins.Param("frequency", plugins.FLOAT, 4.0)], stripes_eval, replace=True)


def make_scene(res: int, sigma: float = 0.5) -> jaxrender.Scene:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = res
    # No Russian roulette: the same random numbers make finite differences exact.
    d["integrator"] = {"type": "path", "max_depth": 4, "rr_depth": 100}
    d["large-box"]["bsdf"] = {
        "type": "oren_nayar", "sigma": sigma,
        "reflectance": {"type": "stripes", "frequency": 3.0,
                        "color0": {"type": "rgb", "value": [0.15, 0.3, 0.7]},
                        "color1": {"type": "rgb", "value": [0.9, 0.7, 0.2]}}}
    return jaxrender.load_dict(d)


def check_gradients(scene: jaxrender.Scene, spp: int = 4, seed: int = 7) -> list[dict]:
    """jax.grad of a weighted image sum against central differences of the
    primal with the same random numbers (seed_grad = seed), per parameter
    component."""
    weights = jnp.asarray(np.random.default_rng(0).random((scene.camera.height, scene.camera.width, 3)), jnp.float32)

    def loss(params, seed_grad):
        img = jaxrender.render(scene, params, spp=spp, seed=seed, seed_grad=seed_grad)
        return jnp.sum(img * weights)

    rows = []
    for key in (SIGMA_KEY, COLOR_KEY):
        x0 = jnp.asarray(scene.params[key], jnp.float32)
        g = np.atleast_1d(np.asarray(jax.grad(lambda x: loss({key: x}, seed))(x0)))
        # Large enough that float32 rounding of the loss stays far below the difference.
        h = 2e-2 * max(float(jnp.max(jnp.abs(x0))), 1e-2)
        for c in range(x0.size):
            e = jnp.zeros(x0.size).at[c].set(h).reshape(x0.shape)
            fd = (float(loss({key: x0 + e}, seed)) - float(loss({key: x0 - e}, seed))) / (2 * h)
            rows.append({"key": key, "component": c, "grad": float(g[c]), "fd": fd})
    return rows


def run(res: int = 64, spp: int = 32, out: str | Path = "custom_bsdf", grad_spp: int = 4) -> dict:
    register()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scene = make_scene(res)
    image = jaxrender.render(scene, spp=spp, seed=1)
    write_image(out / "render.png", image)
    rows = check_gradients(scene, spp=grad_spp)
    with open(out / "gradients.txt", "w") as f:
        for r in rows:
            f.write(f"{r['key']}[{r['component']}]: grad {r['grad']:.6g}  finite difference {r['fd']:.6g}\n")
    return {"image": np.asarray(image), "gradients": rows, "scene": scene}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--out", default="custom_bsdf")
    args = ap.parse_args(argv)
    r = run(args.res, args.spp, args.out)
    for row in r["gradients"]:
        print(f"{row['key']}[{row['component']}]: grad {row['grad']:.6g}, finite difference {row['fd']:.6g}")
    print(f"render and gradients in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
