"""The examples run at small size: the ambient-occlusion kernel against an
independent numpy implementation of the same specification
(benchmarks/ao_scene.py); the optimisation examples move towards the truth;
the custom plugins (a BSDF and a texture written in the example's own
script) render, load from XML and have gradients that match finite
differences; the neural material trains."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import jaxrender

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


def test_custom_bsdf_example_renders_and_its_gradients_match_finite_differences(tmp_path):
    import custom_bsdf
    r = custom_bsdf.run(res=16, spp=4, out=tmp_path, grad_spp=2)
    assert (tmp_path / "render.png").stat().st_size > 0 and (tmp_path / "gradients.txt").stat().st_size > 0
    assert np.all(np.isfinite(r["image"])) and r["image"].mean() > 0.05
    # The new parameters: the roughness, and a colour of the texture plugin.
    assert {row["key"] for row in r["gradients"]} == {custom_bsdf.SIGMA_KEY, custom_bsdf.COLOR_KEY}
    for row in r["gradients"]:
        assert abs(row["fd"]) > 1e-2, row                # the derivative is not trivially zero
        assert abs(row["grad"] - row["fd"]) <= 3e-3 * abs(row["fd"]) + 2e-3, row


def test_oren_nayar_without_roughness_renders_exactly_as_diffuse():
    # sigma = 0 is Lambert's law; the built-in diffuse is checked against
    # Mitsuba. Same random numbers: equal to float rounding.
    import custom_bsdf
    custom_bsdf.register()
    d = jaxrender.cornell_box()
    d["sensor"]["film"]["width"] = d["sensor"]["film"]["height"] = 16
    rgb = {"type": "rgb", "value": [0.8, 0.5, 0.3]}
    d["large-box"]["bsdf"] = {"type": "oren_nayar", "sigma": 0.0, "reflectance": rgb}
    ours = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=4, seed=3))
    d["large-box"]["bsdf"] = {"type": "diffuse", "reflectance": rgb}
    ref = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=4, seed=3))
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
    d["large-box"]["bsdf"] = {"type": "oren_nayar", "sigma": 0.6, "reflectance": rgb}
    rough = np.asarray(jaxrender.render(jaxrender.load_dict(d), spp=4, seed=3))
    assert np.abs(rough - ref).max() > 1e-3          # roughness changes the image


def test_custom_plugins_load_from_xml_by_type_name(tmp_path):
    import custom_bsdf
    custom_bsdf.register()
    xml = tmp_path / "scene.xml"
    xml.write_text("""<scene version="3.0.0">
    <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="8"/>
        <integer name="height" value="8"/></film></sensor>
    <shape type="rectangle" id="floor">
        <bsdf type="oren_nayar">
            <float name="sigma" value="0.4"/>
            <texture type="stripes" name="reflectance"><float name="frequency" value="2"/></texture>
        </bsdf>
    </shape>
    <emitter type="constant"/>
</scene>""")
    scene = jaxrender.load_file(str(xml))
    assert scene.structure.textures == ("stripes",)
    assert {"floor.bsdf.sigma.value", "floor.bsdf.reflectance.color0.value", "floor.bsdf.reflectance.color1.value",
            "floor.bsdf.reflectance.frequency.value"} <= set(scene.params)
    assert np.all(np.isfinite(np.asarray(jaxrender.render(scene, spp=2))))
    bad = xml.read_text().replace('name="sigma"', 'name="sigmaa"')
    xml.write_text(bad)
    with pytest.raises(jaxrender.SceneError, match=r'line 6: oren_nayar plugin "floor.bsdf": unreferenced '
                                                   r'property "sigmaa"'):
        jaxrender.load_file(str(xml))


def test_neural_material_example_trains(tmp_path):
    import neural_material
    # A smaller network than the example's (5-8-3): the same code, less to compile.
    r = neural_material.run(steps=50, res=32, spp=8, target_spp=256, lr=0.02, out=tmp_path, progress=False,
                            layers=(5, 8, 3))
    for name in ("target.png", "initial.png", "final.png", "heldout_target.png", "heldout_final.png",
                 "convergence.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert np.all(np.isfinite(r["history"])) and np.all(np.isfinite(r["weights"]))
    assert r["weights"].shape == (neural_material.n_weights((5, 8, 3)),)
    # Trained through jax.grad of the render, the network moves from a grey
    # diffuse sphere towards the copper one, on the views it saw and on one
    # it did not.
    # (Image errors include Monte Carlo noise: the floor is the truth against itself.)
    assert r["mse_final"] - r["mse_floor"] < 0.6 * (r["mse_initial"] - r["mse_floor"])
    assert r["heldout_mse_final"] - r["heldout_mse_floor"] < 0.6 * (r["heldout_mse_initial"] - r["heldout_mse_floor"])


def test_smoke_reconstruction_example_runs_and_moves_towards_the_truth(tmp_path):
    import smoke_reconstruction
    r = smoke_reconstruction.run(steps=12, res=24, spp=4, target_spp=32, lr=0.05, out=tmp_path, progress=False)
    for name in ("views.png", "slices.png", "convergence.png"):
        assert (tmp_path / name).stat().st_size > 0
    rmse = r["history"]["grid_rmse"]
    assert np.all(np.isfinite(r["grid"]))
    assert rmse[-1] < r["start_rmse"] - 0.01, (r["start_rmse"], rmse)


def test_smoke_roughness_prior_is_the_mean_squared_neighbour_difference():
    import smoke_reconstruction
    grid = np.arange(8.0, dtype=np.float32).reshape(2, 2, 2)     # steps of 4, 2 and 1 along z, y, x
    assert float(smoke_reconstruction.roughness(grid)) == 16.0 + 4.0 + 1.0
    assert float(smoke_reconstruction.roughness(np.ones((3, 3, 3, 1), np.float32))) == 0.0


def test_smoke_scene_rays_leaving_the_medium_escape():
    """A ray of this view slips out of the cube's boundary while still in its
    heterogeneous medium, towards the environment: its flight ends at the
    grid's world box (before, it collided forever and the render hung)."""
    import smoke_reconstruction
    scene = smoke_reconstruction.make_scene(24, smoke_reconstruction.true_density(16))
    view = smoke_reconstruction.camera_views(4)[2]
    img = np.asarray(jaxrender.render(scene, {"sensor.to_world": view}, spp=64, seed=12345))
    assert np.all(np.isfinite(img)) and img.mean() > 0.0


