"""The XLA typed-FFI handler, generated in LLVM IR (no C compiler involved).

Offsets follow ``xla/ffi/api/c_api.h`` (x86-64; under ``jax.ffi.include_dir()``):
call frame: extension_start @8, api @16, stage @32, args @40, rets @80;
args/rets: size @+16, buffer pointer array @+32; buffer: data @24, rank @32,
dims @40; ``api->XLA_FFI_Error_Create`` @48.

The handler answers XLA's metadata query, validates that every buffer has
exactly the number of elements the launch info promises (a mismatch is an
XLA error, never an out-of-bounds access), zeroes accumulators, gives each
thread float64 copies of the small float ones, runs the worker on
``num_threads`` pthreads, sums the copies, and converts a failed in-kernel
``check`` into an XLA error whose message reaches Python.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..ir.graph import F32
from ..ir.kernel import Kernel, _width
from .abi import InfoLayout
from .codegen import CTX_PRIVATE, CTX_SHARED, f32, f64, i1, i8, i32, i64, ptr

ERRC_INVALID_ARGUMENT = 3
ERRC_INTERNAL = 13
MAX_THREADS = 256
# Largest private copies of one accumulator, all threads together
# (elements): 128 MiB of float64.
PRIVATE_MAX_ELEMENTS = 1 << 24
ERROR_CREATE_ARGS = ll.LiteralStructType([i64, ptr, ptr, i32])
ERROR_CREATE_ARGS_SIZE = 28  # offsetof(errc) + sizeof(errc), XLA's struct traits
STAGE_EXECUTE = 3            # XLA_FFI_ExecutionStage_EXECUTE
API_ERROR_CREATE = 48        # offsetof(XLA_FFI_Api, XLA_FFI_Error_Create)


class _Emitter:
    def __init__(self, module: ll.Module, fn: ll.Function):
        self.m, self.fn = module, fn
        self.b = ll.IRBuilder(fn.append_basic_block("entry"))
        self._strings: dict[str, ll.GlobalVariable] = {}

    def load_at(self, base, offset: int, typ):
        p = self.b.gep(base, [i64(offset)], inbounds=True, source_etype=i8)
        return self.b.load(p, typ=typ)

    def store_at(self, value, base, offset: int):
        p = self.b.gep(base, [i64(offset)], inbounds=True, source_etype=i8)
        self.b.store(value, p)

    def alloca(self, ty):
        return _opaque(self.b.alloca(ty))

    def cstring(self, text: str):
        g = self._strings.get(text)
        if g is None:
            data = bytearray(text.encode("utf-8")) + b"\0"
            ty = ll.ArrayType(i8, len(data))
            g = ll.GlobalVariable(self.m, ty, f"msg{len(self._strings)}")
            g.global_constant = True
            g.linkage = "private"
            g.initializer = ll.Constant(ty, data)
            self._strings[text] = _opaque(g)
        return self._strings[text]

    def answer_metadata_or_skip(self, frame) -> None:
        """Handler prologue: answer XLA's metadata query (API version 0.1, no
        traits) and return for every stage but execute."""
        b, null = self.b, ll.Constant(ptr, None)
        ext = self.load_at(frame, 8, ptr)
        with b.if_then(b.icmp_unsigned("!=", ext, null)):
            ext_type = self.load_at(ext, 8, i32)
            with b.if_then(b.icmp_signed("==", ext_type, i32(1))):
                meta = self.load_at(ext, 24, ptr)
                self.store_at(i32(0), meta, 24)
                self.store_at(i32(1), meta, 28)
                self.store_at(i32(0), meta, 32)
            b.ret(null)
        stage = self.load_at(frame, 32, i32)
        with b.if_then(b.icmp_signed("!=", stage, i32(STAGE_EXECUTE))):
            b.ret(null)

    def error_maker(self, frame):
        """``make_error(message pointer, errc)``: an ``XLA_FFI_Error*`` made by
        the API's ``XLA_FFI_Error_Create`` (what a failing handler returns)."""
        b, null = self.b, ll.Constant(ptr, None)
        api = self.load_at(frame, 16, ptr)
        error_create = _IndirectCallee(self.load_at(api, API_ERROR_CREATE, ptr), ll.FunctionType(ptr, [ptr]))

        def make_error(msg_ptr, errc):
            args = self.alloca(ERROR_CREATE_ARGS)
            b.store(ll.Constant(ERROR_CREATE_ARGS, [i64(ERROR_CREATE_ARGS_SIZE), null, null, i32(errc)]), args)
            b.store(msg_ptr, b.gep(args, [i32(0), i32(2)], inbounds=True, source_etype=ERROR_CREATE_ARGS))
            return b.call(error_create, [args])
        return make_error

    def buffer(self, array, k):
        """The ``XLA_FFI_Buffer*`` at index ``k`` (an int or an i64 value)
        of an argument/result array."""
        idx = i64(k) if isinstance(k, int) else k
        return self.b.load(self.b.gep(array, [idx], inbounds=True, source_etype=ptr), typ=ptr)

    def elements(self, buf):
        """Element count of an ``XLA_FFI_Buffer`` (product of its dims)."""
        b = self.b
        rank = self.load_at(buf, 32, i64)
        dims = self.load_at(buf, 40, ptr)
        pre = b.block
        head, body, after = (self.fn.append_basic_block(x) for x in ("dims.head", "dims.body", "dims.end"))
        b.branch(head)
        b.position_at_end(head)
        k, acc = b.phi(i64), b.phi(i64)
        k.add_incoming(i64(0), pre)
        acc.add_incoming(i64(1), pre)
        b.cbranch(b.icmp_signed("<", k, rank), body, after)
        b.position_at_end(body)
        k.add_incoming(b.add(k, i64(1)), body)
        acc.add_incoming(b.mul(acc, b.load(b.gep(dims, [k], source_etype=i64), typ=i64)), body)
        b.branch(head)
        b.position_at_end(after)
        return acc

    def string_table(self, texts: list[str]):
        """A constant array of pointers to the C strings ``texts``."""
        ty = ll.ArrayType(ptr, max(len(texts), 1))
        g = ll.GlobalVariable(self.m, ty, f"msgtab{len(self.m.globals)}")
        g.global_constant = True
        g.linkage = "private"
        g.initializer = ll.Constant(ty, [self.cstring(t) for t in texts] or [ll.Constant(ptr, None)])
        return _opaque(g)

    def sized_buffer(self, array, k, expected, fail, what: str):
        """(data pointer, element count) of buffer ``k`` of ``array``, after
        a check that it has ``expected`` elements (else ``fail``, naming
        ``what``)."""
        buf = self.buffer(array, k)
        n = self.elements(buf)
        with self.b.if_then(self.b.icmp_signed("!=", n, expected), likely=False):
            fail(f"{what} has a different number of elements than the launch was prepared for")
        return self.load_at(buf, 24, ptr), n

    def for_range(self, n, body) -> None:
        """Emit ``for (i64 i = 0; i < n; ++i) body(i)``."""
        b = self.b
        pre = b.block
        head = self.fn.append_basic_block("for.head")
        loop = self.fn.append_basic_block("for.body")
        after = self.fn.append_basic_block("for.end")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(i64)
        i.add_incoming(i64(0), pre)
        b.cbranch(b.icmp_signed("<", i, n), loop, after)
        b.position_at_end(loop)
        body(i)
        nxt = b.add(i, i64(1))
        i.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(after)


