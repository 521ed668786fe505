"""Make the tests' shared helper modules importable from any working
directory, and keep one test's Mitsuba variant from leaking into the next."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def _restoring_mitsuba_variant():
    mi = sys.modules.get("mitsuba")
    before = mi.variant() if mi is not None else None
    yield
    mi = sys.modules.get("mitsuba")
    if mi is not None and before is not None and mi.variant() != before:
        mi.set_variant(before)


# Mitsuba's variant is process-wide: modules that compare with it set theirs
# once at import, so a test (or a module's fixture) that sets another one, a
# spectral reference say, gives the previous one back afterwards, whatever
# the order the tests run in.
_mitsuba_variant_per_module = pytest.fixture(scope="module", autouse=True)(_restoring_mitsuba_variant)
_mitsuba_variant_per_test = pytest.fixture(autouse=True)(_restoring_mitsuba_variant)
