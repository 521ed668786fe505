"""bench_volume.py's random-walk estimate of the scattering events per path
(printed next to its memory measurements) on cases with answers worked out
by hand."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_volume import mean_scattering_events  # noqa: E402


def test_no_medium_no_events():
    assert mean_scattering_events(0.0, 1.0, 100, n_paths=64) == 0.0


def test_one_event_is_a_collision_before_the_wall():
    # From the centre along an axis, the wall is half_size away: the first
    # (and, with max_events 1, only) event happens with probability
    # 1 - exp(-sigma_t * half_size).
    p = mean_scattering_events(2.0, 0.5, 1, n_paths=200_000, direction=(1.0, 0.0, 0.0))
    assert p == pytest.approx(1.0 - math.exp(-1.0), abs=0.005)


def test_a_medium_too_large_to_leave_gives_every_path_max_events():
    assert mean_scattering_events(10.0, 1e4, 50, n_paths=256) == 50.0


def test_escapes_make_the_mean_grow_slower_than_the_cap():
    # A thin medium: most paths leave after a few events, whatever the cap.
    few = mean_scattering_events(1.0, 1.0, 10, n_paths=20_000)
    many = mean_scattering_events(1.0, 1.0, 1000, n_paths=20_000)
    assert 0.5 < few < 10 and few < many < 10
