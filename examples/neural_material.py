"""Learn a material as a small neural network evaluated inside the renderer.

Run it::

    python examples/neural_material.py --steps 400 --res 64 --out neural_material

The BSDF is a plugin written in this script: a multilayer perceptron
(5 inputs, two hidden layers of 16 ReLU units, 3 outputs) maps the
isotropic invariants of a direction pair (cos theta_i, cos theta_o, the
half vector's cos theta_h and cos theta_d, and cos(phi_i - phi_o) sin
theta_i sin theta_o) to the log of the BRDF per colour channel. Its 419
weights are one ARRAY parameter, a differentiable buffer that the primal
and adjoint megakernels read at every shading point (path replay
backpropagation scatter-adds their gradients in the same kernel): the
network is trained with optax Adam through ``jax.grad`` of the render.

The target is a copper sphere (Mitsuba's ``roughconductor``, GGX, alpha
0.2, ``material="Cu"``) in the Cornell box, seen from three views that
``jax.vmap`` renders in one launch per kernel; the network starts as a
grey diffuse surface and learns to reproduce the images (the loss compares
log(1 + radiance), so that the light's reflection does not drown the
rest). A fourth, held-out view checks that it learned the material, not
the images. Errors are reported against the noise floor: the error
between two independent renders of the truth at the same sample count. Writes ``convergence.png`` (loss per step, the
images, and the learned BRDF against the true one in the plane of
incidence), and ``target.png``, ``initial.png``, ``final.png``,
``heldout_target.png``, ``heldout_final.png`` to ``--out``.
"""
from __future__ import annotations

import argparse
import functools
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
from jaxrender.kernels import layout, sampling
from jaxrender.scene.transform import Transform

LAYERS = (5, 16, 16, 3)
WEIGHTS_KEY = "ball.bsdf.weights"


def n_weights(layers=LAYERS) -> int:
    return sum(n_in * n_out + n_out for n_in, n_out in zip(layers[:-1], layers[1:]))


def init_weights(seed: int = 0, layers=LAYERS) -> np.ndarray:
    """He-initialised weights (each layer: its matrix row-major, then its
    biases), with the output biases at log(0.3 / pi): a grey diffuse start."""
    rng = np.random.default_rng(seed)
    out = []
    for k, (n_in, n_out) in enumerate(zip(layers[:-1], layers[1:])):
        last = k == len(layers) - 2
        out.append(rng.normal(0.0, (0.1 if last else 1.0) * math.sqrt(2.0 / n_in), n_in * n_out))
        out.append(np.full(n_out, math.log(0.3 / math.pi) if last else 0.0))
    return np.concatenate(out).astype(np.float32)


def features(wi, wo, sqrt, maximum):
    """The isotropic BRDF's invariants of (wi, wo) in the local frame (z =
    normal); ``sqrt`` / ``maximum`` from ir or numpy."""
    hx, hy, hz = wi[0] + wo[0], wi[1] + wo[1], wi[2] + wo[2]
    inv = 1.0 / sqrt(maximum(hx * hx + hy * hy + hz * hz, 1e-12))
    hx, hy, hz = hx * inv, hy * inv, hz * inv
    return [wi[2], wo[2], hz, wi[0] * hx + wi[1] * hy + wi[2] * hz, wi[0] * wo[0] + wi[1] * wo[1]]


def mlp(weights, x: list, maximum, layers=LAYERS) -> list:
    """The network on inputs ``x``; ``weights[i]`` reads weight i (a kernel
    ArrayView or a numpy array)."""
    off = 0
    for k, (n_in, n_out) in enumerate(zip(layers[:-1], layers[1:])):
        y = []
        for j in range(n_out):
            acc = weights[off + n_in * n_out + j]
            for i in range(n_in):
                acc = acc + weights[off + j * n_in + i] * x[i]
            y.append(acc if k == len(layers) - 2 else maximum(acc, 0.0))
        off += n_in * n_out + n_out
        x = y
    return x


