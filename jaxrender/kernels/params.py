"""How a plugin declares its Mitsuba parameters (BSDFs, textures).

A :class:`Param` names one Mitsuba property and says how the scene builder
reads it (its kind) and what it defaults to. Plugins read their values in
the kernel through a view that maps names to IR values (``bsdfs.base
.ParamView``, ``textures.TextureView``).

Example::

    Param("reflectance", COLOR, 0.5)              # key "<id>.reflectance.value"
    Param("weights", ARRAY, np.zeros(64))         # key "<id>.weights", 64 floats in texels
"""
from __future__ import annotations

import dataclasses
from typing import Any

# Kinds of parameters, by how the scene reads them and the kernel stores them.
COLOR = "color"      # a colour (rgb, float) or a texture; a Spectrum; key "<name>.value"
FLOAT = "float"      # a float or a texture (its luminance); key "<name>.value"
SCALAR = "scalar"    # a plain float (never a texture); key "<name>"
IOR = "ior"          # the relative index of refraction int_ior / ext_ior (named or numeric); key "eta"
FLAG = "flag"        # a boolean stored with the values (not a parameter)
OPTION = "option"    # a trace-time choice selecting the kernel variant (not stored)
ARRAY = "array"      # a float array of fixed size, stored in the texels buffer; key "<name>"
BSDF = "bsdf"        # a nested BSDF (composite BSDFs): the row holds its BSDF index; its keys "<name>.*"
TEXTURE = "texture"  # a bitmap texture the plugin's code reads itself (bumpmap's gradient): the row holds its index
KINDS = (COLOR, FLOAT, SCALAR, IOR, FLAG, OPTION, ARRAY, BSDF, TEXTURE)


@dataclasses.dataclass(frozen=True)
class Param:
    """One Mitsuba property of a plugin.

    ``default``: the value when the property is absent (an IOR's default is
    the name of the interior medium, e.g. ``"bk7"``; an ARRAY's is its
    initial values, whose length is the array's size). ``group``: parameters
    sharing a group (``alpha_u``, ``alpha_v``) are read from the group's name
    (``alpha``, one parameter) when none of them is given, as Mitsuba's
    isotropic roughness. ``choices``: the values an OPTION may take.
    ``nondiff``: why its derivative cannot be computed (None: it can).
    ``frozen``: why its loaded value is fixed (a render may not change it
    and it has no derivative), e.g. a value that selected the kernel
    variant; None: it may change."""
    name: str
    kind: str
    default: Any = None
    group: str | None = None
    choices: tuple = ()
    nondiff: str | None = None
    frozen: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"parameter {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == OPTION and self.default not in self.choices:
            raise ValueError(f"option {self.name!r}: default {self.default!r} is not among {self.choices}")
        if self.kind == ARRAY:
            try:
                size = len(self.default)
            except TypeError:
                size = 0
            if size < 1:
                raise ValueError(f"array parameter {self.name!r}: its default must be a non-empty sequence "
                                 "of floats (its length is the array's size)")
        # Arrays are hashable plugin declarations: keep the default as a tuple.
        if self.kind == ARRAY and not isinstance(self.default, tuple):
            object.__setattr__(self, "default", tuple(float(x) for x in self.default))

    @property
    def size(self) -> int:
        """Floats of an ARRAY parameter."""
        return len(self.default) if self.kind == ARRAY else 0

    def width(self, channels: int = 3) -> int:
        """Floats it takes in a parameter row (an ARRAY: one, its texture index)."""
        return 0 if self.kind == OPTION else channels if self.kind == COLOR else 1


class ArrayView:
    """Kernel-side reader of an ARRAY parameter: ``view[i]`` is its i-th
    float (a differentiable read of the texels buffer)."""

    def __init__(self, texels, offset, size: int):
        self.texels, self.offset, self.size = texels, offset, size

    def __getitem__(self, i):
        return self.texels.read(self.offset + i)

    def __len__(self) -> int:
        return self.size


def add_plugin(table: dict, name: str, plugin, what: str, builtin, replace: bool, hooks: list) -> None:
    """Put ``plugin`` into a registry ``table`` under ``name`` (a user's
    plugin): never over a built-in one, over a registered one only with
    ``replace``; then run the registry's change ``hooks`` (they drop traced
    kernels that may hold the old code)."""
    if name in builtin:
        raise ValueError(f"{name!r} is a built-in {what} and cannot be replaced")
    if name in table and not replace:
        raise ValueError(f"a {what} type {name!r} is already registered (pass replace=True to replace it)")
    table[name] = plugin
    for hook in hooks:
        hook()
