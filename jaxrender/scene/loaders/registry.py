"""Plugin loaders by Mitsuba type name, one :class:`PluginRegistry` per
category.

A loader is a function ``loader(builder, props)`` that reads a plugin's
:class:`~jaxrender.scene.properties.Properties` into the
:class:`~jaxrender.scene.builder.SceneBuilder` (the BSDF and texture loaders
take one more argument, see their modules). Adding a plugin is one loader
function with one registration::

    @EMITTERS.register("point")
    def load_point(builder, props):
        ...

A type name Mitsuba knows but no loader handles is a "not supported yet"
error listing what is supported; a name Mitsuba does not know either, the
same error. :data:`MITSUBA_PLUGINS` lets the scene tell a sensor it cannot
load from an unknown plugin.
"""
from __future__ import annotations

from typing import Callable

from ..plugin_names import MITSUBA_PLUGINS, did_you_mean
from ..properties import Properties

class PluginRegistry:
    """The loaders of one plugin category (``"bsdf"``, ``"film"``...).

    ``noun`` starts the "not supported" message (``"bsdf type 'hair' is
    not supported yet (...)"``). Besides the names registered one by one,
    :meth:`serve` lets another registry supply names (the BSDFs of
    ``kernels.bsdfs.registry``, user BSDFs included) handled by one
    generic loader."""

    def __init__(self, category: str, noun: str | None = None):
        self.category = category
        self.noun = noun or f"{category} type"
        self._loaders: dict[str, Callable] = {}
        self._served: list[tuple[Callable[[], set], Callable]] = []

    def register(self, *type_names: str) -> Callable:
        """Decorator: the function loads plugins of these Mitsuba type names."""
        def add(loader: Callable) -> Callable:
            for name in type_names:
                if name in self._loaders:
                    raise ValueError(f"{self.category} type {name!r} already has a loader")
                self._loaders[name] = loader
            return loader
        return add

    def serve(self, names: Callable[[], set], loader: Callable) -> None:
        """``loader`` loads every type name in ``names()`` (asked anew each
        time, so that types registered later are found)."""
        self._served.append((names, loader))

    def supported(self) -> list[str]:
        names = set(self._loaders)
        for provider, _ in self._served:
            names |= set(provider())
        return sorted(names)

    def __contains__(self, type_name: str) -> bool:
        if not isinstance(type_name, str):      # (a malformed dict's type: the caller says so)
            return False
        return type_name in self._loaders or any(type_name in p() for p, _ in self._served)

    def knows(self, type_name: str) -> bool:
        """Whether the name is a plugin of this category (loaded or not)."""
        return type_name in self or type_name in MITSUBA_PLUGINS.get(self.category, ())

    def loader(self, props: Properties) -> Callable:
        """The loader of ``props.plugin``, or a "not supported yet" SceneError."""
        name = props.plugin
        if name in self._loaders:
            return self._loaders[name]
        for provider, loader in self._served:
            if name in provider():
                return loader
        supported = ", ".join(self.supported())
        if self.knows(name):
            raise props.error(f"{self.noun} {name!r} is not supported yet ({supported})")
        hint = did_you_mean(name, [*self.supported(), *MITSUBA_PLUGINS.get(self.category, ())])
        raise props.error(f"{self.noun} {name!r} is unknown{hint} (supported: {supported})")


def category_of(type_name: str, registries: tuple[PluginRegistry, ...]) -> str | None:
    """The category of a plugin type name: a registry that loads it first,
    then Mitsuba's own lists; None for a name nobody knows.
    Example: ``category_of("orthographic", ())`` -> ``"sensor"``."""
    for r in registries:
        if type_name in r:
            return r.category
    for r in registries:
        if r.knows(type_name):
            return r.category
    for category, names in MITSUBA_PLUGINS.items():
        if type_name in names:
            return category
    return None


def load_plugin(registry: PluginRegistry, target, spec, key: str, *args):
    """Load the plugin dict ``spec`` (key path ``key``) with its registered
    loader, ``loader(target, props, *args)``, then check that every property
    was read. Example: ``load_plugin(INTEGRATORS, builder, {"type": "path"},
    "integrator")`` -> ``{"type": "path"}``."""
    props = Properties(spec, key, registry.category)
    result = registry.loader(props)(target, props, *args)
    props.check_unread()
    return result


def reject_nested(builder, props: Properties, category: str, what: str) -> None:
    """A nested plugin of ``category`` (e.g. a medium) is a "not supported
    yet" error about ``what``."""
    for name, spec in props.plugins():
        if builder.category(spec, name) == category:
            raise props.error(f"{what} are not supported yet", name)
