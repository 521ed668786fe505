"""The equal-error helpers of benchmarks/efficiency.py on synthetic data
with answers worked out by hand: the benchmarks' efficiency ratios are
only as right as these."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from efficiency import (Comparison, alternate, gradient_scale, mean_difference_z, relative_seed_variance,  # noqa: E402
                        seed_variance, set_filter, variance_ratio_interval)


def test_seed_variance_is_unbiased_per_element_then_averaged():
    # Two seeds a, b: the unbiased variance is (a - b)**2 / 2 (a biased one
    # would give half). Elements spread 0, 2 and 4 apart: 0, 2 and 8, mean 10/3.
    a = np.array([[1.0, 5.0, -2.0]])
    b = np.array([[1.0, 7.0, 2.0]])
    assert seed_variance(np.stack([a, b])) == pytest.approx(10 / 3)
    # Many seeds of known spread: Gaussian noise of stddev 0.5 on an image.
    rng = np.random.default_rng(0)
    images = 3.0 + 0.5 * rng.standard_normal((4000, 4, 4, 3))
    assert seed_variance(images) == pytest.approx(0.25, rel=0.02)
    with pytest.raises(ValueError):
        seed_variance(images[:1])


def test_relative_gradient_variance_uses_one_scale_for_both():
    # Gradient components of very different size, both renderers of the
    # same mean, the second twice as noisy (in stddev) on every component:
    # relative variance ratio exactly 4, whatever the components' sizes.
    mean = np.array([1e-3, 2.0, -5.0])
    e = np.array([-1.0, 1.0, -1.0, 1.0])[:, None]
    ours = mean + 0.1 * np.abs(mean) * e
    theirs = mean + 0.2 * np.abs(mean) * e
    scale = gradient_scale(ours, theirs)
    np.testing.assert_allclose(scale, mean ** 2 * (1 + (0.01 + 0.04) / 2))
    v_ours = relative_seed_variance(ours, scale)
    # var over 4 seeds of +-0.1|m|: 4 * 0.01 m**2 / 3
    assert v_ours == pytest.approx((4 * 0.01 / 3) / (1 + 0.025))
    assert relative_seed_variance(theirs, scale) / v_ours == pytest.approx(4.0)
    # A component always zero for both is left out, not a division by zero.
    zero = np.zeros((4, 1))
    scale0 = gradient_scale(np.hstack([ours, zero]), np.hstack([theirs, zero]))
    assert relative_seed_variance(np.hstack([ours, zero]), scale0) == pytest.approx(v_ours)


def test_efficiency_ratio_is_mitsuba_time_variance_over_ours():
    row = Comparison("s", "gaussian", t_ours=0.3, t_mitsuba=0.4, var_ours=1.0, var_mitsuba=2.0)
    assert row.time_ratio == pytest.approx(4 / 3)
    assert row.variance_ratio == pytest.approx(2.0)
    assert row.efficiency_ratio == pytest.approx((0.4 * 2.0) / (0.3 * 1.0))
    assert row.as_dict()["efficiency_ratio"] == pytest.approx(8 / 3)


def test_variance_ratio_interval_covers_the_true_ratio_and_narrows_with_seeds():
    rng = np.random.default_rng(3)
    ours = rng.normal(0.0, 1.0, (16, 500))
    theirs = rng.normal(0.0, 2.0, (16, 500))            # 4x the variance
    lo, hi = variance_ratio_interval(ours, theirs)
    assert lo < 4.0 < hi and lo > 1.0
    # heavy tails: a few bright samples; more seeds, a narrower interval
    def heavy(k):
        return rng.standard_t(3, (k, 400))
    few = variance_ratio_interval(heavy(8), heavy(8))
    many = variance_ratio_interval(heavy(128), heavy(128))
    assert few[0] < 1.0 < few[1] and many[0] < 1.0 < many[1]
    assert many[1] - many[0] < 0.5 * (few[1] - few[0])


def test_variance_ratio_interval_of_few_seeds_is_finite():
    # with 4 seeds, 1 bootstrap draw in 64 repeats one seed: a zero variance
    rng = np.random.default_rng(5)
    lo, hi = variance_ratio_interval(rng.normal(0.0, 1.0, (4, 50)), rng.normal(0.0, 1.0, (4, 50)))
    assert 0.0 < lo <= hi < np.inf


def test_mean_difference_z():
    # Means 1 and 0, each from K=2 seeds 1 either side of it: unbiased
    # variance 2 each, standard error of the difference sqrt(2/2 + 2/2).
    a = np.array([[0.0], [2.0]])
    b = np.array([[-1.0], [1.0]])
    np.testing.assert_allclose(mean_difference_z(a, b), [1 / np.sqrt(2)])
    np.testing.assert_array_equal(mean_difference_z(np.ones((3, 2)), np.ones((3, 2))), [0.0, 0.0])


def test_alternate_takes_turns_after_warmup():
    calls = []
    runners = {"a": lambda s: calls.append(("a", s)) or s, "b": lambda s: calls.append(("b", s)) or -s}
    times, results = alternate(runners, [0, 1, 2], warmup=1)
    assert calls[2:] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert {c[1] for c in calls[:2]}.isdisjoint({0, 1, 2})      # warm-up seeds are not timed seeds
    assert results == {"a": [0, 1, 2], "b": [0, -1, -2]}
    assert all(len(t) == 3 and min(t) >= 0 for t in times.values())


def test_our_gradient_over_primal_ratio_is_timed_without_mitsuba_in_between():
    # Our primal ran slower right after Mitsuba's backward pass, which made
    # our value_and_grad / primal ratio read low: run_all times ours again
    # in a loop of their own, and gradient_row takes the ratio from it.
    import time
    from grad_compare import gradient_row, run_all
    calls = []

    def runner(name, seconds, grad=False):
        def run(seed):
            calls.append(name)
            time.sleep(seconds)
            return (1.0, np.array([1.0, 2.0, 3.0]) + seed % 2) if grad else 1.0
        return run
    runners = {"ours primal": runner("ours primal", 0.004), "ours grad": runner("ours grad", 0.01, True),
               "mitsuba primal": runner("mitsuba primal", 0.001), "mitsuba grad": runner("mitsuba grad", 0.001, True)}
    times, results, own = run_all(runners, [0, 1, 2])
    second_loop = calls[-(2 + 2 * 3):]      # (after its warm-up calls, ours alone)
    assert set(second_loop) == {"ours primal", "ours grad"}
    assert set(own) == {"ours primal", "ours grad"} and all(len(t) == 3 for t in own.values())
    # (the row's ratio is the own loop's, not the interleaved one's)
    own["ours primal"] = [0.002] * 3
    own["ours grad"] = [0.005] * 3
    assert gradient_row("s", "box", times, results, own)["grad_over_primal_ours"] == pytest.approx(2.5)
    # Without Mitsuba's runners there is nothing in between: one loop.
    calls.clear()
    times, _, own = run_all({k: runners[k] for k in ("ours primal", "ours grad")}, [0, 1])
    assert own is times and len(calls) == 2 + 2 * 2


def test_set_filter_changes_the_film_of_the_sensor():
    import jaxrender
    d = set_filter(jaxrender.cornell_box(), "tent")
    assert d["sensor"]["film"]["rfilter"] == {"type": "tent"}
    assert jaxrender.load_dict(d).sensor(0)[1].rfilter == "tent"