def build_handler(module: ll.Module, kernel: Kernel, layout: InfoLayout, ctx_type,
                  worker: ll.Function, symbol: str) -> ll.Function:
    fn = ll.Function(module, ll.FunctionType(ptr, [ptr]), symbol)
    (frame,) = fn.args
    e = _Emitter(module, fn)
    b = e.b
    null = ll.Constant(ptr, None)

    e.answer_metadata_or_skip(frame)
    make_error = e.error_maker(frame)

    def fail(text: str, errc: int = ERRC_INVALID_ARGUMENT):
        b.ret(make_error(e.cstring(text), errc))

    ni, no, na = layout.ni, layout.no, layout.na
    name = kernel.name
    nargs = e.load_at(frame, 40 + 16, i64)
    nrets = e.load_at(frame, 80 + 16, i64)
    bad_count = b.or_(b.icmp_signed("!=", nargs, i64(1 + ni)), b.icmp_signed("!=", nrets, i64(no + na)))
    with b.if_then(bad_count, likely=False):
        fail(f"jaxrender kernel '{name}': XLA passed the wrong number of buffers "
             f"(expected {1 + ni} arguments and {no + na} results)")
    args = e.load_at(frame, 40 + 32, ptr)
    rets = e.load_at(frame, 80 + 32, ptr)

    buffer, elements = e.buffer, e.elements

    info_buf = buffer(args, 0)
    info = e.load_at(info_buf, 24, ptr)
    # The launch info arrives as int32 pairs (JAX may lack int64 arrays).
    with b.if_then(b.icmp_signed("!=", elements(info_buf), i64(2 * layout.size)), likely=False):
        fail(f"jaxrender kernel '{name}': launch info has the wrong size")

    def info_at(k):
        return b.load(b.gep(info, [i64(k)], inbounds=True, source_etype=i64), typ=i64)

    ctx = e.alloca(ctx_type)

    def ctx_slot(*idx):
        return b.gep(ctx, [i32(0)] + [i32(x) for x in idx], inbounds=True, source_etype=ctx_type)

    b.store(info, ctx_slot(0))

    def info_at_index(k):
        return b.load(b.gep(info, [k], inbounds=True, source_etype=i64), typ=i64)

    def checked_buffers(array, first: int, count: int, expected_at: int, names: list[str], what: str, body):
        """For k < count: buffer ``first + k`` of ``array`` must have the
        element count in launch info word ``expected_at + k`` (else an XLA
        error naming it); ``body(k, data pointer, elements)``. One loop over
        tables rather than code per buffer: the handler's size no longer
        grows with the kernel's signature, nor its share of compile time."""
        if not count:
            return
        msgs = e.string_table([f"jaxrender kernel '{name}': {what} '{n}' has a different number of "
                               "elements than the launch was prepared for" for n in names])

        def one(k):
            buf = e.buffer(array, b.add(k, i64(first)) if first else k)
            n = e.elements(buf)
            with b.if_then(b.icmp_signed("!=", n, info_at_index(b.add(k, i64(expected_at)))), likely=False):
                msg = b.load(b.gep(msgs, [k], inbounds=True, source_etype=ptr), typ=ptr)
                b.ret(make_error(msg, ERRC_INVALID_ARGUMENT))
            body(k, e.load_at(buf, 24, ptr), n)
        e.for_range(i64(count), one)

    zero_row = _zero_row(module, kernel)

    def set_input(k, data, n):
        # An input with no rows arrives empty (the bridge pads nothing:
        # ZERO_ROW_FOR_EMPTY_INPUTS); its reads, clamped to row 0 (and its
        # batch strides, 0), land in a zero row of our own. (A scalar input
        # has one row.)
        empty = b.icmp_signed("==", info_at_index(b.add(k, i64(layout.rows(0)))), i64(0))
        b.store(b.select(empty, zero_row, data), b.gep(ctx, [i32(0), i32(1), k], inbounds=True,
                                                       source_etype=ctx_type))

    memset = module.globals.get("llvm.memset.p0.i64") or ll.Function(
        module, ll.FunctionType(ll.VoidType(), [ptr, i8, i64, i1]), "llvm.memset.p0.i64")

    def set_output(k, data, n):
        b.store(data, b.gep(ctx, [i32(0), i32(2), k], inbounds=True, source_etype=ctx_type))

    def set_accumulator(k, data, n):
        b.store(data, b.gep(ctx, [i32(0), i32(3), k], inbounds=True, source_etype=ctx_type))
        b.call(memset, [data, i8(0), b.mul(n, i64(4)), i1(0)])  # every dtype we store is 32-bit

    checked_buffers(args, 1, ni, layout.in_elems(0), list(kernel.inputs), "input", set_input)
    checked_buffers(rets, 0, no, layout.out_elems(0), list(kernel.item_outputs), "result", set_output)
    checked_buffers(rets, no, na, layout.out_elems(no), list(kernel.accumulators), "result", set_accumulator)

    total = info_at(1)
    tile = info_at(2)
    tile = b.select(b.icmp_signed("<", tile, i64(1)), i64(1), tile)
    b.store(i64(0), ctx_slot(4))
    b.store(i32(0), ctx_slot(5))
    b.store(tile, ctx_slot(6))
    b.store(total, ctx_slot(7))
    ntiles = b.udiv(b.add(total, b.sub(tile, i64(1))), tile)
    nthreads = info_at(3)
    nthreads = b.select(b.icmp_signed(">", nthreads, ntiles), ntiles, nthreads)
    nthreads = b.select(b.icmp_signed(">", nthreads, i64(MAX_THREADS)), i64(MAX_THREADS), nthreads)
    helpers = b.sub(nthreads, i64(1))

    pthread_create = module.globals.get("pthread_create") or ll.Function(
        module, ll.FunctionType(i32, [ptr, ptr, ptr, ptr]), "pthread_create")
    pthread_join = module.globals.get("pthread_join") or ll.Function(
        module, ll.FunctionType(i32, [i64, ptr]), "pthread_join")
    tids_t, started_t = ll.ArrayType(i64, MAX_THREADS), ll.ArrayType(i8, MAX_THREADS)
    tids, started = e.alloca(tids_t), e.alloca(started_t)

    def join(t):
        ok = b.load(b.gep(started, [i64(0), t], inbounds=True, source_etype=started_t), typ=i8)
        with b.if_then(b.icmp_unsigned("!=", ok, i8(0))):
            tid = b.load(b.gep(tids, [i64(0), t], inbounds=True, source_etype=tids_t), typ=i64)
            b.call(pthread_join, [tid, null])

    b.store(ctx, ctx_slot(CTX_SHARED))
    private = _PrivateAccumulators(e, kernel, layout, ctx_type, ctx, nthreads, total)

    def spawn(t):
        slot = b.gep(tids, [i64(0), t], inbounds=True, source_etype=tids_t)
        rc = b.call(pthread_create, [slot, null, worker, private.context(b.add(t, i64(1)))])
        ok = b.zext(b.icmp_signed("==", rc, i32(0)), i8)
        b.store(ok, b.gep(started, [i64(0), t], inbounds=True, source_etype=started_t))

    # Threads that fail to start are simply not counted: the calling thread
    # (and the others) drain the shared tile counter regardless.
    e.for_range(helpers, spawn)
    b.call(worker, [private.context(i64(0))])
    e.for_range(helpers, join)
    private.reduce_and_free()

    code = b.load(ctx_slot(5), typ=i32)
    for k, msg in enumerate(kernel.messages, start=1):
        with b.if_then(b.icmp_signed("==", code, i32(k)), likely=False):
            fail(f"jaxrender kernel '{name}': check failed: {msg}", ERRC_INVALID_ARGUMENT)
    b.ret(null)
    return fn