# --- the BSDF plugin ------------------------------------------------------------
def _zero() -> Vec:
    return Vec(0.0, 0.0, 0.0)


def neural_eval(p, wi: Vec, wo: Vec, layers=LAYERS) -> Vec:
    ok = (wi.z > 0.0) & (wo.z > 0.0)
    log_f = mlp(p.weights, features(wi, wo, ir.sqrt, ir.maximum), ir.maximum, layers)
    f = Vec(*(ir.exp(ir.minimum(v, 6.0)) for v in log_f))
    return ir.select(ok, f * wo.z, _zero())


def neural_pdf(p, wi: Vec, wo: Vec):
    return ir.select((wi.z > 0.0) & (wo.z > 0.0), sampling.square_to_cosine_hemisphere_pdf(wo), 0.0)


def neural_sample(p, wi: Vec, u1, u2: Vec, layers=LAYERS):
    wo = sampling.square_to_cosine_hemisphere(u2)
    pdf = sampling.square_to_cosine_hemisphere_pdf(wo)
    ok = (wi.z > 0.0) & (pdf > 0.0)
    f = neural_eval(p, wi, wo, layers)
    return wo, pdf, ir.select(ok, f / ir.select(ok, pdf, 1.0), _zero()), ir.Bool(False)


def register(layers=LAYERS) -> None:
    """Register the BSDF for a network of ``layers`` (unit counts, input to output)."""
    plugins.register_bsdf("neural", [plugins.Param("weights", plugins.ARRAY, np.zeros(n_weights(layers)))],
                          functools.partial(neural_eval, layers=layers), neural_pdf,
                          functools.partial(neural_sample, layers=layers), replace=True)


# --- the scene ---------------------------------------------------------------------
def make_scene(res: int, material: dict) -> jaxrender.Scene:
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = res
    d["integrator"]["max_depth"] = 3
    del d["small-box"], d["large-box"]
    d["ball"] = {"type": "sphere", "center": [0.0, -0.45, 0.1], "radius": 0.5, "bsdf": material}
    return jaxrender.load_dict(d)


TRUE_MATERIAL = {"type": "roughconductor", "distribution": "ggx", "alpha": 0.2, "material": "Cu"}


def _look_at(origin) -> np.ndarray:
    return np.asarray(Transform().look_at(origin=origin, target=[0.0, -0.4, 0.0], up=[0, 1, 0]).matrix, np.float32)


def training_views(scene: jaxrender.Scene) -> jax.Array:
    """The box's own camera, one to the right and one from above: (3, 4, 4)."""
    return jnp.stack([jnp.asarray(scene.params[scene.camera_key]), _look_at([1.7, 0.3, 3.3]),
                      _look_at([0.2, 0.9, 3.5])])


def heldout_view() -> np.ndarray:
    """A camera lower and to the left of the training views."""
    return _look_at([-1.6, -0.5, 3.4])


def true_brdf_slice(theta_i: float, theta_o: np.ndarray) -> np.ndarray:
    """The true material's BRDF (eval / cos theta_o) in the plane of
    incidence, from jaxrender's own roughconductor kernel: (len(theta_o), 3)."""
    from jaxrender.kernels.bsdfs import registry
    from jaxrender.kernels.bsdfs.base import ParamView
    from jaxrender.primitives import launch
    from jaxrender.scene.conductors import complex_ior
    t = registry.TYPES["roughconductor-ggx"]
    eta, k = complex_ior("Cu")
    row = np.zeros(layout.BSDF_ROW, np.float32)
    row[t.slot("eta"):t.slot("eta") + 3] = eta
    row[t.slot("k"):t.slot("k") + 3] = k
    row[t.slot("specular_reflectance"):t.slot("specular_reflectance") + 3] = 1.0
    row[t.slot("alpha_u")] = row[t.slot("alpha_v")] = 0.2

    def body(prm, wo):
        i = ir.item_index()
        p = t.make(ParamView(t, [prm.read(0, c) for c in range(layout.BSDF_ROW)]))
        wi = Vec(math.sin(theta_i), 0.0, math.cos(theta_i))
        return {"f": tuple(t.call("eval", p, wi, Vec(*wo[i])))}

    kernel = ir.trace(body, {"prm": ir.In("f32", (layout.BSDF_ROW,)), "wo": ir.In("f32", (3,))},
                      {"f": ir.Out("f32", (3,))},
                      name="true_brdf_slice")
    wo = np.stack([-np.sin(theta_o), np.zeros_like(theta_o), np.cos(theta_o)], -1).astype(np.float32)
    f = np.asarray(launch(kernel, (len(wo),), prm=row[None], wo=wo)["f"], np.float64)
    return f / np.cos(theta_o)[:, None]


