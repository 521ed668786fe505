"""Make the tests' shared helper modules importable from any working
directory, keep one test's Mitsuba variant from leaking into the next, and
have XLA compile the tests' jitted graphs with less optimisation."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# XLA's share of a test is compiling the jitted graph around jaxrender's
# kernels: the loss, the parameters' transforms, the film boundary's
# segments, the BVH refit, and their derivatives (a moving sphere's gradient:
# 4206 lines of StableHLO, 1.4 s). The kernels themselves are compiled by
# jaxrender's own LLVM pipeline, which this flag does not reach, and the
# graphs are small arrays, so XLA's LLVM optimisations buy the tests nothing.
# At -O0 the XLA compile of one geometry test took 26% less time, and 13
# geometry-gradient tests with their kernels cached ran in 70-82 s instead
# of 89-95 s. XLA's older loop emitters (``xla_cpu_use_fusion_emitters=false``)
# compile the same graphs in about half the time again: a moving sphere's
# jitted gradient and jvp 2.3-2.5 -> 1.2-1.5 s, their results bit for bit
# the same. (Set before any test starts JAX's backend; a flag already in
# XLA_FLAGS is kept.)
TEST_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", "")] + [
    f"--{k}={v}" for k, v in TEST_XLA_FLAGS.items() if k not in os.environ.get("XLA_FLAGS", "")]).strip()


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
