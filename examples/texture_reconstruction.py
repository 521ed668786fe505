"""Recover a bitmap texture from rendered images with optax Adam.

Run it::

    python examples/texture_reconstruction.py --steps 200 --res 64 --out texture_reconstruction

The Cornell box's back wall gets a diffuse bitmap texture (a procedural
pattern written to ``<out>/true_texture.png``). Target images are rendered
from three viewpoints; the optimization starts from a uniform grey texture
and minimizes the mean squared image error over all views (one ``jax.vmap``
over the cameras: one launch per kernel for all views). Gradients of the
texels come from the adjoint kernel (path replay backpropagation), where
bilinear texture reads become scatter-adds into the texel gradient.

Writes ``target.png``, ``initial.png``, ``final.png`` (first view),
``true_texture.png``, ``recovered_texture.png`` and ``convergence.png``.
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

TEX_KEY = "back.bsdf.reflectance.data"


def true_texture(n: int = 32) -> np.ndarray:
    """A pattern with edges and smooth parts: rings over a colour ramp."""
    y, x = np.mgrid[0:n, 0:n] / (n - 1)
    r = np.hypot(x - 0.5, y - 0.5)
    rings = 0.5 + 0.5 * np.cos(2 * np.pi * 4 * r)
    tex = np.stack([0.15 + 0.7 * x, 0.2 + 0.6 * rings, 0.8 - 0.6 * y], -1)
    return np.clip(tex, 0.05, 0.95).astype(np.float32)


def make_scene(res: int, texture_path: Path) -> jaxrender.Scene:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = res
    d["integrator"]["max_depth"] = 3
    d["back"]["bsdf"] = {"type": "diffuse",
                         "reflectance": {"type": "bitmap", "filename": str(texture_path), "raw": True}}
    return jaxrender.load_dict(d)


def camera_views(scene: jaxrender.Scene) -> jax.Array:
    base = np.asarray(scene.params["sensor.to_world"], np.float64)
    views = []
    for dx in (-0.25, 0.0, 0.25):
        m = base.copy()
        m[0, 3] += dx
        views.append(m)
    return jnp.asarray(np.stack(views), jnp.float32)


def run(steps: int = 200, res: int = 64, spp: int = 8, target_spp: int = 256, lr: float = 0.01,
        tex_size: int = 16, out: str | Path = "texture_reconstruction", progress: bool = True) -> dict:
    import optax
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    truth = true_texture(tex_size)
    _save_texture_png(out / "true_texture.png", truth)
    scene = make_scene(res, out / "true_texture.png")
    views = camera_views(scene)
    truth_loaded = jnp.asarray(scene.params[TEX_KEY])

    def render_views(tex, seed, n_spp):
        one = lambda m: jaxrender.render(scene, {TEX_KEY: tex, "sensor.to_world": m}, spp=n_spp, seed=seed)
        return jax.vmap(one)(views)

    targets = render_views(truth_loaded, 12345, target_spp)
    tex0 = jnp.full_like(truth_loaded, 0.5)
    # The per-texel gradients are noisy (few samples per texel): decay the
    # step size so the texture settles instead of wandering with the noise.
    opt = optax.adam(optax.cosine_decay_schedule(lr, max(steps, 1), alpha=0.05))
    state = opt.init(tex0)

    def loss_fn(tex, seed):
        return jnp.mean((render_views(tex, seed, spp) - targets) ** 2)

    @jax.jit
    def step(tex, state, seed):
        loss, g = jax.value_and_grad(loss_fn)(tex, seed)
        updates, state = opt.update(g, state)
        return jnp.clip(optax.apply_updates(tex, updates), 0.0, 1.0), state, loss

    initial = render_views(tex0, 1, target_spp)[0]
    tex = tex0
    history = {"loss": [], "texture_rmse": [], "visible_rmse": []}
    bar = tqdm(range(steps), desc="optimizing", disable=not progress, mininterval=1.0)
    for i in bar:
        tex, state, loss = step(tex, state, jnp.uint32(i))
        history["loss"].append(float(loss))
        history["texture_rmse"].append(float(jnp.sqrt(jnp.mean((tex - truth_loaded) ** 2))))
        # Texels no view sees (behind the boxes) keep their start value.
        seen = jnp.any(tex != tex0, axis=-1, keepdims=True)
        err = jnp.where(seen, (tex - truth_loaded) ** 2, 0.0)
        history["visible_rmse"].append(float(jnp.sqrt(jnp.sum(err) / jnp.maximum(3 * jnp.sum(seen), 1))))
        bar.set_postfix(loss=f"{float(loss):.2e}", texture_rmse=f"{history['texture_rmse'][-1]:.3f}")
    final = render_views(tex, 1, target_spp)[0]

    write_image(out / "target.png", targets[0])
    write_image(out / "initial.png", initial)
    write_image(out / "final.png", final)
    _save_texture_png(out / "recovered_texture.png", tex)
    _plot(out / "convergence.png", history)
    return {"texture": np.asarray(tex), "truth": np.asarray(truth_loaded), "history": history}


def _save_texture_png(path: Path, tex) -> None:
    """Texel values as 8-bit PNG without sRGB encoding (the scene loads the
    file with ``raw=True``)."""
    from PIL import Image
    x = np.clip(np.asarray(tex, np.float64), 0.0, 1.0)
    Image.fromarray((x * 255 + 0.5).astype(np.uint8)).save(path)


def _plot(path: Path, history: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    loss = np.asarray(history["loss"])
    ax[0].semilogy(loss, alpha=0.4, label="per step")
    if len(loss) >= 10:
        ax[0].semilogy(np.arange(9, len(loss)), np.convolve(loss, np.ones(10) / 10, "valid"), label="mean of 10")
    ax[0].set(title="image loss (MSE, 3 views)", xlabel="step")
    ax[0].legend()
    ax[1].plot(history["texture_rmse"], label="all texels")
    ax[1].plot(history["visible_rmse"], label="texels some view sees")
    ax[1].set(title="texture RMSE vs truth", xlabel="step")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--spp", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--out", default="texture_reconstruction")
    args = ap.parse_args(argv)
    r = run(args.steps, args.res, args.spp, lr=args.lr, out=args.out)
    h, v = r["history"]["texture_rmse"], r["history"]["visible_rmse"]
    print(f"texture RMSE: {h[0]:.4f} after the first step -> {h[-1]:.4f} after {len(h)} steps "
          f"({v[-1]:.4f} over the texels some view sees)")
    print(f"images and convergence plot in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
