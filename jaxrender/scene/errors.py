"""Exceptions raised while reading scene descriptions and assets."""
from __future__ import annotations


class SceneError(ValueError):
    """A scene file, scene dictionary or asset (mesh, image) is invalid.

    The message always names the offending file (or dictionary key) and what
    is wrong.  Where known, the location is also available as attributes:
    ``filename`` (str or None), ``line`` (1-based int or None) and
    ``element`` (a short description such as ``'<integer name="spp">'``).
    """

    def __init__(self, message: str, *, filename: str | None = None,
                 line: int | None = None, element: str | None = None):
        super().__init__(message)
        self.filename = filename
        self.line = line
        self.element = element