def test_camera_pose_example_runs_and_moves_towards_the_truth(tmp_path):
    import camera_pose
    r = camera_pose.run(steps=40, res=16, spp=4, target_spp=32, out=tmp_path, progress=False)
    for name in ("target.png", "initial.png", "final.png", "convergence.png"):
        assert (tmp_path / name).stat().st_size > 0
    m = r["matrix"]
    assert np.all(np.isfinite(m))
    np.testing.assert_allclose(m[:3, :3] @ m[:3, :3].T, np.eye(3), atol=1e-5)   # still rigid
    loss = np.asarray(r["history"]["loss"])
    assert loss[-5:].mean() < 0.5 * loss[:5].mean(), loss
    assert r["mse_final"] < 0.5 * r["mse_initial"]
    assert r["history"]["rot_err_deg"][-1] < r["history"]["rot_err_deg"][0]


def test_shape_optimization_example_runs_and_moves_towards_the_target(tmp_path):
    import shape_optimization
    r = shape_optimization.run(steps=40, res=24, spp=4, target_spp=16, out=tmp_path, progress=False)
    for name in ("views.png", "convergence.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert np.all(np.isfinite(r["positions"]))
    loss = np.asarray(r["history"]["loss"])
    assert loss[-5:].mean() < 0.7 * loss[:5].mean(), loss
    assert r["vertex_err_final"] < 0.9 * r["vertex_err_initial"], r["history"]["vertex_err"]
    assert r["chamfer_final"] < 0.7 * r["chamfer_initial"]


def test_spectral_metals_example_renders_both_variants(tmp_path):
    import spectral_metals
    colours = spectral_metals.run(res=24, spp=8, out=tmp_path, plot=False)
    for name in ("rgb.png", "spectral.png", "difference.png"):
        assert (tmp_path / name).stat().st_size > 0
    for variant in ("rgb", "spectral"):
        gold, copper = colours["gold"][variant], colours["copper"][variant]
        assert np.all(np.isfinite(gold)) and gold[0] > gold[2] and copper[0] > copper[2], (variant, gold, copper)


def test_polarization_example_matches_its_closed_forms(tmp_path):
    import polarization
    r = polarization.run(res=56, spp=4, out=tmp_path, plot=False)
    for name in ("crossed.png", "s0.png", "s1.png", "s2.png", "s3.png", "filter_0.png", "filter_90.png"):
        assert (tmp_path / name).stat().st_size > 0
    for kind in polarization.PLATES:
        # (the white sky's spectral noise: 4 wavelengths a sample)
        np.testing.assert_allclose(r["measured"][kind], r["expected"][kind], atol=0.03)
    assert r["max_linear_degree"] > 0.5          # reflections off glass are strongly polarized
    assert r["filter_means"][90.0] < r["filter_means"][0.0]


def test_dispersion_example_splits_colours(tmp_path):
    import dispersion
    images = dispersion.run(res=48, spp=8, out=tmp_path, plot=False)
    for name in ("dispersive.png", "constant.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert all(np.all(np.isfinite(img)) for img in images.values())
    # the dispersive prism's view is coloured, the constant one's black and white
    assert dispersion.fringe_colour(images["dispersive"]) > 3 * dispersion.fringe_colour(images["constant"])
