"""Make the tests' shared helper modules importable from any working
directory, and keep one test's Mitsuba variant from leaking into the next."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _mitsuba_variant_restored():
    """Mitsuba's variant is process-wide: modules that compare with it set
    theirs once at import, so a test that sets another one (a spectral
    reference, say) gets the previous one back afterwards, whatever the
    test order."""
    mi = sys.modules.get("mitsuba")
    before = mi.variant() if mi is not None else None
    yield
    mi = sys.modules.get("mitsuba")
    if mi is not None and before is not None and mi.variant() != before:
        mi.set_variant(before)
