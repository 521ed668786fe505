"""BSDF kernels written against the kernel IR, following Mitsuba 3's conventions.

Everything is expressed in the local shading frame (z = normal). Each BSDF
module ``m`` exposes a params container (a dataclass of IR values, so it is a
pytree) and three functions:

* ``m.eval(params, wi, wo) -> Vec``: BSDF value times ``|cos theta_o|``, as
  Mitsuba's ``BSDF::eval`` returns it (rgb ``Vec``; 0 for delta lobes and
  for directions Mitsuba rejects, e.g. below the horizon).
* ``m.pdf(params, wi, wo) -> Float``: solid-angle density of ``m.sample``
  (0 for delta lobes).
* ``m.sample(params, wi, u1, u2) -> (wo, pdf, weight, is_delta)`` with
  ``u1`` a Float and ``u2`` a ``Vec`` of two Floats in [0, 1); ``weight`` is
  Mitsuba's returned spectrum (``eval / pdf`` for non-delta lobes), zero when
  sampling fails; delta lobes report ``pdf = 1`` as Mitsuba does.

Trace-time choices (e.g. a microfacet distribution) are keyword arguments;
everything in ``params`` is runtime data. Shared pieces: ``fresnel`` and
``microfacet``.
"""
