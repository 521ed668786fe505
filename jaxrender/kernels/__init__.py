"""The physics (sampling, BSDFs, emitters, shapes, integrators), written
against :mod:`jaxrender.ir`. Must not import llvmlite or JAX."""
