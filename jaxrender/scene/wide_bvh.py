"""8-wide BVH with 4-wide triangle leaf blocks, collapsed from the binary
skip-link BVH of :mod:`jaxrender.scene.bvh`, for a native single-ray
traversal.

Layout (a fixed contract with the native traversal)
---------------------------------------------------
``bounds`` (W, 48) float32
    Node ``n``: ``lo_x[8], lo_y[8], lo_z[8], hi_x[8], hi_y[8], hi_z[8]``;
    slot ``k`` of each group belongs to child ``k``.
``children`` (W, 8) int32
    ``child >= 0``: a wide node; ``child < 0``: a leaf block ``~child``.
    Empty slots have ``lo = +inf, hi = -inf`` on all axes and ``child = -1``;
    the slab test never hits such a box, so its ``-1`` (which would read as
    block 0) is never followed.
``leaf_tris`` (B, 36) float32
    Block ``b``: ``p0x[4], p0y[4], p0z[4], e1x[4], e1y[4], e1z[4], e2x[4],
    e2y[4], e2z[4]`` with ``e1 = p1 - p0``, ``e2 = p2 - p0`` in float32.
    Padding lanes are all ``0.0`` (``det == 0``: never hit).
``leaf_prims`` (B, 4) int32
    Row of the leaf-order ``tris`` array for each lane, ``-1`` for padding.
``depth``
    Wide levels on the longest root-to-leaf path (1: the root has only
    leaves).
``stack_need``
    Stack entries that suffice for the kernels' traversal, which pushes every
    hit child of a node but the nearest, and for the numpy reference, which
    pushes only interior children; see :func:`exact_stack_need`.

Collapse
--------
The wide tree of least expected cost (SAH) that a binary BVH allows
(:func:`_optimal_slots`): every slot of a wide node holds a subtree of
the binary tree, as a leaf block (at most 4 triangles) or as a wide node
of its own, and the choice of which subtrees fill a node's up to 8 slots
is made by dynamic programming from the leaves up. Binary leaves stay
whole, so scenes build the binary tree with one triangle per leaf
(:func:`triangle_bvh`) and let the collapse choose the blocks, knowing
the slots a node has free: the Cornell box's walls, light and box faces
get blocks of their own under one node where a fixed rule (fill a node
with the largest subtrees, keep the binary build's leaves) mixed faces at
right angles. Slots keep the binary tree's left-to-right order (its child
order: smaller area first), filled slots first; every wide node but a
tiny tree's root (one block) has at least two. Wide nodes are numbered
level by level (root 0), so a child's index is always larger than its
parent's; blocks by their first row, so block ``b``'s lanes hold
consecutive rows and ``leaf_prims`` read row-major lists every row once,
in order.

All nodes of one binary level are costed together, and all wide nodes of
one level opened together, on arrays: the Python loops run once per level.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import bvh_query
from .bvh import BOX_PAD, BVH, build_bvh
from .errors import SceneError

__all__ = ["WIDTH", "LEAF_WIDTH", "WideBVH", "build_wide_bvh", "exact_stack_need", "leaf_order_tris"]

WIDTH = 8
LEAF_WIDTH = 4

_F = np.float32
_INF = _F(np.inf)


@dataclass
class WideBVH:
    """8-wide BVH with 4-wide triangle leaf blocks (see the module docstring).

    Example::

        >>> from jaxrender.scene import bvh
        >>> v, f = bvh.random_soup(100)
        >>> b = bvh.build_bvh(v, f)
        >>> w = build_wide_bvh(b, leaf_order_tris(b, v, f))
        >>> w.check(n_tris=100)
        >>> w.bounds.shape[1], w.children.shape[1], w.leaf_tris.shape[1]
        (48, 8, 36)
    """

    bounds: np.ndarray  # (W, 48) float32
    children: np.ndarray  # (W, 8) int32
    leaf_tris: np.ndarray  # (B, 36) float32
    leaf_prims: np.ndarray  # (B, 4) int32
    depth: int
    stack_need: int

    @property
    def num_nodes(self) -> int:
        return int(self.children.shape[0])

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """The two buffers the kernels read (``ir.bvh_query``): ``nodes``
        (W, 56) int32, each node's 48 bound floats (as bits) then its 8
        children; ``leaves`` (B, 40) int32, each block's 36 coordinate floats
        (as bits) then its 4 rows. A node or a block is then one run of
        memory: the traversal waits on cache misses, and a second array
        would cost one more. int32, so no copy of the float bits can touch
        them (child ids are NaN patterns as floats).

        Example::

            >>> from jaxrender.scene import bvh
            >>> v, f = bvh.random_soup(100)
            >>> b = bvh.build_bvh(v, f)
            >>> nodes, leaves = build_wide_bvh(b, leaf_order_tris(b, v, f)).packed()
            >>> nodes.shape[1], leaves.shape[1], nodes.dtype
            (56, 40, dtype('int32'))
        """
        nodes = np.concatenate([self.bounds.view(np.int32), self.children], axis=1)
        leaves = np.concatenate([self.leaf_tris.view(np.int32), self.leaf_prims], axis=1)
        return np.ascontiguousarray(nodes), np.ascontiguousarray(leaves)

    @property
    def num_blocks(self) -> int:
        return int(self.leaf_prims.shape[0])

    # -- invariants -------------------------------------------------------------

    def check(self, n_tris: int | None = None, tris: np.ndarray | None = None) -> None:
        """Raise ``ValueError`` naming the first broken invariant.

        Checks dtypes and shapes, that the wide nodes form a tree rooted at
        node 0 whose child indices are in range and larger than the parent's,
        that empty slots have the empty box and ``child == -1``, that every
        block is referenced exactly once, that ``leaf_prims`` list each row
        ``0..n-1`` exactly once (``n == n_tris`` when given) with ``-1``
        padding lanes whose coordinates are exactly 0, that boxes are finite
        and contain their subtrees, and ``depth``/``stack_need``.  With
        ``tris`` (N, 9) the blocks must also equal the packed rows.

        Example::

            >>> from jaxrender.scene import bvh
            >>> v, f = bvh.random_soup(50)
            >>> b = bvh.build_bvh(v, f)
            >>> w = build_wide_bvh(b, leaf_order_tris(b, v, f))
            >>> w.children[0, 0] = 10**6
            >>> try:
            ...     w.check()
            ... except ValueError as e:
            ...     print(str(e).split(" is ")[0])
            invalid WideBVH: children[0, 0] = 1000000
        """
        _check(self, n_tris, tris)

    # -- reference traversal ------------------------------------------------------

    def traverse_numpy(self, o: np.ndarray, d: np.ndarray, t_min: float | np.ndarray = 0.0,
                       t_max: float | np.ndarray = np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Closest hit of each ray: ``(t, row, b1, b2)``.

        ``o``, ``d``: (R, 3) or (3,); ``t_min``, ``t_max``: scalars or (R,).
        ``t`` float32 (``inf`` on a miss), ``row`` int32 row of the leaf-order
        ``tris`` (``-1`` on a miss), ``b1``, ``b2`` the barycentrics ``u, v``
        of the hit (0 on a miss).  One Python loop iteration per ray and node;
        the 8 box tests of a node and the 4 lanes of a block are vectorised.
        The stack is a fixed array of ``stack_need`` entries, so an
        insufficient ``stack_need`` raises instead of passing silently.

        Example::

            >>> from jaxrender.scene import bvh
            >>> v, f = bvh.grid_mesh(4, 4)
            >>> b = bvh.build_bvh(v, f)
            >>> w = build_wide_bvh(b, leaf_order_tris(b, v, f))
            >>> t, row, b1, b2 = w.traverse_numpy([0.3, 0.4, 1.0], [0.0, 0.0, -1.0])
            >>> bool(t[0] < 1.2), int(row[0]) >= 0
            (True, True)
        """
        o = np.asarray(o, _F).reshape(-1, 3)
        d = np.asarray(d, _F).reshape(-1, 3)
        R = o.shape[0]
        t_lo = np.broadcast_to(np.asarray(t_min, _F), (R,))
        t_hi = np.broadcast_to(np.asarray(t_max, _F), (R,))
        t_out = np.full(R, _INF, _F)
        row_out = np.full(R, -1, np.int32)
        b1_out = np.zeros(R, _F)
        b2_out = np.zeros(R, _F)
        if self.num_nodes == 0:
            return t_out, row_out, b1_out, b2_out
        lo = self.bounds[:, :24].reshape(-1, 3, WIDTH)
        hi = self.bounds[:, 24:].reshape(-1, 3, WIDTH)
        blk = self.leaf_tris.reshape(-1, 9, LEAF_WIDTH)
        stack = np.empty(max(self.stack_need, 0), np.int64)
        for r in range(R):
            res = _trace_one(o[r], d[r], t_lo[r], t_hi[r], lo, hi, self.children, blk, self.leaf_prims, stack)
            t_out[r], row_out[r], b1_out[r], b2_out[r] = res
        return t_out, row_out, b1_out, b2_out


