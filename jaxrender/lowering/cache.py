"""On-disk cache of compiled kernel object code (and GPU kernels' PTX).

Entries are keyed by a hash of everything the machine code is a function
of: the kernel graph, the code generator's source, the target CPU and
features and the llvmlite/LLVM versions (see ``cpu.kernel_key``). An entry
file is ``MAGIC | sha256(payload) | len(payload) | payload``; anything that
does not verify (truncated, corrupt, foreign) is treated as a miss and
replaced. Writers go through a private temporary file and an atomic
``os.replace``, so concurrent processes never observe half-written entries.

Location: ``$JAXRENDER_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/jaxrender``,
else ``~/.cache/jaxrender``. ``JAXRENDER_DISABLE_DISK_CACHE=1`` turns it off.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import warnings
from pathlib import Path

MAGIC = b"JRKOBJ01"
_HEADER = struct.Struct("<8s32sQ")


def cache_dir() -> Path | None:
    if os.environ.get("JAXRENDER_DISABLE_DISK_CACHE", "") not in ("", "0"):
        return None
    explicit = os.environ.get("JAXRENDER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "jaxrender"


def _path(key: str, suffix: str = ".o") -> Path | None:
    d = cache_dir()
    if d is None:
        return None
    return d / key[:2] / f"{key}{suffix}"


def load(key: str, suffix: str = ".o") -> bytes | None:
    """The cached payload for ``key``, or None if absent or invalid.
    ``suffix`` names the kind of entry: ``.o`` host object code, ``.ptx``."""
    p = _path(key, suffix)
    if p is None:
        return None
    try:
        blob = p.read_bytes()
    except OSError:
        return None
    if len(blob) < _HEADER.size:
        return None
    magic, digest, length = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size:]
    if magic != MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


_warned = False


def store(key: str, payload: bytes, suffix: str = ".o") -> None:
    """Atomically write an entry; failures only warn (the cache is optional)."""
    global _warned
    p = _path(key, suffix)
    if p is None:
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_HEADER.pack(MAGIC, hashlib.sha256(payload).digest(), len(payload)))
                f.write(payload)
            os.replace(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        if not _warned:
            warnings.warn(f"jaxrender: kernel disk cache at {p.parent} is not writable ({exc}); "
                          "kernels will be recompiled in new processes", RuntimeWarning, stacklevel=3)
            _warned = True
