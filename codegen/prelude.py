"""The text every generated kernel module starts with (codegen.emitter.module_source):
its imports, the jit decorators, and the intrinsics kernels call in place of numba's
overloads or to pass hints to LLVM: `_wide` (512-bit vectors), `_interleave` (vectors in
flight per loop iteration), `_empty`/`_zeros`/`_full` (allocation), `_view` (views of
C-contiguous arrays) and `_imin`/`_imax` (integer min/max).

It is text, not imported code, because every generated module must be self-contained
(numba's `cache=True` does not track functions imported from other files). The float32
approximations and their intrinsics follow it in a module (codegen.approx.helper_source).
"""
import os

# No fast-math flags on kernels: "reassoc" let LLVM fold exp(log(x)) to x and regroup
# x * c1 * c2 (overflow where eager has none), "arcp" turned a / y + b / y into a * (1 / y) +
# b * (1 / y) (inf for a denormal y), "contract" fused x * x - y * y into an FMA (a tiny
# negative where eager has 0, NaN after sqrt). Only a reduction's accumulating add (and
# max/min) carries "reassoc", set on that one instruction (`_radd`, `_maxnum`): sums
# vectorise, the expression summed keeps eager's rounding.
_FM = 'error_model="numpy"'

PRELUDE = '''\
import math
import numpy as np
import numba
from numba import prange
from numba.extending import intrinsic as _intrinsic
from llvmlite import ir as _llir

_jit = numba.njit(cache=True, nogil=True, %s)
_ijit = numba.njit(cache=True, inline="always", %s)
_pjit = numba.njit(cache=True, parallel=True, %s)
NAN32 = np.float32(np.nan)
INF32 = np.float32(np.inf)
NAN64 = np.float64(np.nan)
INF64 = np.float64(np.inf)
''' % (_FM, _FM, _FM)

# Kernels ask LLVM for 512-bit vectors where the CPU has them: LLVM's x86 cost model prefers
# 256-bit ymm registers (a frequency concern on older AVX-512 parts); measured here, zmm ran
# the transcendental-heavy loops 1.3-1.5x faster. The request is a function attribute set by
# `_wide()`, a no-op intrinsic each kernel calls in every function holding its loops (prange
# bodies are outlined into functions of their own). AOTGRAD_VECTOR_WIDTH=256 turns it off.
VECTOR_WIDTH = os.environ.get("AOTGRAD_VECTOR_WIDTH", "512")
if not VECTOR_WIDTH.isdigit():
    raise ValueError(f"AOTGRAD_VECTOR_WIDTH must be a number of bits, got {VECTOR_WIDTH!r}")

PRELUDE += '''

@_intrinsic
def _wide(typingctx):
    def codegen(context, builder, sig, args):
        try:  # a string attribute llvmlite's attribute set does not list
            set.add(builder.function.attributes, '"prefer-vector-width"="%s"')
        except Exception:
            pass
        return context.get_dummy_value()
    return numba.types.none(), codegen
''' % VECTOR_WIDTH

# `_interleave()`, the last statement of an innermost loop's body, asks LLVM to run
# INTERLEAVE vectors per iteration of that loop (loop metadata "llvm.loop.interleave.count"
# on the branch that closes the body). LLVM's vectoriser interleaves a loop only when it
# holds a reduction or is short; a long elementwise body (a chain of exp/tanh/logistic
# approximations, ~30 dependent operations each) then runs one vector at a time and waits
# on that chain: W1's backward kernel ran 1.6x faster with four vectors in flight, for
# ~0.3 s more compile time. numba adds the closing branch after the call has been lowered,
# so the call marks its block, whose terminator setter attaches the metadata then. Any
# failure leaves the loop as it was.
INTERLEAVE = 4
PRELUDE += '''

class _LatchBlock(_llir.Block):
    """A block whose closing branch (numba's jump back to the loop header, added after
    `_interleave()` was lowered) carries the loop metadata `loop_md`."""
    loop_md = None

    @property
    def terminator(self):
        return self.__dict__.get("_terminator")

    @terminator.setter
    def terminator(self, term):
        if term is not None and self.loop_md is not None and term.opname == "br":
            term.set_metadata("llvm.loop", self.loop_md)
        self.__dict__["_terminator"] = term


@_intrinsic
def _interleave(typingctx):
    def codegen(context, builder, sig, args):
        try:
            blk, mod = builder.block, builder.module
            if type(blk) is _llir.Block and not blk.is_terminated:
                count = mod.add_metadata([_llir.MetaDataString(mod, "llvm.loop.interleave.count"),
                                          _llir.Constant(_llir.IntType(32), %d)])
                # a loop ID is a node of its own whose first operand is itself; the counter
                # operand only makes add_metadata return a new node per loop
                md = mod.add_metadata([count, _llir.Constant(_llir.IntType(32), len(mod.metadata))])
                md.operands = (md, count)
                blk.__class__ = _LatchBlock
                blk.loop_md = md
        except Exception:
            pass
        return context.get_dummy_value()
    return numba.types.none(), codegen
''' % INTERLEAVE

