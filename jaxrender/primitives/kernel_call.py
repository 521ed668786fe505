"""Turn a traced kernel into a JAX primitive.

``launch(kernel, launch_shape, **inputs)`` binds ``kernel_call_p``: one XLA
custom call (typed FFI) whose handler is the kernel's generated machine
code. It works eagerly and under ``jax.jit``, ``jax.vmap`` (a batch axis
becomes more work items of the same launch) and ``lax.scan``.

Example::

    import jax.numpy as jnp
    from jaxrender import ir
    from jaxrender.primitives import launch

    k = ir.trace(lambda x: {"y": x[ir.item_index()] * 2.0},
                 {"x": ir.In("f32")}, {"y": ir.Out("f32")})
    y = launch(k, (4,), x=jnp.arange(4.0))["y"]     # [0, 2, 4, 6]
"""
from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import SdyShardingRule, custom_partitioning
from jax.extend.core import Primitive
from jax._src import dispatch as jax_dispatch
from jax._src import sharding_impls
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .. import lowering
from ..ir.graph import NUMPY_DTYPE
from ..ir.kernel import Kernel
from ..lowering.abi import InfoLayout

kernel_call_p = Primitive("jaxrender_kernel")
kernel_call_p.multiple_results = True

DEFAULT_TILE = 64


class KernelHandle:
    """Hashable wrapper so a Kernel can be a static primitive parameter."""

    __slots__ = ("kernel", "_fp")

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self._fp = kernel.fingerprint

    def __hash__(self) -> int:
        return hash(self._fp)

    def __eq__(self, other) -> bool:
        return isinstance(other, KernelHandle) and other._fp == self._fp

    def __repr__(self) -> str:
        return f"<kernel {self.kernel.name} {self._fp[:12]}>"


def _prod(xs) -> int:
    return int(math.prod(xs))


def _validate(kernel: Kernel, launch_shape, accum_rows: Mapping[str, int], inputs: Mapping[str, Any]):
    """Check names, dtypes and shapes; returns the arrays in kernel order."""
    if not isinstance(launch_shape, tuple) or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in launch_shape):
        raise ValueError(f"kernel {kernel.name!r}: launch_shape must be a tuple of non-negative ints, "
                         f"got {launch_shape!r}")
    if _prod(launch_shape) >= 2 ** 31:
        raise ValueError(f"kernel {kernel.name!r}: launch of {_prod(launch_shape)} work items is too large "
                         "(at most 2**31 - 1 per batch element)")
    unknown = set(inputs) - set(kernel.inputs)
    if unknown:
        raise ValueError(f"kernel {kernel.name!r}: unknown input(s) {sorted(unknown)}; "
                         f"expected {list(kernel.inputs)}")
    arrays = []
    for name, spec in kernel.inputs.items():
        if name not in inputs:
            raise ValueError(f"kernel {kernel.name!r}: missing input {name!r}")
        x = inputs[name]
        want = np.dtype(NUMPY_DTYPE[spec.dtype])
        if isinstance(x, (bool, int, float)) and spec.scalar:
            x = jnp.asarray(x, dtype=want)  # a Python number takes the declared dtype
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            x = np.asarray(x)
        if np.dtype(x.dtype) != want:
            raise ValueError(f"kernel {kernel.name!r}: input {name!r} must have dtype {want.name}, "
                             f"got {np.dtype(x.dtype).name}")
        if spec.scalar:
            if tuple(x.shape) != ():
                raise ValueError(f"kernel {kernel.name!r}: input {name!r} must be a scalar (shape ()), "
                                 f"got shape {tuple(x.shape)}")
        else:
            want_shape = ("rows",) + spec.item_shape
            if len(x.shape) != len(want_shape) or tuple(x.shape[1:]) != spec.item_shape:
                raise ValueError(f"kernel {kernel.name!r}: input {name!r} must have shape "
                                 f"(rows, {', '.join(map(str, spec.item_shape))}) "
                                 f"[rank {len(want_shape)}], got {tuple(x.shape)}"
                                 if spec.item_shape else
                                 f"kernel {kernel.name!r}: input {name!r} must be 1-D (rows,), got shape {tuple(x.shape)}")
        if _prod(x.shape) >= 2 ** 31:
            raise ValueError(f"kernel {kernel.name!r}: input {name!r} has {_prod(x.shape)} elements; "
                             "at most 2**31 - 1 are supported")
        arrays.append(x)
    rows = []
    for name, spec in kernel.accumulators.items():
        if name not in accum_rows:
            raise ValueError(f"kernel {kernel.name!r}: accumulator {name!r} needs its row count in accum_rows")
        r = accum_rows[name]
        if not isinstance(r, (int, np.integer)) or r < 0:
            raise ValueError(f"kernel {kernel.name!r}: accum_rows[{name!r}] must be a non-negative int, got {r!r}")
        rows.append(int(r))
    extra = set(accum_rows) - set(kernel.accumulators)
    if extra:
        raise ValueError(f"kernel {kernel.name!r}: accum_rows names unknown accumulator(s) {sorted(extra)}")
    return arrays, tuple(rows)


