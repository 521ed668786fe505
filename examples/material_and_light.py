"""Recover a floor's roughness and the light's radiance from a target image.

Run it::

    python examples/material_and_light.py --steps 60 --res 64 --out material_and_light

The Cornell box's floor is a GGX rough conductor. A target image is rendered
with the true roughness and light; the optimization starts from a rougher
floor and a dimmer, bluer light and runs optax Adam on the mean squared
image error, with gradients from ``jax.grad`` through ``jaxrender.render``
(path replay backpropagation, decorrelated seeds). Each step is one
jit-compiled function: the kernels compile once, on the first step.

Writes ``target.png``, ``initial.png``, ``final.png`` and
``convergence.png`` (loss and parameter errors per step) to ``--out``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxrender
from jaxrender.cli import write_image  # PNG: sRGB, as the command line writes it

ALPHA_KEY = "floor.bsdf.alpha.value"
LIGHT_KEY = "light.emitter.radiance.value"


def make_scene(res: int) -> jaxrender.Scene:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = res
    d["integrator"]["max_depth"] = 4
    d["floor"]["bsdf"] = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.12,
                          "specular_reflectance": {"type": "rgb", "value": [0.9, 0.8, 0.7]}}
    return jaxrender.load_dict(d)


def to_scene_params(theta: dict, light0: jax.Array) -> dict:
    """Optimization variables -> scene parameters: roughness through a
    sigmoid (stays in (0.01, 1)), radiance as a positive per-channel scale."""
    return {ALPHA_KEY: 0.01 + 0.99 * jax.nn.sigmoid(theta["alpha_logit"]),
            LIGHT_KEY: light0 * jnp.exp(theta["log_light_scale"])}


def run(steps: int = 60, res: int = 64, spp: int = 8, target_spp: int = 256, lr: float = 0.05,
        out: str | Path = "material_and_light", progress: bool = True) -> dict:
    import optax
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scene = make_scene(res)
    true_alpha = float(scene.params[ALPHA_KEY])
    true_light = jnp.asarray(scene.params[LIGHT_KEY])
    target = jaxrender.render(scene, spp=target_spp, seed=12345)

    light0 = true_light * jnp.asarray([0.5, 0.6, 0.9])     # dimmer and bluer
    alpha0 = 0.5
    theta = {"alpha_logit": jnp.asarray(np.log((alpha0 - 0.01) / (1.0 - alpha0)), jnp.float32),
             "log_light_scale": jnp.zeros(3, jnp.float32)}
    opt = optax.adam(lr)
    state = opt.init(theta)

    def loss_fn(theta, seed):
        img = jaxrender.render(scene, to_scene_params(theta, light0), spp=spp, seed=seed)
        return jnp.mean((img - target) ** 2)

    @jax.jit
    def step(theta, state, seed):
        loss, g = jax.value_and_grad(loss_fn)(theta, seed)
        updates, state = opt.update(g, state)
        return optax.apply_updates(theta, updates), state, loss

    initial = jaxrender.render(scene, to_scene_params(theta, light0), spp=target_spp, seed=1)
    history = {"loss": [], "alpha": [], "light_error": []}
    bar = tqdm(range(steps), desc="optimizing", disable=not progress)
    for i in bar:
        theta, state, loss = step(theta, state, jnp.uint32(i))
        p = to_scene_params(theta, light0)
        history["loss"].append(float(loss))
        history["alpha"].append(float(p[ALPHA_KEY]))
        history["light_error"].append(float(jnp.linalg.norm(p[LIGHT_KEY] - true_light) / jnp.linalg.norm(true_light)))
        bar.set_postfix(loss=f"{float(loss):.2e}", alpha=f"{history['alpha'][-1]:.3f}")
    final = jaxrender.render(scene, to_scene_params(theta, light0), spp=target_spp, seed=1)

    write_image(out / "target.png", target)
    write_image(out / "initial.png", initial)
    write_image(out / "final.png", final)
    _plot(out / "convergence.png", history, true_alpha)
    p = to_scene_params(theta, light0)
    return {"alpha": float(p[ALPHA_KEY]), "true_alpha": true_alpha, "light": np.asarray(p[LIGHT_KEY]),
            "true_light": np.asarray(true_light), "history": history}


def _plot(path: Path, history: dict, true_alpha: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.5))
    loss = np.asarray(history["loss"])
    ax[0].semilogy(loss, alpha=0.4, label="per step (noisy: few spp)")
    if len(loss) >= 10:
        ax[0].semilogy(np.arange(9, len(loss)), np.convolve(loss, np.ones(10) / 10, "valid"), label="mean of 10")
    ax[0].set(title="image loss (MSE)", xlabel="step")
    ax[0].legend()
    ax[1].plot(history["alpha"], label="estimate")
    ax[1].axhline(true_alpha, color="k", ls="--", label="true")
    ax[1].set(title="floor roughness", xlabel="step")
    ax[1].legend()
    ax[2].plot(history["light_error"])
    ax[2].set(title="light radiance, relative error", xlabel="step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--spp", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--out", default="material_and_light")
    args = ap.parse_args(argv)
    r = run(args.steps, args.res, args.spp, lr=args.lr, out=args.out)
    print(f"roughness: {r['alpha']:.4f} (true {r['true_alpha']:.4f})")
    print(f"light radiance: {np.round(r['light'], 3)} (true {np.round(r['true_light'], 3)})")
    print(f"images and convergence plot in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
