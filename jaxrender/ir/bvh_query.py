"""A builtin query of an 8-wide bounding volume hierarchy.

The traversal of a wide BVH is a loop with a stack and SIMD box tests over
a node's eight children: one lane's control flow, not the packet's. Written
in the kernel language it would run in SIMD lockstep, where the lanes of a
packet wait for the slowest and every step pays for any lane's leaf. So the
query is one node whose lowering calls a traversal routine the code
generator emits per target (Dr.Jit hands its ray queries to Embree and
OptiX the same way): in a SIMD packet each active lane runs the routine
alone.

The layout of the two buffers (``jaxrender.scene.wide_bvh.WideBVH.packed``),
int32 with floats stored as their bits:

* ``nodes`` (W, 56): per node lo_x[8], lo_y[8], lo_z[8], hi_x[8], hi_y[8],
  hi_z[8] (floats; an empty slot has lo = +inf, hi = -inf), then the 8
  children: a child >= 0 is a node, ~child a leaf block.
* ``leaves`` (B, 40): per block of 4 triangles p0, e1 = p1 - p0, e2 = p2 - p0,
  each coordinate as 4 lanes (floats; a padding lane is all 0), then what a
  hit on each lane reports (-1: padding).

Instanced scenes keep one hierarchy per shapegroup, concatenated in one
pair of buffers; a query given ``group = (node start, node count, block
start, block count)`` traverses that sub-range only: its child and block
indices are relative to the range, every index is clamped to it (and the
range to the buffers), and the primitives it reports are the rows the
group's blocks hold (the caller adds the group's first row).

The query has no derivative: it answers which primitive is hit, and where
(t, b1, b2) only as values that the caller recomputes from differentiable
data when it needs derivatives.
"""
from __future__ import annotations

from .graph import BOOL, F32, I32, IRError
from .kernel import Buffer
from .values import Bool, Float, Int, as_var, current_block, wrap

OP = "bvh_query"
CLOSEST, ANY = 0, 1
# Entries of the traversal stack; the scene builder checks that its
# hierarchy never needs more.
STACK_SIZE = 128
NODE_WORDS, LEAF_WORDS = 56, 40     # i32 per row of the nodes and leaves buffers
RAY_ARGS, RANGE_ARGS = 11, 4        # float ray operands; int group-range operands (optional)
_LAYOUT = (("nodes", I32, NODE_WORDS), ("leaves", I32, LEAF_WORDS))


def _args(buffers, o, d, inv_d, t_min, t_max, group):
    if len(buffers) != len(_LAYOUT):
        raise IRError(f"{OP}: needs {len(_LAYOUT)} buffers ({', '.join(w for w, _, _ in _LAYOUT)})")
    for buf, (what, dtype, width) in zip(buffers, _LAYOUT):
        if not isinstance(buf, Buffer) or buf.spec.dtype != dtype or buf.width != width:
            raise IRError(f"{OP}: the {what} buffer must be an input of dtype {dtype} and {width} components a row")
    vals = [*o, *d, *inv_d, t_min, t_max]
    if len(vals) != 11:
        raise IRError(f"{OP}: origin, direction and inverse direction need 3 components each")
    args = tuple(as_var(v, F32).node for v in vals)
    if group is not None:
        if len(group) != 4:
            raise IRError(f"{OP}: a group range is (node start, node count, block start, block count)")
        args += tuple(as_var(v, I32).node for v in group)
    return args, tuple(b.index for b in buffers)


def closest_hit(buffers, o, d, inv_d, t_min, t_max, group=None) -> tuple[Float, Int, Float, Float]:
    """(t, prim, b1, b2) of the nearest triangle with t_min < t < t_max
    (Moller-Trumbore in the (p0, e1, e2) form); (t_max, -1, 0, 0) on a
    miss. Among hits at the same t the first in traversal order wins.
    ``inv_d`` is 1/d with no zero component; box tests use [0, t_max].
    ``group``: the sub-range to traverse (module docstring), else all."""
    args, bufs = _args(buffers, o, d, inv_d, t_min, t_max, group)
    blk = current_block()
    return tuple(wrap(blk.emit(OP, t, args, (CLOSEST, k, *bufs)))
                 for k, t in enumerate((F32, I32, F32, F32)))


def any_hit(buffers, o, d, inv_d, t_min, t_max, group=None) -> Bool:
    """Whether any triangle has t_min < t < t_max (stops at the first)."""
    args, bufs = _args(buffers, o, d, inv_d, t_min, t_max, group)
    return Bool(current_block().emit(OP, BOOL, args, (ANY, 0, *bufs)))