def launch(kernel: Kernel, launch_shape: tuple[int, ...], accum_rows: Mapping[str, int] | None = None,
           *, num_threads: int | None = None, simd_lanes: int | None = None, preferred_lanes: int | None = None,
           **inputs: Any) -> dict[str, jax.Array]:
    """Run ``kernel`` over ``launch_shape`` work items; returns its outputs by name.

    Inputs are validated (names, dtypes, shapes) before anything is traced
    or launched; a mismatch raises ``ValueError`` naming the argument.
    ``Out`` results have shape ``launch_shape + item_shape``; ``Accum``
    results ``(accum_rows[name],) + item_shape``. ``num_threads`` defaults to
    ``$JAXRENDER_NUM_THREADS`` or the usable cores; per-item outputs do not
    depend on it, nor on ``simd_lanes`` (work items per SIMD packet; default
    from ``$JAXRENDER_SIMD_LANES``, else ``preferred_lanes``, else the host
    CPU; 1 = one-lane code)."""
    from ..lowering import cpu
    threads = cpu.num_threads() if num_threads is None else int(num_threads)
    if threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads!r}")
    lanes = cpu.simd_lanes(preferred_lanes) if simd_lanes is None else cpu.check_lanes(simd_lanes, "simd_lanes")
    launch_shape = tuple(int(d) for d in launch_shape) if isinstance(launch_shape, (tuple, list)) else launch_shape
    arrays, rows = _validate(kernel, launch_shape, accum_rows or {}, inputs)
    outs = kernel_call_p.bind(*arrays, kernel=KernelHandle(kernel), launch_shape=launch_shape,
                              accum_rows=rows, batch_shape=(), in_batch=tuple(() for _ in arrays),
                              num_threads=threads, simd_lanes=lanes)
    names = list(kernel.item_outputs) + list(kernel.accumulators)
    return dict(zip(names, outs))


def prefetch(kernel: Kernel, *, simd_lanes: int | None = None, preferred_lanes: int | None = None) -> None:
    """Start compiling ``kernel`` for an unbatched launch on JAX's default
    backend in the background, where that backend can (the CPU: see
    ``lowering.cpu.prefetch``); a later :func:`launch` of it then waits for
    that compile instead of starting its own. Returns at once."""
    platform = jax.default_backend()
    start = getattr(lowering.backend(platform), "prefetch", None) if platform in lowering.BACKENDS else None
    if start is not None:
        from ..lowering import cpu
        start(kernel, 0, cpu.simd_lanes(preferred_lanes) if simd_lanes is None
              else cpu.check_lanes(simd_lanes, "simd_lanes"))


# ---------------------------------------------------------------------------
# Primitive rules
# ---------------------------------------------------------------------------

def _out_avals(kernel: Kernel, launch_shape, accum_rows, batch_shape):
    avals = []
    for spec in kernel.item_outputs.values():
        avals.append(jax.core.ShapedArray(batch_shape + launch_shape + spec.item_shape, NUMPY_DTYPE[spec.dtype]))
    for r, spec in zip(accum_rows, kernel.accumulators.values()):
        avals.append(jax.core.ShapedArray(batch_shape + (r,) + spec.item_shape, NUMPY_DTYPE[spec.dtype]))
    return avals


def _abstract_eval(*args, kernel, launch_shape, accum_rows, batch_shape, in_batch, num_threads, simd_lanes):
    return _out_avals(kernel.kernel, launch_shape, accum_rows, batch_shape)


kernel_call_p.def_abstract_eval(_abstract_eval)


def _impl(*args, **params):
    from jax._src import dispatch
    return dispatch.apply_primitive(kernel_call_p, *args, **params)


kernel_call_p.def_impl(_impl)


