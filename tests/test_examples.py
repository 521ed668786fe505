"""The ambient-occlusion example kernel against the independent numpy
implementation of the same specification (benchmarks/ao_scene.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "benchmarks")]

import ambient_occlusion  # noqa: E402
import ao_scene  # noqa: E402


def test_ambient_occlusion_matches_numpy_reference():
    W, H, K = 40, 32, 8
    scene = ao_scene.make_scene(64, seed=3)
    np.testing.assert_array_equal(ambient_occlusion.make_spheres(64, seed=3), scene["spheres"])
    kernel = ambient_occlusion.trace_ao()
    got = np.asarray(ambient_occlusion.render_ao(kernel, scene["spheres"], ambient_occlusion.camera_buffer(W, H),
                                                 W, H, K, np.uint32(11)))
    ref = ao_scene.ao_numpy(scene, W, H, K, 11)
    assert got.shape == (H, W)
    assert 0.1 < ref.mean() < 0.9  # a real image, not all sky or all black
    # Same float32 operations in the same order: equal up to a grazing ray
    # that rounds onto another surface.
    assert np.mean(got != ref) < 0.01
    assert np.abs(got - ref).mean() < 1e-3


def test_material_and_light_example_runs_and_moves_towards_the_truth(tmp_path):
    import material_and_light
    r = material_and_light.run(steps=4, res=12, spp=2, target_spp=16, out=tmp_path, progress=False)
    for name in ("target.png", "initial.png", "final.png", "convergence.png"):
        assert (tmp_path / name).stat().st_size > 0
    # Started at roughness 0.5 and a light at (0.5, 0.6, 0.9) x the truth.
    assert r["true_alpha"] < r["alpha"] < 0.5
    assert np.all(np.isfinite(r["light"]))
    assert np.linalg.norm(r["light"] - r["true_light"]) < np.linalg.norm(r["true_light"] * (1 - np.array([0.5, 0.6, 0.9])))


def test_texture_reconstruction_example_runs_and_moves_towards_the_truth(tmp_path):
    import texture_reconstruction
    r = texture_reconstruction.run(steps=6, res=16, spp=2, target_spp=32, lr=0.05, tex_size=8, out=tmp_path,
                                   progress=False)
    for name in ("target.png", "initial.png", "final.png", "true_texture.png", "recovered_texture.png",
                 "convergence.png"):
        assert (tmp_path / name).stat().st_size > 0
    start = np.sqrt(np.mean((0.5 - r["truth"]) ** 2))
    assert r["history"]["texture_rmse"][-1] < start - 0.01