def neural_brdf_slice(weights: np.ndarray, theta_i: float, theta_o: np.ndarray, layers=LAYERS) -> np.ndarray:
    wi = np.array([math.sin(theta_i), 0.0, math.cos(theta_i)])
    wo = [-np.sin(theta_o), np.zeros_like(theta_o), np.cos(theta_o)]
    x = features(wi, wo, np.sqrt, np.maximum)
    x = [np.broadcast_to(v, theta_o.shape) for v in x]
    return np.exp(np.minimum(np.stack(mlp(np.asarray(weights, np.float64), x, np.maximum, layers), -1), 6.0))


# --- training ---------------------------------------------------------------------
def run(steps: int = 400, res: int = 64, spp: int = 8, target_spp: int = 512, lr: float = 0.005,
        out: str | Path = "neural_material", progress: bool = True, seed: int = 0, layers=LAYERS) -> dict:
    import optax
    from tqdm import tqdm

    register(layers)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    truth = make_scene(res, TRUE_MATERIAL)
    scene = make_scene(res, {"type": "neural", "weights": init_weights(seed, layers)})
    cam_key = scene.camera_key
    views = training_views(scene)
    heldout = {cam_key: heldout_view()}
    targets = jax.vmap(lambda v: jaxrender.render(truth, {cam_key: v}, spp=target_spp, seed=12345))(views)
    heldout_target = jaxrender.render(truth, heldout, spp=target_spp, seed=12345)

    w0 = jnp.asarray(scene.params[WEIGHTS_KEY])
    opt = optax.adam(lr)
    state = opt.init(w0)

    def loss_fn(w, seed):
        # All views in one launch per kernel (the render primitives' batching rule).
        imgs = jax.vmap(lambda v: jaxrender.render(scene, {WEIGHTS_KEY: w, cam_key: v}, spp=spp, seed=seed))(views)
        return jnp.mean((jnp.log1p(imgs) - jnp.log1p(targets)) ** 2)

    @jax.jit
    def step(w, state, seed):
        loss, g = jax.value_and_grad(loss_fn)(w, seed)
        updates, state = opt.update(g, state)
        return optax.apply_updates(w, updates), state, loss

    w, history = w0, []
    bar = tqdm(range(steps), desc="training", disable=not progress)
    for i in bar:
        w, state, loss = step(w, state, jnp.uint32(i))
        history.append(float(loss))
        bar.set_postfix(loss=f"{float(loss):.2e}")
    target = targets[0]
    initial = jaxrender.render(scene, {WEIGHTS_KEY: w0}, spp=target_spp, seed=1)
    final = jaxrender.render(scene, {WEIGHTS_KEY: w}, spp=target_spp, seed=1)
    heldout_final = jaxrender.render(scene, {WEIGHTS_KEY: w, **heldout}, spp=target_spp, seed=1)
    heldout_initial = jaxrender.render(scene, {WEIGHTS_KEY: w0, **heldout}, spp=target_spp, seed=1)

    images = {"target": target, "initial": initial, "final": final, "heldout_target": heldout_target,
              "heldout_final": heldout_final}
    for name, img in images.items():
        write_image(out / f"{name}.png", img)
    mse = lambda a, b: float(jnp.mean((a - b) ** 2))
    # Two renders of the truth with other random numbers: the error that
    # remains when the material is exactly right.
    floor = jaxrender.render(truth, spp=target_spp, seed=1)
    heldout_floor = jaxrender.render(truth, heldout, spp=target_spp, seed=1)
    result = {"history": history, "weights": np.asarray(w), "layers": layers,
              "mse_initial": mse(initial, target), "mse_final": mse(final, target),
              "mse_floor": mse(floor, target),
              "heldout_mse_initial": mse(heldout_initial, heldout_target),
              "heldout_mse_final": mse(heldout_final, heldout_target),
              "heldout_mse_floor": mse(heldout_floor, heldout_target)}
    _plot(out / "convergence.png", result, images)
    return result