class _PrivateAccumulators:
    """Each thread adds into a zeroed float64 copy of its own of a float
    accumulator, and the handler sums the copies into XLA's buffer after
    the join.

    Adjoint kernels add every sample's gradient into the few rows of the
    parameters it depends on (one material's colour). Atomic adds into
    one shared float32 buffer serialized the cores on those cache lines (a
    gradient that took 3x a primal on 2 cores took 7x on 16) and lost the
    small late terms of long float32 sums (a Cornell box colour gradient
    at 256x256, 64 spp, was 1.5% low on one thread and moved with the
    thread count). A float accumulator is copied when all copies together
    hold no more elements than the launch has work items (so the final sum
    costs at most one add per item) and at most PRIVATE_MAX_ELEMENTS;
    larger ones, which samples seldom hit in the same place, and integer
    ones stay shared and atomic, as does everything if memory cannot be
    had. ``CTX_PRIVATE`` tells the kernel which copies exist."""

    def __init__(self, e: _Emitter, kernel: Kernel, layout: InfoLayout, ctx_type, ctx, nthreads, total):
        self.e, self.b, self.ctx, self.ctx_type, self.nthreads = e, e.b, ctx, ctx_type, nthreads
        b, m = e.b, e.m
        self.na = na = layout.na
        self.null = null = ll.Constant(ptr, None)
        self.free = m.globals.get("free") or ll.Function(m, ll.FunctionType(ll.VoidType(), [ptr]), "free")
        self.ctx_size = b.ptrtoint(b.gep(null, [i32(1)], source_etype=ctx_type), i64)
        self.first_count = layout.out_elems(layout.no)
        self.info = b.load(b.gep(ctx, [i32(0), i32(0)], inbounds=True, source_etype=ctx_type), typ=ptr)
        floats = [1 if spec.dtype == F32 else 0 for spec in kernel.accumulators.values()]
        self.flags_t = ll.ArrayType(i8, max(na, 1))
        self.flags = e.alloca(self.flags_t)
        b.store(ll.Constant(self.flags_t, [0] * max(na, 1)), self.flags)
        b.store(self.flags, b.gep(ctx, [i32(0), i32(CTX_PRIVATE)], inbounds=True, source_etype=ctx_type))
        self.blocks_t = ll.ArrayType(ptr, max(na, 1))
        self.blocks = e.alloca(self.blocks_t)
        self.contexts = e.alloca(ptr)
        b.store(null, self.contexts)
        self.any = any(floats)
        if not self.any:
            return
        g = ll.GlobalVariable(m, ll.ArrayType(i8, na), "jaxrender_acc_is_float")
        g.global_constant, g.linkage = True, "private"
        g.initializer = ll.Constant(ll.ArrayType(i8, na), floats)
        calloc = m.globals.get("calloc") or ll.Function(m, ll.FunctionType(ptr, [i64, i64]), "calloc")
        malloc = m.globals.get("malloc") or ll.Function(m, ll.FunctionType(ptr, [i64]), "malloc")
        memcpy = m.globals.get("llvm.memcpy.p0.p0.i64") or ll.Function(
            m, ll.FunctionType(ll.VoidType(), [ptr, ptr, i64, i1]), "llvm.memcpy.p0.p0.i64")
        b.store(b.call(malloc, [b.mul(nthreads, self.ctx_size)]), self.contexts)
        contexts = b.load(self.contexts, typ=ptr)
        have_contexts = b.icmp_unsigned("!=", contexts, null)

        def allocate(k):
            slot = self.block_slot(k)
            b.store(null, slot)
            isf = b.load(b.gep(g, [i64(0), k], inbounds=True, source_etype=g.value_type), typ=i8)
            copies = b.mul(nthreads, self.count(k))
            fits = b.and_(b.icmp_signed("<=", copies, total), b.icmp_signed("<=", copies, i64(PRIVATE_MAX_ELEMENTS)))
            fits = b.and_(fits, b.and_(b.icmp_signed(">", copies, i64(0)), b.icmp_unsigned("!=", isf, i8(0))))
            with b.if_then(b.and_(have_contexts, fits)):
                block = b.call(calloc, [copies, i64(8)])
                b.store(block, slot)
                b.store(b.zext(b.icmp_unsigned("!=", block, null), i8), self.flag_slot(k))
        e.for_range(i64(na), allocate)

        def copy_context(t):
            mine = b.gep(contexts, [b.mul(t, self.ctx_size)], source_etype=i8)
            b.call(memcpy, [mine, ctx, self.ctx_size, ll.Constant(i1, 0)])

            def point(k):
                block = b.load(self.block_slot(k), typ=ptr)
                with b.if_then(b.icmp_unsigned("!=", block, null)):
                    own = b.gep(block, [b.mul(t, self.count(k))], source_etype=f64)
                    b.store(own, b.gep(mine, [i32(0), i32(3), k], inbounds=True, source_etype=ctx_type))
            e.for_range(i64(na), point)
        with b.if_then(have_contexts):
            e.for_range(nthreads, copy_context)

    def block_slot(self, k):
        return self.b.gep(self.blocks, [i64(0), k], inbounds=True, source_etype=self.blocks_t)

    def flag_slot(self, k):
        return self.b.gep(self.flags, [i64(0), k], inbounds=True, source_etype=self.flags_t)

    def count(self, k):
        b = self.b
        return b.load(b.gep(self.info, [b.add(k, i64(self.first_count))], inbounds=True, source_etype=i64), typ=i64)

    def context(self, t):
        """Thread ``t``'s context (0: the calling thread): its copy, or the
        shared one."""
        b = self.b
        if not self.any:
            return self.ctx
        contexts = b.load(self.contexts, typ=ptr)
        own = b.gep(contexts, [b.mul(t, self.ctx_size)], source_etype=i8)
        return b.select(b.icmp_unsigned("!=", contexts, self.null), own, self.ctx)

    def reduce_and_free(self) -> None:
        """After the join: each private element's copies summed in float64,
        rounded once into XLA's buffer; and free what was allocated."""
        e, b, null = self.e, self.b, self.null
        if not self.any:
            return
        total = e.alloca(f64)

        def reduce(k):
            block = b.load(self.block_slot(k), typ=ptr)
            with b.if_then(b.icmp_unsigned("!=", block, null)):
                n = self.count(k)
                data = b.load(b.gep(self.ctx, [i32(0), i32(3), k], inbounds=True, source_etype=self.ctx_type),
                              typ=ptr)

                def element(i):
                    b.store(ll.Constant(f64, 0.0), total)

                    def add_copy(t):
                        v = b.load(b.gep(block, [b.add(b.mul(t, n), i)], source_etype=f64), typ=f64)
                        b.store(b.fadd(b.load(total, typ=f64), v), total)
                    e.for_range(self.nthreads, add_copy)
                    b.store(b.fptrunc(b.load(total, typ=f64), f32), b.gep(data, [i], source_etype=f32))
                e.for_range(n, element)
                b.call(self.free, [block])
        e.for_range(i64(self.na), reduce)
        contexts = b.load(self.contexts, typ=ptr)
        with b.if_then(b.icmp_unsigned("!=", contexts, null)):
            b.call(self.free, [contexts])


def _zero_row(module: ll.Module, kernel: Kernel):
    """A constant row of zeros as wide as the kernel's widest input row."""
    words = max([_width(spec.item_shape) for spec in kernel.inputs.values()] + [1])
    ty = ll.ArrayType(i32, words)
    g = ll.GlobalVariable(module, ty, "jaxrender_zero_row")
    g.global_constant = True
    g.linkage = "private"
    g.align = 64
    g.initializer = ll.Constant(ty, None)
    return _opaque(g)


def _opaque(value):
    """llvmlite's IR layer gives allocas and globals typed pointer types;
    everything here uses opaque ``ptr``, which is what LLVM itself has."""
    value.type = ptr
    return value


class _IndirectCallee:
    """A function pointer value that llvmlite's ``IRBuilder.call`` accepts
    (it reads the callee's signature from ``function_type``)."""

    def __init__(self, value, function_type: ll.FunctionType):
        self.value = value
        self.function_type = function_type
        self.type = value.type

    def get_reference(self) -> str:
        return self.value.get_reference()
