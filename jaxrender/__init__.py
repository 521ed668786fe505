"""jaxrender: a differentiable renderer whose megakernels are JAX primitives."""
__version__ = "0.1.0"
