"""The plugin loaders, one module per Mitsuba plugin category, each
registering its type names in a :class:`~.registry.PluginRegistry`:
``shapes``, ``emitters``, ``bsdfs``, ``textures``, ``sensors`` (sensor, film,
rfilter, sampler) and ``integrators``."""
