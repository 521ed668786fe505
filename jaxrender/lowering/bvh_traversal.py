"""The traversal routine behind the IR's ``bvh_query`` node (see
:mod:`jaxrender.ir.bvh_query` for the buffer layout).

One ray, one call: a stack of (node, entry distance), slab tests of a node's
eight child boxes at once (``<8 x float>``), the nearest hit child visited
next and the others pushed, four triangles of a leaf block tested at once
(``<4 x float>``). Only target-independent LLVM IR is used, so the same
routine serves the CPU (where the vectors are SSE/AVX registers) and NVPTX
(where they are split into scalars).

Generated code runs on raw pointers, so every index read from the buffers is
clamped to its buffer (a wrong hierarchy gives wrong hits, never a wild
read), a push onto a full stack is dropped, and a query gives up after as
many visits as there are nodes and blocks (a cycle cannot hang it). The
scene builder checks the hierarchy (child indices, acyclic, stack depth)
before any launch.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..ir.bvh_query import ANY, CLOSEST, LEAF_WORDS, NODE_WORDS, RANGE_ARGS, RAY_ARGS, STACK_SIZE

f32, i32, i64, i1, i8 = ll.FloatType(), ll.IntType(32), ll.IntType(64), ll.IntType(1), ll.IntType(8)
ptr = ll.PointerType()
V8, V4 = ll.VectorType(f32, 8), ll.VectorType(f32, 4)
HIT_TYPE = ll.LiteralStructType([f32, i32, f32, f32])
# Far slab distances are scaled up by 2 ulp-ish so that rounding in the
# slab arithmetic never culls a box the ray touches.
FAR_PAD = 1.0000004
NAMES = {CLOSEST: "jaxrender_bvh_closest", ANY: "jaxrender_bvh_any"}


def routine(module: ll.Module, mode: int, gpu: bool = False) -> ll.Function:
    """The traversal function of ``mode`` (CLOSEST or ANY) in ``module``,
    emitted on first use. Arguments: nodes and leaves pointers, node and
    block counts (i64), then ox, oy, oz, dx, dy, dz, inv_dx, inv_dy, inv_dz,
    t_min, t_max. CLOSEST returns
    {t, prim, b1, b2}; ANY returns i1. For the GPU it is inlined into every
    caller and issues no prefetches: ptxas compiles a call from divergent
    code into a kernel whose warps can split for good, and the sample loop's
    counter, which ptxas keeps in a per-warp (uniform) register, then counts
    each half's iterations: on an H100 a warp's count stepped over ``spp``
    and the launch never ended (256x256 Cornell box, 32 spp, one seed in
    three)."""
    name = NAMES[mode]
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    ret = HIT_TYPE if mode == CLOSEST else i1
    fn = ll.Function(module, ll.FunctionType(ret, [ptr] * 2 + [i64, i64] + [f32] * 11), name)
    fn.linkage = "internal"
    if gpu:
        fn.attributes.add("alwaysinline")
    _Traversal(fn, mode, cpu=not gpu).emit()
    return fn


def group_range(b: ll.IRBuilder, rows, start, count):
    """(start, count) as i64 of a query's group range (i32 operands) clamped
    to a buffer of ``rows`` rows (i64): a start outside it gives an empty
    range, a count past its end stops there, so the routine's own clamps
    keep every read inside both the group and the buffer."""
    s = b.zext(start, i64)   # (a negative start is a huge unsigned one: empty)
    inside = b.icmp_unsigned("<", s, rows)
    s = b.select(inside, s, i64(0))
    room = b.sub(rows, s)
    c = b.zext(b.select(b.icmp_signed("<", count, i32(0)), i32(0), count), i64)
    c = b.select(b.icmp_unsigned("<", c, room), c, room)
    return s, b.select(inside, c, i64(0))


def ranged_call(b: ll.IRBuilder, fn: ll.Function, bases: list, rows: list, ranges: list, ray: list):
    """Call the traversal routine ``fn`` on the group sub-range ``ranges``
    (node start, node count, block start, block count; i32) of the buffers
    at ``bases`` with ``rows`` rows each."""
    n_start, n_count = group_range(b, rows[0], ranges[0], ranges[1])
    b_start, b_count = group_range(b, rows[1], ranges[2], ranges[3])
    sub = [b.gep(base, [b.mul(start, i64(words))], inbounds=True, source_etype=i32)
           for base, start, words in zip(bases, (n_start, b_start), (NODE_WORDS, LEAF_WORDS))]
    return b.call(fn, sub + [n_count, b_count] + ray)


def packet_routine(module: ll.Module, mode: int, lanes: int, declare_only: bool = False,
                   ranged: bool = False) -> ll.Function:
    """A query for each set bit of a packet's mask (CPU): arguments are the
    two buffer pointers, node and block counts, then pointers to the lanes'
    buffer offsets (2 x lanes i32, in elements), rays (11 x lanes f32, the
    scalar routine's float arguments, argument-major), the mask bits, and
    the results (4 x lanes 32-bit words: t, prim, b1, b2; ANY: lanes i32).
    ``ranged``: one more pointer, to the lanes' group ranges (4 x lanes
    i32, ``ir.bvh_query``), each lane traversing its own sub-range.
    ``declare_only``: just its declaration, for a kernel linked with
    :func:`shared_module`'s object code."""
    name = f"{NAMES[mode]}{'_ranged' if ranged else ''}_x{lanes}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    ftype = ll.FunctionType(ll.VoidType(), [ptr] * 2 + [i64, i64, ptr, ptr, i32, ptr] + [ptr] * ranged)
    if declare_only:
        return _declared_effects(ll.Function(module, ftype, name))
    one = routine(module, mode)
    fn = _declared_effects(ll.Function(module, ftype, name))
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    bufs = fn.args[:2]
    n_nodes, n_blocks, offs, rays, bits, out = fn.args[2:8]
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    loop, done = fn.append_basic_block("lane"), fn.append_basic_block("done")
    entry = b.block
    b.cbranch(b.icmp_unsigned("==", bits, i32(0)), done, loop)
    b.position_at_end(loop)
    m = b.phi(i32)
    m.add_incoming(bits, entry)
    lane = b.zext(b.call(_cttz(module), [m, ll.Constant(i1, 1)]), i64)

    def at(base, j, et):
        return b.gep(base, [b.add(i64(j * lanes), lane)], inbounds=True, source_etype=et)

    bases = [b.gep(buf, [b.sext(b.load(at(offs, j, i32), typ=i32), i64)], inbounds=True, source_etype=i32)
             for j, buf in enumerate(bufs)]
    ray = [b.load(at(rays, j, f32), typ=f32) for j in range(RAY_ARGS)]
    if ranged:
        r = ranged_call(b, one, bases, [n_nodes, n_blocks],
                        [b.load(at(fn.args[8], j, i32), typ=i32) for j in range(RANGE_ARGS)], ray)
    else:
        r = b.call(one, bases + [n_nodes, n_blocks] + ray)
    if mode == CLOSEST:
        for k in range(4):
            v = b.extract_value(r, k)
            b.store(v, at(out, k, v.type))
    else:
        b.store(b.zext(r, i32), at(out, 0, i32))
    rest = b.and_(m, b.sub(m, i32(1)))
    m.add_incoming(rest, b.block)
    b.cbranch(b.icmp_unsigned("==", rest, i32(0)), done, loop)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _declared_effects(fn: ll.Function) -> ll.Function:
    """What LLVM infers from a packet routine's body (reads its buffers,
    offsets and rays, writes its results, keeps no pointer, never unwinds,
    frees or synchronises), written on its declaration too: a kernel that
    only declares it (see :func:`shared_module`) then optimises around its
    calls as one that sees the body. Without this the PRB adjoint ran 5-8%
    slower. Callers use its calling convention, ``fastcc``."""
    fn.calling_convention = "fastcc"
    nodes, leaves, _, _, offs, rays, _, out = fn.args[:8]
    # set.update: valid LLVM attributes that llvmlite's lists lack.
    for a in (nodes, leaves, offs, rays, *fn.args[8:]):     # (a ranged one's ranges)
        set.update(a.attributes, ("readonly", "captures(none)"))
    set.update(out.attributes, ("writeonly", "captures(none)"))
    set.update(fn.attributes, ("nounwind", "norecurse", "nofree", "nosync"))
    return fn