def _launch_info(kernel: Kernel, arrays_shapes, launch_shape, accum_rows, batch_shape, in_batch,
                 threads: int, pad_empty: bool = True) -> np.ndarray:
    nb = len(batch_shape)
    layout = InfoLayout(nb, len(kernel.inputs), len(kernel.item_outputs), len(kernel.accumulators))
    info = np.zeros(layout.size, np.int64)
    n_local = _prod(launch_shape)
    n_batch = _prod(batch_shape)
    info[0] = n_local
    info[1] = n_local * n_batch
    info[2] = DEFAULT_TILE
    info[3] = threads
    info[layout.batch_shape:layout.batch_shape + nb] = batch_shape
    for i, (spec, shape, flags) in enumerate(zip(kernel.inputs.values(), arrays_shapes, in_batch)):
        nbi = sum(flags)
        dims = list(shape)
        info[layout.rows(i)] = 1 if spec.scalar else dims[nbi]
        if pad_empty and not spec.scalar and dims[nbi] == 0:
            dims[nbi] = 1  # empty inputs are padded to one zero row (see _ffi_call)
        info[layout.in_elems(i)] = _prod(dims)
        # Element stride of each batch dim this input carries (row-major).
        pos = 0
        for k in range(nb):
            if flags[k]:
                info[layout.stride(i, k)] = _prod(dims[pos + 1:])
                pos += 1
    for j, r in enumerate(accum_rows):
        info[layout.acc_rows(j)] = r
    avals = _out_avals(kernel, launch_shape, accum_rows, batch_shape)
    for j, a in enumerate(avals):
        info[layout.out_elems(j)] = _prod(a.shape)
    return info


def _ffi_call(*args, kernel, launch_shape, accum_rows, batch_shape, in_batch, num_threads, simd_lanes,
              platform="cpu", info_operand=None):
    k = kernel.kernel
    for name, x in zip(k.inputs, args):  # under vmap the batched array is the one that counts
        if _prod(x.shape) >= 2 ** 31:
            raise ValueError(f"kernel {k.name!r}: batched input {name!r} has {_prod(x.shape)} elements; "
                             "at most 2**31 - 1 are supported")
    target = lowering.backend(platform)
    compiled = target.compile_kernel(k, len(batch_shape), simd_lanes)
    # Reads from an empty buffer are clamped to a zero row. A backend whose
    # handler supplies that row itself gets the empty buffer as it is (a
    # padding row would be a zero constant, which XLA turns into a broadcast
    # and compiles into a kernel of its own: most of a first call's XLA time).
    pad_empty = not getattr(target, "ZERO_ROW_FOR_EMPTY_INPUTS", False)
    padded = []
    for spec, x, flags in zip(k.inputs.values(), args, in_batch):
        nbi = sum(flags)
        if pad_empty and not spec.scalar and x.shape[nbi] == 0:
            x = jnp.zeros(x.shape[:nbi] + (1,) + x.shape[nbi + 1:], x.dtype)
        padded.append(x)
    info = _launch_info(k, [a.shape for a in args], launch_shape, accum_rows, batch_shape, in_batch,
                        num_threads, pad_empty)
    out_types = [jax.ShapeDtypeStruct(a.shape, a.dtype)
                 for a in _out_avals(k, launch_shape, accum_rows, batch_shape)]
    if not out_types:
        return []
    # JAX without x64 has no int64 arrays: ship the int64 words as int32 pairs
    # (little-endian), which the handler reads back as int64.
    info32 = jnp.asarray(info.view(np.int32)) if info_operand is None else info_operand
    # The GPU handler's host side reads the launch info from an attribute
    # (it cannot read device memory): backends get it as int64 words too.
    return target.ffi_call(compiled, out_types, info, info32, *padded)


# ---------------------------------------------------------------------------
# Sharding: a batched launch splits along its batch levels
# ---------------------------------------------------------------------------
# Batch elements are independent launches that share the unbatched inputs,
# so under a sharded jit each device launches its own slice of every batch
# level, on its slice of the batched inputs, with the unbatched ones (scene
# buffers) replicated. Accumulators are per batch element, so summing them
# over a sharded level (the gradient of a shared parameter) is an ordinary
# reduction that XLA turns into an all-reduce. One device, or a shard_map
# body, launches the kernel directly.

def _sharding_rule(in_shapes, in_batch, out_ranks, nb: int) -> SdyShardingRule:
    """Each batch level a factor shared by the inputs batched over it and by
    every output; all other dimensions (and the launch info words, the
    first operand) must stay whole."""
    whole, operands = ["info"], [("info",)]
    for i, (shape, flags) in enumerate(zip(in_shapes, in_batch)):
        dims = [f"b{k}" for k in range(nb) if flags[k]]
        rest = [f"i{i}_{d}" for d in range(len(shape) - len(dims))]
        whole += rest
        operands.append(tuple(dims + rest))
    results = []
    for j, rank in enumerate(out_ranks):
        rest = [f"o{j}_{d}" for d in range(rank - nb)]
        whole += rest
        results.append(tuple([f"b{k}" for k in range(nb)] + rest))
    return SdyShardingRule(tuple(operands), tuple(results), need_replication_factors=tuple(whole))