def _slab(o, inv, lo, hi, t_min, t_best):
    """The binary BVH's conservative float32 slab test (see bvh.py) on the 8
    slots of one node: returns (hit mask, entry distance)."""
    with np.errstate(all="ignore"):
        a = (lo - o[:, None]) * inv[:, None]
        b = (hi - o[:, None]) * inv[:, None]
    sw = b < a  # NaN (0 * inf) compares false: no swap, and is then ignored below
    near = np.where(sw, b, a)
    far = np.where(sw, a, b)
    tn = np.full(WIDTH, -_INF, _F)
    tf = np.full(WIDTH, _INF, _F)
    for ax in range(3):
        tn = np.where(near[ax] > tn, near[ax], tn)
        tf = np.where(far[ax] < tf, far[ax], tf)
    lo_t = np.maximum(tn, t_min)
    hi_t = np.minimum(tf, t_best)
    with np.errstate(all="ignore"):
        return lo_t <= hi_t + np.abs(hi_t) * BOX_PAD, lo_t


def _intersect_block(o, d, q, t_min):
    """Moller-Trumbore in the (p0, e1, e2) form on the 4 lanes of a block
    (q: (9, 4)); returns (t, u, v) with t = inf where a lane misses."""
    p0, e1, e2 = q[0:3], q[3:6], q[6:9]
    with np.errstate(all="ignore"):
        pv = np.stack([d[1] * e2[2] - d[2] * e2[1], d[2] * e2[0] - d[0] * e2[2], d[0] * e2[1] - d[1] * e2[0]])
        det = e1[0] * pv[0] + e1[1] * pv[1] + e1[2] * pv[2]
        inv = _F(1) / det
        tv = o[:, None] - p0
        u = (tv[0] * pv[0] + tv[1] * pv[1] + tv[2] * pv[2]) * inv
        qv = np.stack([tv[1] * e1[2] - tv[2] * e1[1], tv[2] * e1[0] - tv[0] * e1[2], tv[0] * e1[1] - tv[1] * e1[0]])
        v = (d[0] * qv[0] + d[1] * qv[1] + d[2] * qv[2]) * inv
        t = (e2[0] * qv[0] + e2[1] * qv[1] + e2[2] * qv[2]) * inv
        ok = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > t_min)
    return np.where(ok, t, _INF), u, v