def shared_module(lanes: int, triple: str) -> ll.Module:
    """The packet routines for ``lanes`` (both modes, whole and ranged), exported: compiled once per
    target (and disk-cached) and linked with every CPU kernel that queries
    the BVH, instead of being compiled again inside each kernel (they are
    called, never inlined, so the kernels lose nothing)."""
    m = ll.Module(name=f"jaxrender.bvh_x{lanes}")
    m.triple = triple
    for mode in (CLOSEST, ANY):
        for ranged in (False, True):
            packet_routine(m, mode, lanes, ranged=ranged).linkage = ""  # external
        # Each traversal is called by a whole and a ranged packet routine: left
        # to itself LLVM stopped inlining it into both (a call per lane and
        # query made the Cornell box's primal 3% slower).
        routine(m, mode).attributes.add("alwaysinline")
    return m


def _intrinsic(module: ll.Module, name: str, ret: ll.Type, args: list) -> ll.Function:
    """The declaration of LLVM intrinsic ``name`` in ``module``."""
    return module.globals.get(name) or ll.Function(module, ll.FunctionType(ret, args), name)


def _cttz(module: ll.Module) -> ll.Function:
    return _intrinsic(module, "llvm.cttz.i32", i32, [i32, i1])


def _splat(b: ll.IRBuilder, v, n: int):
    vt = ll.VectorType(v.type, n)
    one = b.insert_element(ll.Constant(vt, ll.Undefined), v, i32(0))
    return b.shuffle_vector(one, ll.Constant(vt, ll.Undefined), ll.Constant(ll.VectorType(i32, n), [0] * n))