def _partitioned_call(*args, platform, **params):
    """The launch as a ``custom_partitioning`` op (see above)."""
    batch_shape, in_batch = params["batch_shape"], params["in_batch"]
    nb = len(batch_shape)
    avals = _out_avals(params["kernel"].kernel, params["launch_shape"], params["accum_rows"], batch_shape)

    def batch_spec(sharding) -> tuple:
        spec = tuple(sharding.spec) + (None,) * nb
        return spec[:nb]

    def partition(mesh, arg_shapes, result_shape):
        spec = batch_spec(result_shape[0].sharding)
        sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))

        def count(axes) -> int:
            return _prod(sizes[a] for a in ((axes,) if isinstance(axes, str) else axes or ()))

        local = tuple(n // count(a) for n, a in zip(batch_shape, spec))
        in_shardings = (NamedSharding(mesh, P()),) + tuple(
            NamedSharding(mesh, P(*[a for a, f in zip(spec, flags) if f], *[None] * (len(x.shape) - sum(flags))))
            for x, flags in zip(arg_shapes[1:], in_batch))
        out_shardings = [NamedSharding(mesh, P(*spec, *[None] * (len(a.shape) - nb))) for a in avals]

        def lower_fn(info32, *xs):
            return _ffi_call(*xs, **dict(params, batch_shape=local), platform=platform)

        return mesh, lower_fn, out_shardings, in_shardings

    def launch_whole(info32, *xs):
        return _ffi_call(*xs, platform=platform, info_operand=info32, **params)

    launch_fn = custom_partitioning(launch_whole)
    launch_fn.def_partition(partition, sharding_rule=_sharding_rule(
        [x.shape for x in args], in_batch, [len(a.shape) for a in avals], nb))
    # The whole launch's info words enter as an operand: the function a
    # custom_partitioning op wraps may not hold constants.
    pad_empty = not getattr(lowering.backend(platform), "ZERO_ROW_FOR_EMPTY_INPUTS", False)
    info = _launch_info(params["kernel"].kernel, [x.shape for x in args], params["launch_shape"],
                        params["accum_rows"], batch_shape, in_batch, params["num_threads"], pad_empty)
    return launch_fn(jnp.asarray(info.view(np.int32)), *args)


def _spans_devices(ctx) -> bool:
    """Whether this lowering is for a computation over several devices
    that XLA's partitioner will split (not one device, not a shard_map body)."""
    axis_context = ctx.module_context.axis_context
    if isinstance(axis_context, sharding_impls.ShardingContext):
        return axis_context.num_devices > 1
    if isinstance(axis_context, sharding_impls.SPMDAxisContext):
        return set(axis_context.manual_axes) != set(axis_context.mesh.axis_names)
    return False


def _lowering(platform: str):
    whole = mlir.lower_fun(functools.partial(_ffi_call, platform=platform), multiple_results=True)
    split = mlir.lower_fun(functools.partial(_partitioned_call, platform=platform), multiple_results=True)

    def rule(ctx, *values, **params):
        outs = _out_avals(params["kernel"].kernel, params["launch_shape"], params["accum_rows"],
                          params["batch_shape"])
        if params["batch_shape"] and outs and _spans_devices(ctx):
            return split(ctx, *values, **params)
        return whole(ctx, *values, **params)

    return rule


# On a GPU backend the same primitive launches the PTX kernel on XLA's stream.
for _platform in lowering.BACKENDS:
    mlir.register_lowering(kernel_call_p, _lowering(_platform), platform=_platform)
# A custom_partitioning op is lowered for the computation's devices.
jax_dispatch.prim_requires_devices_during_lowering.add(kernel_call_p)


def _batch(args, dims, *, kernel, launch_shape, accum_rows, batch_shape, in_batch, num_threads, simd_lanes):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    new_args, new_flags = [], []
    for a, d, flags in zip(args, dims, in_batch):
        if d is None:
            new_args.append(a)
            new_flags.append((False,) + flags)
        else:
            new_args.append(jnp.moveaxis(a, d, 0))
            new_flags.append((True,) + flags)
    outs = kernel_call_p.bind(*new_args, kernel=kernel, launch_shape=launch_shape, accum_rows=accum_rows,
                              batch_shape=(size,) + batch_shape, in_batch=tuple(new_flags),
                              num_threads=num_threads, simd_lanes=simd_lanes)
    return outs, [0] * len(outs)


batching.primitive_batchers[kernel_call_p] = _batch