# Allocation without numba's np.empty/np.zeros/np.full overloads: each of those compiles a
# function of its own per (shape, dtype) in every process (0.5 s of the 7 s a cold
# transformer block spends compiling); these intrinsics emit the allocation inline.
PRELUDE += '''

def _new_array(shape, dtype, fill):
    """(array type, codegen) of an allocation: fill None, "zero", or "value" (the third
    argument, cast to the dtype)."""
    from numba.core import cgutils, types
    from numba.np.arrayobj import _empty_nd_impl
    tup = isinstance(shape, types.BaseTuple)
    arrty = types.Array(dtype.dtype, len(shape) if tup else 1, "C")

    def codegen(context, builder, sig, args):
        dims = cgutils.unpack_tuple(builder, args[0]) if tup else [args[0]]
        dims = [context.cast(builder, d, t, types.intp)
                for d, t in zip(dims, sig.args[0] if tup else [sig.args[0]])]
        ary = _empty_nd_impl(context, builder, arrty, dims)
        if fill == "zero":
            cgutils.memset(builder, ary.data, builder.mul(ary.itemsize, ary.nitems), 0)
        elif fill == "value":
            v = context.cast(builder, args[2], sig.args[2], arrty.dtype)
            with cgutils.for_range(builder, ary.nitems) as loop:
                builder.store(v, builder.gep(ary.data, [loop.index]))
        return ary._getvalue()
    return arrty, codegen


@_intrinsic
def _empty(typingctx, shape, dtype):      # _empty(n, np.float32), _empty((a, b), np.float64)
    arrty, codegen = _new_array(shape, dtype, None)
    return arrty(shape, dtype), codegen


@_intrinsic
def _zeros(typingctx, shape, dtype):
    arrty, codegen = _new_array(shape, dtype, "zero")
    return arrty(shape, dtype), codegen


@_intrinsic
def _full(typingctx, shape, dtype, value):  # _full(n, np.float32, value)
    arrty, codegen = _new_array(shape, dtype, "value")
    return arrty(shape, dtype, value), codegen


# Views without numba's array.view and reshape: each of those compiles a function of its
# own (the dtype and size checks) at every call site, in every process, a large part of a
# kernel's compile. The kernels' views are of C-contiguous arrays at sizes the generator
# works out, so this intrinsic builds the view inline: `shape` (an int or a tuple) of
# `dtype`, from byte `offset` of `a`'s data, C order, sharing `a`'s memory.
@_intrinsic
def _view(typingctx, a, offset, shape, dtype):  # _view(ws, nbytes, (n, m), np.float64)
    from numba.core import cgutils, types
    from numba.core.imputils import impl_ret_borrowed
    from numba.np.arrayobj import make_array, populate_array
    if not isinstance(a, types.Array) or a.layout != "C":
        return None
    tup = isinstance(shape, types.BaseTuple)
    arrty = types.Array(dtype.dtype, len(shape) if tup else 1, "C")

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, args[0])
        dims = cgutils.unpack_tuple(builder, args[2]) if tup else [args[2]]
        dims = [context.cast(builder, d, t, types.intp)
                for d, t in zip(dims, sig.args[2] if tup else [sig.args[2]])]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(arrty.dtype)))
        strides = [itemsize] if dims else []
        for d in dims[:0:-1]:
            strides.insert(0, builder.mul(strides[0], d))
        start = builder.bitcast(src.data, _llir.IntType(8).as_pointer())
        off = context.cast(builder, args[1], sig.args[1], types.intp)
        data = builder.bitcast(builder.gep(start, [off]),
                               context.get_data_type(arrty.dtype).as_pointer())
        out = make_array(arrty)(context, builder)
        intp = context.get_value_type(types.intp)
        populate_array(out, data=data, shape=cgutils.pack_array(builder, dims, intp),
                       strides=cgutils.pack_array(builder, strides, intp), itemsize=itemsize,
                       meminfo=src.meminfo)
        return impl_ret_borrowed(context, builder, arrty, out._getvalue())
    return arrty(a, offset, shape, dtype), codegen


def _mk_imin(pred):             # integer min/max (numba's builtin min/max also compile apart)
    def impl(typingctx, a, b):
        from numba.core import types
        def codegen(context, builder, sig, args):
            x, y = (context.cast(builder, v, t, types.intp) for v, t in zip(args, sig.args))
            return builder.select(builder.icmp_signed(pred, x, y), x, y)
        return types.intp(a, b), codegen
    return _intrinsic(impl)


_imin = _mk_imin("<")
_imax = _mk_imin(">")
'''