def _fmax(b, x, y):
    return b.select(b.fcmp_ordered(">", x, y), x, y)


def _fmin(b, x, y):
    return b.select(b.fcmp_ordered("<", x, y), x, y)


class _Traversal:
    def __init__(self, fn: ll.Function, mode: int, cpu: bool):
        self.fn = fn
        self.mode = mode
        self.cpu = cpu

    def block(self, name: str) -> ll.Block:
        return self.fn.append_basic_block(name)

    def emit(self) -> None:
        fn, closest = self.fn, self.mode == CLOSEST
        nodes, leaves, n_nodes, n_blocks = fn.args[:4]
        ox, oy, oz, dx, dy, dz, ix, iy, iz, t_min, t_max = fn.args[4:]
        b = ll.IRBuilder(self.block("entry"))
        self.b = b
        # Mutable state lives in allocas; SROA / mem2reg make it SSA.
        stack_node = b.alloca(i32, size=i32(STACK_SIZE), name="stack_node")
        stack_dist = b.alloca(f32, size=i32(STACK_SIZE), name="stack_dist")
        cur_a = b.alloca(i32, name="cur")
        sp_a = b.alloca(i32, name="sp")
        best_t = b.alloca(f32, name="best_t")
        best_p = b.alloca(i32, name="best_prim")
        best_u = b.alloca(f32, name="best_u")
        best_v = b.alloca(f32, name="best_v")
        steps_a = b.alloca(i64, name="steps")
        near_a = b.alloca(V8, name="t_near") if self.cpu else None     # (visit_children)
        b.store(i64(0), steps_a)
        for a, v in ((cur_a, i32(0)), (sp_a, i32(0)), (best_t, t_max), (best_p, i32(-1)),
                     (best_u, f32(0.0)), (best_v, f32(0.0))):
            b.store(v, a)
        last_node = b.sub(n_nodes, i64(1))
        last_block = b.sub(n_blocks, i64(1))
        # Slab planes by direction sign: the near plane of axis x is lo_x
        # (row offset 0) for inv_dx >= 0 and hi_x (offset 24) otherwise, so
        # an empty slot (lo = +inf, hi = -inf) gives near > far and misses.
        offs = []
        for axis, inv in enumerate((ix, iy, iz)):
            pos = b.fcmp_ordered(">=", inv, f32(0.0))
            offs.append((b.select(pos, i64(8 * axis), i64(24 + 8 * axis)),
                         b.select(pos, i64(24 + 8 * axis), i64(8 * axis))))
        o8 = [_splat(b, v, 8) for v in (ox, oy, oz)]
        inv8 = [_splat(b, v, 8) for v in (ix, iy, iz)]
        o4 = [_splat(b, v, 4) for v in (ox, oy, oz)]
        d4 = [_splat(b, v, 4) for v in (dx, dy, dz)]
        zero8 = ll.Constant(V8, [f32(0.0)] * 8)
        pad8 = ll.Constant(V8, [f32(FAR_PAD)] * 8)

        loop = self.block("visit")
        node_bb, leaf_bb = self.block("node"), self.block("leaf")
        kids_bb, pop_bb, done_bb = self.block("children"), self.block("pop"), self.block("done")
        b.cbranch(b.icmp_unsigned("==", n_nodes, i64(0)), done_bb, loop)

        b.position_at_end(loop)
        # A tree visits each node and block at most once; a corrupt buffer
        # with a cycle must end too.
        steps = b.add(b.load(steps_a, typ=i64), i64(1))
        b.store(steps, steps_a)
        visit_bb = self.block("visit.go")
        b.cbranch(b.icmp_unsigned(">", steps, b.add(n_nodes, n_blocks)), done_bb, visit_bb)
        b.position_at_end(visit_bb)
        cur = b.load(cur_a, typ=i32)
        b.cbranch(b.icmp_signed(">=", cur, i32(0)), node_bb, leaf_bb)

        # -- an interior node: test its eight child boxes -----------------
        b.position_at_end(node_bb)
        node = b.zext(cur, i64)
        node = b.select(b.icmp_unsigned(">", node, last_node), last_node, node)
        row = b.gep(nodes, [b.mul(node, i64(NODE_WORDS))], inbounds=True, source_etype=f32)
        t_near, t_far = zero8, None
        for axis in range(3):
            near_p = b.gep(row, [offs[axis][0]], inbounds=True, source_etype=f32)
            far_p = b.gep(row, [offs[axis][1]], inbounds=True, source_etype=f32)
            tn = b.fmul(b.fsub(b.load(near_p, typ=V8, align=4), o8[axis]), inv8[axis])
            tf = b.fmul(b.fsub(b.load(far_p, typ=V8, align=4), o8[axis]), inv8[axis])
            t_near = _fmax(b, tn, t_near)
            t_far = tf if t_far is None else _fmin(b, t_far, tf)
        t_far = _fmin(b, b.fmul(t_far, pad8), _splat(b, b.load(best_t, typ=f32), 8))
        hit = b.fcmp_ordered("<=", t_near, t_far)
        bits = b.zext(b.bitcast(hit, i8), i32)
        b.cbranch(b.icmp_unsigned("==", bits, i32(0)), pop_bb, kids_bb)

        # Visit the nearest hit child next; push the others.
        b.position_at_end(kids_bb)
        self.visit_children(bits, row, t_near, near_a, cur_a, sp_a, stack_node, stack_dist, loop)

        # -- a leaf block: four triangles at once -------------------------
        b.position_at_end(leaf_bb)
        blk = b.zext(b.xor(cur, i32(-1)), i64)
        blk = b.select(b.icmp_unsigned(">", blk, last_block), last_block, blk)
        no_blocks = b.icmp_unsigned("==", n_blocks, i64(0))
        test_bb = self.block("leaf.test")
        b.cbranch(no_blocks, pop_bb, test_bb)
        b.position_at_end(test_bb)
        trow = b.gep(leaves, [b.mul(blk, i64(LEAF_WORDS))], inbounds=True, source_etype=f32)
        c = [b.load(b.gep(trow, [i64(4 * j)], inbounds=True, source_etype=f32), typ=V4, align=4) for j in range(9)]
        p0, e1, e2 = c[0:3], c[3:6], c[6:9]
        t, u, v, ok = self.moller_trumbore(o4, d4, p0, e1, e2)
        ok = b.and_(ok, b.fcmp_ordered(">", t, _splat(b, t_min, 4)))
        if closest:
            # The lowest lane among the nearest hits nearer than the best so
            # far: what a loop over the leaf's triangles with a strict '<'
            # picks (the first of equal hits wins). Found with a vector
            # compare, a horizontal minimum and the first set bit, not a
            # chain of four dependent compares (which took ~40% of the
            # traversal's time on the Cornell box).
            take = b.and_(ok, b.fcmp_ordered("<", t, _splat(b, b.load(best_t, typ=f32), 4)))
            take_bits = b.zext(b.bitcast(take, ll.IntType(4)), i32)
            upd_bb = self.block("leaf.update")
            b.cbranch(b.icmp_unsigned("==", take_bits, i32(0)), pop_bb, upd_bb)
            b.position_at_end(upd_bb)
            masked = b.select(take, t, ll.Constant(V4, [f32(float("inf"))] * 4))
            half = _fmin(b, masked, b.shuffle_vector(masked, masked, ll.Constant(ll.VectorType(i32, 4),
                                                                                  [2, 3, 0, 1])))
            cur_t = _fmin(b, b.extract_element(half, i32(0)), b.extract_element(half, i32(1)))
            nearest = b.and_(take, b.fcmp_ordered("==", masked, _splat(b, cur_t, 4)))
            lane = b.call(_cttz(self.fn.module), [b.zext(b.bitcast(nearest, ll.IntType(4)), i32),
                                                  ll.Constant(i1, 1)])
            b.store(cur_t, best_t)
            prow = b.gep(trow, [b.add(i64(36), b.zext(lane, i64))], inbounds=True, source_etype=i32)
            b.store(b.load(prow, typ=i32), best_p)
            b.store(b.extract_element(u, lane), best_u)
            b.store(b.extract_element(v, lane), best_v)
            b.branch(pop_bb)
        else:
            ok = b.and_(ok, b.fcmp_ordered("<", t, _splat(b, t_max, 4)))
            found_bb = self.block("leaf.found")
            b.cbranch(b.icmp_unsigned("!=", b.zext(b.bitcast(ok, ll.IntType(4)), i32), i32(0)), found_bb, pop_bb)
            b.position_at_end(found_bb)
            b.ret(ll.Constant(i1, 1))

        # -- pop the next entry whose box can still hold a nearer hit -------
        b.position_at_end(pop_bb)
        sp = b.load(sp_a, typ=i32)
        take_bb = self.block("pop.take")
        b.cbranch(b.icmp_unsigned("==", sp, i32(0)), done_bb, take_bb)
        b.position_at_end(take_bb)
        sp = b.sub(sp, i32(1))
        b.store(sp, sp_a)
        c_ = b.load(b.gep(stack_node, [sp], inbounds=True, source_etype=i32), typ=i32)
        d_ = b.load(b.gep(stack_dist, [sp], inbounds=True, source_etype=f32), typ=f32)
        b.store(c_, cur_a)
        stale = b.fcmp_ordered(">", d_, b.load(best_t, typ=f32))
        b.cbranch(stale, pop_bb, loop)

        b.position_at_end(done_bb)
        if closest:
            res = ll.Constant(HIT_TYPE, ll.Undefined)
            for j, a in enumerate((best_t, best_p, best_u, best_v)):
                res = b.insert_value(res, b.load(a, typ=HIT_TYPE.elements[j]), j)
            b.ret(res)
        else:
            b.ret(ll.Constant(i1, 0))

    def visit_children(self, bits, row, t_near, near_a, cur_a, sp_a, stack_node, stack_dist, loop):
        """Go to the nearest hit child; push the others (a loop over the hit
        bits). The loop reads each hit child's index from the node's row and
        its entry distance, on the CPU, from ``near_a``, where ``t_near`` is
        stored once: there an element of a vector at a variable index is a
        store of the whole vector and a load, which LLVM repeated in every
        iteration. (A GPU thread's alloca is local memory: it extracts.)"""
        b = self.b
        if self.cpu:
            b.store(t_near, near_a)
        bit_loop, bit_done = self.block("children.each"), self.block("children.done")
        entry = b.block
        b.branch(bit_loop)
        b.position_at_end(bit_loop)
        m = b.phi(i32)
        near_c = b.phi(i32)
        near_d = b.phi(f32)
        m.add_incoming(bits, entry)
        near_c.add_incoming(i32(0), entry)
        near_d.add_incoming(f32(float("inf")), entry)
        k = b.call(_cttz(self.fn.module), [m, ll.Constant(i1, 1)])
        ck = b.load(b.gep(row, [b.add(i64(48), b.zext(k, i64))], inbounds=True, source_etype=i32), typ=i32)
        dk = (b.load(b.gep(near_a, [i64(0), k], inbounds=True, source_etype=V8), typ=f32) if self.cpu
              else b.extract_element(t_near, k))
        if self.cpu:
            self.prefetch_child(ck)
        first = b.fcmp_ordered("==", near_d, f32(float("inf")))
        nearer = b.fcmp_ordered("<", dk, near_d)
        push_c = b.select(nearer, near_c, ck)
        push_d = b.select(nearer, near_d, dk)
        new_c = b.select(nearer, ck, near_c)
        new_d = b.select(nearer, dk, near_d)
        # The first hit child only becomes the candidate; a later one pushes
        # whichever of the two is farther.
        self.push(b.and_(b.not_(first), b.icmp_unsigned("<", b.load(sp_a, typ=i32), i32(STACK_SIZE))),
                  push_c, push_d, sp_a, stack_node, stack_dist)
        rest = b.and_(m, b.sub(m, i32(1)))
        here = b.block
        m.add_incoming(rest, here)
        near_c.add_incoming(new_c, here)
        near_d.add_incoming(new_d, here)
        b.cbranch(b.icmp_unsigned("==", rest, i32(0)), bit_done, bit_loop)
        b.position_at_end(bit_done)
        b.store(new_c, cur_a)
        b.branch(loop)

    def prefetch_child(self, c) -> None:
        """Ask for a child's cache lines as soon as its box is hit: a node
        or leaf block is 3 or 4 lines, and the traversal of a large mesh
        waits on them (Cornell box + 1M triangles, random rays: +8% rays/s)."""
        b = self.b
        nodes, leaves = self.fn.args[0], self.fn.args[1]
        pf = _intrinsic(self.fn.module, "llvm.prefetch.p0", ll.VoidType(), [ptr, i32, i32, i32])
        is_node = b.icmp_signed(">=", c, i32(0))
        node_row = b.gep(nodes, [b.mul(b.zext(c, i64), i64(NODE_WORDS))], source_etype=f32)
        leaf_row = b.gep(leaves, [b.mul(b.zext(b.xor(c, i32(-1)), i64), i64(LEAF_WORDS))], source_etype=f32)
        row = b.select(is_node, node_row, leaf_row)
        for off in (0, 64, 128, 192):  # a node is 224 bytes, a block 160
            b.call(pf, [b.gep(row, [i64(off)], source_etype=i8), i32(0), i32(3), i32(1)])

    def push(self, cond, node, dist, sp_a, stack_node, stack_dist) -> None:
        b = self.b
        with b.if_then(cond):
            sp = b.load(sp_a, typ=i32)
            b.store(node, b.gep(stack_node, [sp], inbounds=True, source_etype=i32))
            b.store(dist, b.gep(stack_dist, [sp], inbounds=True, source_etype=f32))
            b.store(b.add(sp, i32(1)), sp_a)

    def moller_trumbore(self, o, d, p0, e1, e2):
        """The same arithmetic, in the same order, as
        ``kernels.geometry.intersect_triangle`` with e1, e2 precomputed."""
        b = self.b

        def cross(a, c):
            return (b.fsub(b.fmul(a[1], c[2]), b.fmul(a[2], c[1])),
                    b.fsub(b.fmul(a[2], c[0]), b.fmul(a[0], c[2])),
                    b.fsub(b.fmul(a[0], c[1]), b.fmul(a[1], c[0])))

        fma = _intrinsic(self.fn.module, "llvm.fma.v4f32", V4, [V4] * 3)

        def dot(a, c):  # as ir.dot: fused multiply-adds from the first term
            return b.call(fma, [a[2], c[2], b.call(fma, [a[1], c[1], b.fmul(a[0], c[0])])])

        zero = ll.Constant(V4, [f32(0.0)] * 4)
        pv = cross(d, e2)
        det = dot(e1, pv)
        inv_det = b.fdiv(ll.Constant(V4, [f32(1.0)] * 4), det)
        tv = tuple(b.fsub(o[j], p0[j]) for j in range(3))
        u = b.fmul(dot(tv, pv), inv_det)
        qv = cross(tv, e1)
        v = b.fmul(dot(d, qv), inv_det)
        t = b.fmul(dot(e2, qv), inv_det)
        ok = b.and_(b.fcmp_unordered("!=", det, zero), b.fcmp_ordered(">=", u, zero))
        ok = b.and_(ok, b.fcmp_ordered(">=", v, zero))
        ok = b.and_(ok, b.fcmp_ordered("<=", b.fadd(u, v), ll.Constant(V4, [f32(1.0)] * 4)))
        return t, u, v, ok