def _trace_one(o, d, t_min, t_max, lo, hi, children, blk, prims, stack):
    with np.errstate(all="ignore"):
        inv = _F(1) / (d + _F(0))  # + 0 turns -0 into +0, as in the binary traversal
    t_best, row, b1, b2 = t_max, -1, _F(0), _F(0)
    node, sp = 0, 0
    while True:
        hit, tn = _slab(o, inv, lo[node], hi[node], t_min, t_best)
        ch = children[node]
        for k in np.flatnonzero(hit & (ch < 0)):
            # Leaves are intersected in place (slot order), never pushed:
            # this is the convention stack_need is computed for.
            b = ~int(ch[k])
            t, u, v = _intersect_block(o, d, blk[b], t_min)
            j = int(np.argmin(t))
            if t[j] < t_best:
                t_best, row, b1, b2 = t[j], int(prims[b, j]), u[j], v[j]
        inner = np.flatnonzero(hit & (ch >= 0))
        if inner.size:
            # Push farthest first so the nearest child is popped next and its
            # hits prune the siblings' slots when those are tested later.
            inner = inner[np.argsort(-tn[inner], kind="stable")]
            if sp + inner.size > stack.size:
                raise RuntimeError(f"traversal stack overflow: stack_need = {stack.size} is too small")
            stack[sp:sp + inner.size] = ch[inner]
            sp += inner.size
        if sp == 0:
            break
        sp -= 1
        node = int(stack[sp])
    if row < 0:
        return _INF, -1, _F(0), _F(0)
    return t_best, row, b1, b2


# ---------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------