def _plot(path: Path, result: dict, images: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from jaxrender.cli import linear_to_srgb8
    fig = plt.figure(figsize=(15, 6.5))
    grid = fig.add_gridspec(2, 5)
    ax = fig.add_subplot(grid[0, :2])
    loss = np.asarray(result["history"])
    ax.semilogy(loss, alpha=0.4, label="per step")
    if len(loss) >= 10:
        ax.semilogy(np.arange(9, len(loss)), np.convolve(loss, np.ones(10) / 10, "valid"), label="mean of 10")
    ax.set(title="training loss (MSE of log(1 + radiance))", xlabel="step")
    ax.legend()
    for k, name in enumerate(("target", "initial", "final")):
        a = fig.add_subplot(grid[0, 2 + k])
        a.imshow(linear_to_srgb8(np.asarray(images[name])))
        a.set(title=name, xticks=[], yticks=[])
    ax = fig.add_subplot(grid[1, :2])
    theta_o = np.linspace(-1.45, 1.45, 181)
    for theta_i, style in ((0.3, "-"), (0.9, "--")):
        truth = true_brdf_slice(theta_i, theta_o)
        learned = neural_brdf_slice(result["weights"], theta_i, theta_o, result["layers"])
        for c, colour in enumerate("rgb"):
            ax.semilogy(np.degrees(theta_o), truth[:, c], style, color=colour, alpha=0.35)
            ax.semilogy(np.degrees(theta_o), learned[:, c], style, color=colour)
    ax.set(title="BRDF in the plane of incidence (faint: true; solid 17°, dashed 52° incidence)",
           xlabel="theta_o (degrees, mirror direction > 0)")
    for k, name in enumerate(("heldout_target", "heldout_final")):
        a = fig.add_subplot(grid[1, 2 + k])
        a.imshow(linear_to_srgb8(np.asarray(images[name])))
        a.set(title=name.replace("_", " "), xticks=[], yticks=[])
    a = fig.add_subplot(grid[1, 4])
    a.axis("off")
    a.text(0.0, 0.5, f"image MSE, first training view:\n  {result['mse_initial']:.2e} -> {result['mse_final']:.2e}\n"
                     f"  (noise floor {result['mse_floor']:.2e})\n"
                     f"image MSE, held-out view:\n  {result['heldout_mse_initial']:.2e} -> "
                     f"{result['heldout_mse_final']:.2e}\n  (noise floor {result['heldout_mse_floor']:.2e})",
           family="monospace")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--spp", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--out", default="neural_material")
    args = ap.parse_args(argv)
    r = run(args.steps, args.res, args.spp, lr=args.lr, out=args.out)
    print(f"image MSE, training view {r['mse_initial']:.3e} -> {r['mse_final']:.3e} (noise floor "
          f"{r['mse_floor']:.3e}); held-out view {r['heldout_mse_initial']:.3e} -> {r['heldout_mse_final']:.3e} "
          f"(noise floor {r['heldout_mse_floor']:.3e})")
    print(f"plot and images in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