def leaf_order_tris(bvh: BVH, vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """The (N, 9) float32 ``p0, p1, p2`` rows in leaf order (row ``i`` is
    triangle ``bvh.prim_index[i]``), the ``tris`` input of :func:`build_wide_bvh`.

    Example::

        >>> from jaxrender.scene import bvh
        >>> v, f = bvh.random_soup(10)
        >>> leaf_order_tris(bvh.build_bvh(v, f), v, f).shape
        (10, 9)
    """
    v = np.asarray(vertices, _F)
    f = np.asarray(faces, np.int64)[np.asarray(bvh.prim_index, np.int64)]
    return np.ascontiguousarray(v[f].reshape(-1, 9))


def build_wide_bvh(bvh: BVH, tris: np.ndarray) -> WideBVH:
    """Collapse a binary :class:`~jaxrender.scene.bvh.BVH` into a :class:`WideBVH`.

    ``tris`` (N, 9) float32 holds ``p0, p1, p2`` per row in leaf order (see
    :func:`leaf_order_tris`).  Raises ``ValueError`` when a binary leaf has
    more than 4 primitives or the shapes do not match (a build with
    ``max_leaf_size=1``, :func:`triangle_bvh`'s, leaves the collapse every
    choice of blocks).

    Example::

        >>> from jaxrender.scene import bvh
        >>> v, f = bvh.sphere_mesh(20, 40)
        >>> b = bvh.build_bvh(v, f, max_leaf_size=1)
        >>> w = build_wide_bvh(b, leaf_order_tris(b, v, f))
        >>> w.check(n_tris=len(f)); w.depth <= b.depth()
        True
    """
    links = np.asarray(bvh.node_links)
    nb = np.asarray(bvh.node_bounds, _F)
    N = int(np.asarray(bvh.prim_index).shape[0])
    tris = np.asarray(tris)
    if tris.ndim != 2 or tris.shape[1] != 9:
        raise ValueError(f"tris must have shape (N, 9), got {tris.shape}")
    if tris.shape[0] != N:
        raise ValueError(f"tris has {tris.shape[0]} rows but the BVH has {N} primitives")
    M = links.shape[0]
    if nb.shape != (M, 6) or links.shape != (M, 3):
        raise ValueError(f"node_bounds {nb.shape} / node_links {links.shape} do not describe the same nodes")
    if M == 0:
        return WideBVH(np.zeros((0, 48), _F), np.zeros((0, WIDTH), np.int32), np.zeros((0, 36), _F),
                       np.zeros((0, LEAF_WIDTH), np.int32), 0, 0)
    tris = tris.astype(_F, copy=False)
    skip = links[:, 0].astype(np.int64)
    start = links[:, 1].astype(np.int64)
    count = links[:, 2].astype(np.int64)
    is_leaf = count > 0
    if count.max() > LEAF_WIDTH:
        i = int(np.argmax(count > LEAF_WIDTH))
        raise ValueError(f"binary leaf {i} has {int(count[i])} primitives, more than {LEAF_WIDTH} "
                         f"(build the BVH with max_leaf_size={LEAF_WIDTH})")

    # Children of every binary interior node (pre-order: first child i + 1,
    # second child after the first one's subtree); -1 for leaves.
    idx = np.arange(M, dtype=np.int64)
    left = np.where(is_leaf, -1, idx + 1)
    right = np.full(M, -1, np.int64)
    right[~is_leaf] = skip[idx[~is_leaf] + 1]
    lo64 = nb[:, :3].astype(np.float64)
    ext = np.maximum(nb[:, 3:].astype(np.float64) - lo64, 0.0)
    area = ext[:, 0] * ext[:, 1] + ext[:, 1] * ext[:, 2] + ext[:, 2] * ext[:, 0]   # half the surface area
    plan = _optimal_slots(left, right, is_leaf, count, area)
    # (a subtree's primitives are one run of rows, from its first leaf's)
    first_row = start.copy()
    for level in plan.levels[::-1]:
        inner = level[~is_leaf[level]]
        first_row[inner] = first_row[left[inner]]

    block_start, block_count = [], []
    level_bounds, level_children, level_blocks = [], [], []
    frontier = np.zeros(1, np.int64)  # binary node of each wide node of the level
    next_index, n_blocks, depth = 1, 0, 0
    while frontier.size:
        wide, node = _slots_of(frontier, plan, left, right)
        n = frontier.size
        per_wide = np.bincount(wide, minlength=n)
        slot = np.arange(wide.size) - np.repeat(np.cumsum(per_wide) - per_wide, per_wide)
        col = plan.at[node]
        block = plan.block[col]
        ch = np.full((n, WIDTH), -1, np.int64)
        n_inner = int((~block).sum())
        ch[wide[~block], slot[~block]] = next_index + np.arange(n_inner)  # row-major: level order numbering
        ch[wide[block], slot[block]] = ~(n_blocks + np.arange(int(block.sum())))
        block_start.append(first_row[node[block]])
        block_count.append(plan.prims[col[block]])
        n_blocks += int(block.sum())
        bb = np.empty((n, WIDTH, 6), _F)
        bb[:] = np.array([_INF, _INF, _INF, -_INF, -_INF, -_INF], _F)
        bb[wide, slot] = nb[node]
        level_bounds.append(bb.transpose(0, 2, 1).reshape(n, 48))
        level_children.append(ch)
        is_block = np.zeros((n, WIDTH), bool)
        is_block[wide[block], slot[block]] = True
        level_blocks.append(is_block)
        next_index += n_inner
        frontier = node[~block]
        depth += 1
    children = np.concatenate(level_children)
    # Blocks numbered by their first row: lanes list the rows in order, and
    # neighbouring blocks are neighbours in memory.
    block_start, block_count = np.concatenate(block_start), np.concatenate(block_count)
    order = np.argsort(block_start, kind="stable")
    renumber = np.empty_like(order)
    renumber[order] = np.arange(order.size)
    is_block = np.concatenate(level_blocks)
    children[is_block] = ~renumber[~children[is_block]]
    leaf_prims, leaf_tris = _pack_blocks(tris, block_start[order], block_count[order])
    bounds = np.ascontiguousarray(np.concatenate(level_bounds))
    children = children.astype(np.int32)
    return WideBVH(bounds, children, leaf_tris, leaf_prims, depth, exact_stack_need(children, bounds))


# The costs the collapse minimizes (relative to a wide node's test: its 8
# slab tests, the pushes): a leaf block's test, fixed plus per triangle,
# each times the probability a ray meets its box (SAH: the box's surface
# area). Measured (bench_primal's scenes, 128^2, 64 spp, in one process):
# against a block priced as its 4 lanes whatever they hold (1 and 0), the
# Cornell box 0.94x the time, the 1M-triangle sphere and the envmap scene
# the same; a wide node dearer or cheaper (0.35 and 0.17, 0.7 and 0.35)
# built the same Cornell box, and the sphere within the noise.
BLOCK_COST = 0.5
BLOCK_TRIANGLE_COST = 0.25


@dataclass
class _SlotPlan:
    """The cheapest collapse of a binary BVH (see :func:`_optimal_slots`).
    Per node, at column ``at[n]`` of binary node ``n`` (the nodes in level
    order):"""
    levels: list           # binary node ids by depth (root first)
    at: np.ndarray         # (M,) each binary node's column
    prims: np.ndarray      # (M,) primitives under each node
    block: np.ndarray      # (M,) the node, as one slot, is a leaf block (else a wide node)
    used: np.ndarray       # (9, M) [i]: slots the cheapest cover of the node in at most i slots takes
    split: np.ndarray      # (9, M) [i]: of which its first child's cover takes (where used > 1)


def _optimal_slots(left, right, is_leaf, count, area) -> _SlotPlan:
    """The collapse of least expected cost (SAH; Ylitie, Karras and Laine,
    "Efficient incoherent ray traversal on GPUs through compressed wide
    BVHs", 2017, section 4.1), by dynamic programming from the leaves up:
    ``cost[n, i]``, the least cost of binary node n's subtree as at most i
    slots of its wide parent, is either its cost as one slot (the cheaper
    of a leaf block, where it has at most 4 triangles, and a wide node:
    its own test plus its children's subtrees in 8 slots) or the best
    division of i slots between its two children. Binary leaves stay whole
    (so a binary BVH built with one triangle per leaf gives the collapse
    every choice)."""
    M = left.size
    # Level d + 1 lists the first children of level d's interior nodes, then
    # their second children: a level's children are two runs of the next.
    levels, frontier = [], np.zeros(1, np.int64)
    while frontier.size:
        levels.append(frontier)
        inner = frontier[~is_leaf[frontier]]
        frontier = np.concatenate([left[inner], right[inner]])
    # (per level, deepest first; slot counts first: each count's column of a
    # level is one run of memory)
    used, split, block, prims = [], [], [], []
    below = below_prims = None        # the next level's costs (WIDTH + 1, n) and primitives
    for nodes in levels[::-1]:
        interior = ~is_leaf[nodes]
        inner = nodes[interior]
        n_in = inner.size
        here_prims = count[nodes].copy()
        if n_in:
            cost_a, cost_b = below[:, :n_in], below[:, n_in:]
            leaf_a, leaf_b = is_leaf[left[inner]], is_leaf[right[inner]]
            here_prims[interior] = below_prims[:n_in] + below_prims[n_in:]
        # divided[j]: the children's subtrees in j slots together, the
        # first child's taking first[j]. A leaf's cost is the same in any
        # number of slots, so beside one the other child takes all but one
        # (its cost never rises with more); only where both children are
        # interior are the divisions compared.
        divided = np.empty((WIDTH + 1, n_in))
        first = np.zeros((WIDTH + 1, n_in), np.int8)
        first_here = np.zeros((WIDTH + 1, nodes.size), np.int8)
        if n_in:
            both = np.flatnonzero(~leaf_a & ~leaf_b)
            ca, cb = cost_a[:, both], cost_b[:, both]
            for j in range(2, WIDTH + 1):
                first[j] = np.where(leaf_a, 1, j - 1)
                divided[j] = np.where(leaf_a, cost_a[1] + cost_b[j - 1], cost_a[j - 1] + cost_b[1])
                best, at = ca[1] + cb[j - 1], np.ones(both.size, np.int8)
                for k in range(2, j):
                    c = ca[k] + cb[j - k]
                    better = c < best
                    best = np.where(better, c, best)
                    at[better] = k
                divided[j, both], first[j, both] = best, at
        area_here = area[nodes]
        as_block = np.where(here_prims <= LEAF_WIDTH, (BLOCK_COST + BLOCK_TRIANGLE_COST * here_prims) * area_here,
                            np.inf)
        as_node = np.full(nodes.size, np.inf)
        as_node[interior] = area_here[interior] + divided[WIDTH]
        here = np.empty((WIDTH + 1, nodes.size))
        take = np.ones((WIDTH + 1, nodes.size), np.int8)
        here[1] = np.minimum(as_block, as_node)
        opened = np.full((WIDTH + 1, nodes.size), np.inf)
        opened[:, interior] = divided
        for i in range(2, WIDTH + 1):
            # (ties open: more slots filled, a shallower tree, where boxes have no area)
            better = opened[i] <= here[i - 1]
            here[i] = np.where(better, opened[i], here[i - 1])
            take[i] = np.where(better, i, take[i - 1])
        first_here[:, interior] = first
        used.append(take)
        split.append(first_here)
        block.append(as_block <= as_node)
        prims.append(here_prims)
        below, below_prims = here, here_prims
    # The root's wide node holds it as a block only in a tree of at most 4
    # triangles, at the cost of its own test as well.
    block[-1][0] = as_block[0] + area[0] <= as_node[0]
    at = np.empty(M, np.int64)
    at[np.concatenate(levels)] = np.arange(M)
    return _SlotPlan(levels, at, np.concatenate(prims[::-1]), np.concatenate(block[::-1]),
                     np.concatenate(used[::-1], axis=1), np.concatenate(split[::-1], axis=1))


def _slots_of(wide_nodes, plan: _SlotPlan, left, right):
    """(wide node of each slot, binary node in it), in slot order: the
    binary subtrees of ``wide_nodes`` divided as ``plan`` chose, each wide
    node's slots in the binary tree's left-to-right order. A wide node
    that is itself a leaf block (the root of a tiny tree) is its own only
    slot."""
    own = plan.block[plan.at[wide_nodes]]
    rows = np.flatnonzero(~own)
    k = plan.split[WIDTH, plan.at[wide_nodes[rows]]].astype(np.int64)
    wide = np.concatenate([np.flatnonzero(own), np.repeat(rows, 2)])
    node = np.concatenate([wide_nodes[own], np.stack([left[wide_nodes[rows]], right[wide_nodes[rows]]], 1).ravel()])
    slots = np.concatenate([np.ones(int(own.sum()), np.int64), np.stack([k, WIDTH - k], 1).ravel()])
    order = np.argsort(wide, kind="stable")
    wide, node, slots = wide[order], node[order], slots[order]
    while True:
        col = plan.at[node]
        take = plan.used[slots, col].astype(np.int64)
        opens = take > 1
        if not opens.any():
            return wide, node
        k = plan.split[take, col].astype(np.int64)
        reps = np.where(opens, 2, 1)
        pos = np.repeat(np.arange(node.size), reps)
        second = np.zeros(pos.size, bool)
        second[np.cumsum(reps)[opens] - 1] = True
        first = ~second
        o = opens[pos]
        new_node = np.where(o & first, left[node[pos]], np.where(o, right[node[pos]], node[pos]))
        new_slots = np.where(o & first, k[pos], np.where(o, take[pos] - k[pos], 1))
        wide, node, slots = wide[pos], new_node, new_slots


def _pack_blocks(tris, start, count):
    """(B, 4) rows and (B, 36) lane-packed (p0, e1, e2) of the leaf blocks."""
    B = start.size
    lane = np.arange(LEAF_WIDTH)
    valid = lane < count[:, None]
    prims = np.where(valid, start[:, None] + lane, -1)
    t = tris[np.maximum(prims, 0)].reshape(B, LEAF_WIDTH, 3, 3)  # (block, lane, vertex, axis)
    q = np.empty((B, 3, 3, LEAF_WIDTH), _F)  # (block, p0/e1/e2, axis, lane)
    q[:, 0] = t[:, :, 0].transpose(0, 2, 1)
    q[:, 1] = (t[:, :, 1] - t[:, :, 0]).transpose(0, 2, 1)
    q[:, 2] = (t[:, :, 2] - t[:, :, 0]).transpose(0, 2, 1)
    # Padding lanes are exact +0.0 (det == 0) rather than copies of a real
    # triangle, so they can never report a hit; np.where, not a multiply,
    # which would leave -0.0 where a copied coordinate was negative.
    q = np.where(valid[:, None, None, :], q, _F(0))
    return prims.astype(np.int32), q.reshape(B, 36)


def exact_stack_need(children: np.ndarray, bounds: np.ndarray) -> int:
    """Stack entries needed by the kernels' traversal (``ir.bvh_query``),
    which at a node pushes every hit child, leaf or interior, except the
    nearest, which it visits next: ``1 + max`` over interior nodes ``n`` of
    ``sum over a on the path root..n of (children of a - 1)``, the worst case
    where every box is hit.  The ``1`` is the root's entry in the numpy
    reference traversal, which starts with the root on its stack.  Never
    more than ``depth * 7 + 1``; 0 for an empty tree.  ``children`` must be
    in level order (children after parents; checked by :meth:`WideBVH.check`);
    a slot is a child where its box is not empty (``bounds``: lo <= hi).

    Example::

        >>> box = np.r_[np.zeros(24), np.ones(24)].reshape(6, 8)
        >>> box[:3, 2:], box[3:, 2:] = np.inf, -np.inf   # slots 0 and 1 used
        >>> bounds = np.tile(box.reshape(1, 48), (2, 1))
        >>> children = np.array([[1, ~0] + [-1] * 6, [~1, ~2] + [-1] * 6])
        >>> exact_stack_need(children, bounds)   # 1 push at the root, 1 at node 1, + 1
        3
    """
    children = np.asarray(children)
    W = children.shape[0]
    if W == 0:
        return 0
    bounds = np.asarray(bounds)
    used = bounds[:, 0:WIDTH] <= bounds[:, 3 * WIDTH:4 * WIDTH]
    is_inner = (children >= 0) & used
    n_inner = is_inner.sum(axis=1)
    n_used = used.sum(axis=1)
    # The pushes on the path down to each node, one level at a time.
    pend = np.zeros(1, np.int64)
    nodes = np.zeros(1, np.int64)
    best = 0
    while nodes.size:
        here = pend + np.maximum(n_used[nodes] - 1, 0)
        best = max(best, int(here.max()))
        m = is_inner[nodes]
        pend = np.repeat(here, n_inner[nodes])
        nodes = children[nodes][m].astype(np.int64)
    return best + 1


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------

def _fail(msg: str) -> None:
    raise ValueError(f"invalid WideBVH: {msg}")


def _check(w: WideBVH, n_tris, tris) -> None:
    for name, arr, cols, dt in (("bounds", w.bounds, 48, np.float32), ("children", w.children, WIDTH, np.int32),
                                ("leaf_tris", w.leaf_tris, 36, np.float32),
                                ("leaf_prims", w.leaf_prims, LEAF_WIDTH, np.int32)):
        if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.shape[1] != cols or arr.dtype != dt:
            _fail(f"{name} must be a (n, {cols}) {np.dtype(dt).name} array, got "
                  f"{getattr(arr, 'shape', None)} {getattr(arr, 'dtype', type(arr).__name__)}")
        if not arr.flags.c_contiguous:
            _fail(f"{name} must be C-contiguous (the native traversal reads raw pointers)")
    W, B = w.children.shape[0], w.leaf_prims.shape[0]
    if w.bounds.shape[0] != W:
        _fail(f"bounds has {w.bounds.shape[0]} rows, children {W}")
    if w.leaf_tris.shape[0] != B:
        _fail(f"leaf_tris has {w.leaf_tris.shape[0]} rows, leaf_prims {B}")
    if W == 0:
        if B or w.depth != 0 or w.stack_need != 0:
            _fail(f"an empty tree needs B = 0, depth = 0, stack_need = 0; got {B}, {w.depth}, {w.stack_need}")
        if n_tris not in (None, 0):
            _fail(f"an empty tree holds no triangles, n_tris = {n_tris}")
        return

    ch = w.children.astype(np.int64)
    lo = w.bounds[:, :24].reshape(W, 3, WIDTH)
    hi = w.bounds[:, 24:].reshape(W, 3, WIDTH)
    empty = np.all(lo == np.inf, axis=1) & np.all(hi == -np.inf, axis=1)  # (W, 8)
    bad = empty & (ch != -1)
    if bad.any():
        n, k = np.argwhere(bad)[0]
        _fail(f"empty slot children[{n}, {k}] = {ch[n, k]}, expected -1")
    used = ~empty
    if not used.any(axis=1).all():
        _fail(f"wide node {int(np.argmin(used.any(axis=1)))} has no children")
    fin = np.isfinite(lo) & np.isfinite(hi)
    bad = used & ~fin.all(axis=1)
    if bad.any():
        n, k = np.argwhere(bad)[0]
        _fail(f"box of children[{n}, {k}] is partly empty or not finite: lo {lo[n, :, k]}, hi {hi[n, :, k]}")
    bad = used & (lo > hi).any(axis=1)
    if bad.any():
        n, k = np.argwhere(bad)[0]
        _fail(f"box of children[{n}, {k}] has lo > hi: lo {lo[n, :, k]}, hi {hi[n, :, k]}")

    parent_row = np.broadcast_to(np.arange(W)[:, None], ch.shape)
    node_ref = used & (ch >= 0)
    bad = node_ref & ((ch >= W) | (ch <= parent_row))
    if bad.any():
        n, k = np.argwhere(bad)[0]
        what = f"is not a wide node index (W = {W})" if ch[n, k] >= W else "does not come after its parent"
        _fail(f"children[{n}, {k}] = {ch[n, k]} {what}")
    refs = np.bincount(ch[node_ref], minlength=W)
    if refs[0] != 0 or np.any(refs[1:] != 1):
        i = int(np.flatnonzero(refs != np.r_[0, np.ones(W - 1, np.int64)])[0])
        _fail(f"wide node {i} is referenced {int(refs[i])} times, expected {0 if i == 0 else 1}")
    blk_ref = used & (ch < 0)
    blocks = ~ch[blk_ref]
    if np.any(blocks >= B):
        n, k = np.argwhere(blk_ref & (~ch >= B))[0]
        _fail(f"children[{n}, {k}] = {ch[n, k]} names block {~ch[n, k]}, but B = {B}")
    brefs = np.bincount(blocks, minlength=B)
    if np.any(brefs != 1):
        b = int(np.flatnonzero(brefs != 1)[0])
        _fail(f"leaf block {b} is referenced {int(brefs[b])} times, expected once")

    # Leaf blocks.
    lp = w.leaf_prims.astype(np.int64)
    valid = lp >= 0
    if np.any(lp < -1):
        b, j = np.argwhere(lp < -1)[0]
        _fail(f"leaf_prims[{b}, {j}] = {lp[b, j]}: rows are >= 0, padding is -1")
    if not valid.any(axis=1).all():
        _fail(f"leaf block {int(np.argmin(valid.any(axis=1)))} has no triangle")
    q = w.leaf_tris.reshape(B, 9, LEAF_WIDTH)
    bad = ~valid & np.any(q.view(np.uint32) != 0, axis=1)  # bitwise: -0.0 is not the padding value
    if bad.any():
        b, j = np.argwhere(bad)[0]
        _fail(f"padding lane {j} of block {b} is not all +0.0: {q[b, :, j]}")
    bad = valid & ~np.isfinite(q).all(axis=1)
    if bad.any():
        b, j = np.argwhere(bad)[0]
        _fail(f"lane {j} of block {b} is not finite: {q[b, :, j]}")
    rows = lp[valid]
    n_rows = rows.size
    if n_tris is not None and n_rows != n_tris:
        _fail(f"leaf_prims list {n_rows} triangles, expected n_tris = {n_tris}")
    if np.any(rows >= n_rows):
        b, j = np.argwhere(lp >= n_rows)[0]
        _fail(f"leaf_prims[{b}, {j}] = {lp[b, j]} is out of range (N = {n_rows})")
    rc = np.bincount(rows, minlength=n_rows)
    if np.any(rc != 1):
        r = int(np.flatnonzero(rc != 1)[0])
        _fail(f"row {r} appears {int(rc[r])} times in leaf_prims, expected once")
    if tris is not None:
        tris = np.asarray(tris, np.float32)
        if tris.shape != (n_rows, 9):
            _fail(f"tris has shape {tris.shape}, expected ({n_rows}, 9)")
        t = tris[np.maximum(lp, 0)].reshape(B, LEAF_WIDTH, 3, 3)
        want = np.stack([t[:, :, 0], t[:, :, 1] - t[:, :, 0], t[:, :, 2] - t[:, :, 0]], 1)  # (B, 3, 4, 3)
        want = want.transpose(0, 1, 3, 2).reshape(B, 9, LEAF_WIDTH) * valid[:, None, :]
        if not np.array_equal(want, q):
            b = int(np.flatnonzero(np.any(want != q, axis=(1, 2)))[0])
            _fail(f"leaf block {b} does not hold the rows {lp[b].tolist()} of tris")

    # Containment: wide child box >= union of its slots' boxes; leaf box >= its
    # triangles' vertices.  p0 + e1 is rebuilt in float64 from the rounded
    # float32 edge, which can be off the original vertex by |e| * 2^-24, hence
    # that slack on the reconstructed vertices (p0 itself is exact).
    pn, pk = np.nonzero(node_ref)
    c = ch[pn, pk]
    cu = used[c]  # (m, 8)
    clo = np.where(cu[:, None, :], lo[c], np.inf).min(axis=2)
    chi = np.where(cu[:, None, :], hi[c], -np.inf).max(axis=2)
    bad = np.any(lo[pn, :, pk] > clo, axis=1) | np.any(hi[pn, :, pk] < chi, axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        _fail(f"box of children[{pn[i]}, {pk[i]}] does not contain wide node {c[i]}'s children")
    ln, lk = np.nonzero(blk_ref)
    b = ~ch[ln, lk]
    qq = q[b].astype(np.float64)  # (m, 9, 4)
    p0, e1, e2 = qq[:, 0:3], qq[:, 3:6], qq[:, 6:9]
    vl = valid[b][:, None, :]
    blo, bhi = lo[ln, :, lk][:, :, None], hi[ln, :, lk][:, :, None]
    out = np.zeros((b.size, LEAF_WIDTH), bool)
    for p, slack in ((p0, 0.0), (p0 + e1, np.abs(e1) * 2.0 ** -23), (p0 + e2, np.abs(e2) * 2.0 ** -23)):
        out |= np.any(vl & ((p < blo - slack) | (p > bhi + slack)), axis=1)
    if out.any():
        i, j = np.argwhere(out)[0]
        _fail(f"box of children[{ln[i]}, {lk[i]}] does not contain lane {j} of block {b[i]}")

    # depth and stack_need, one level at a time (children > parent: terminates).
    depth = 0
    nodes = np.zeros(1, np.int64)
    while nodes.size:
        depth += 1
        nodes = ch[nodes][node_ref[nodes]]
    if w.depth != depth:
        _fail(f"depth = {w.depth}, the tree has {depth} levels")
    need = exact_stack_need(w.children, w.bounds)
    if not need <= w.stack_need:
        _fail(f"stack_need = {w.stack_need} < {need} needed")


def triangle_bvh(tris: np.ndarray):
    """The binary BVH over the triangle rows ``tris`` (N, 9) that a wide one
    is collapsed from: one triangle per leaf, so that the collapse chooses
    the leaf blocks (:func:`_optimal_slots`) as well as the wide nodes."""
    verts = tris.reshape(-1, 3).astype(np.float32)
    return build_bvh(verts, np.arange(len(verts), dtype=np.int32).reshape(-1, 3), max_leaf_size=1)


def kernel_buffers(bvh: BVH, tris: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (nodes, leaves) buffers of the 8-wide BVH the kernels query
    (ir.bvh_query) for the leaf-order triangles ``tris``, checked here
    because the traversal routine reads its indices through raw pointers."""
    wide = build_wide_bvh(bvh, tris)
    wide.check()
    stack = bvh_query.STACK_SIZE      # read at each call: tests shrink it to reach this error
    if wide.stack_need > stack:
        raise SceneError(f"the scene's BVH needs a traversal stack of {wide.stack_need} entries, more than "
                         f"the {stack} the kernels have: the geometry is too degenerate to build a usable BVH")
    return wide.packed()
