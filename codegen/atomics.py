"""Atomic operations on one int64 slot of an array, for numba code shared between threads
(codegen.parts, codegen.board): each is read or written again every time it runs, so a
loop polling a slot is not folded away."""
from numba import types
from numba.extending import intrinsic


def _slot(context, builder, array_type, array, index):
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


@intrinsic
def load_acquire(typingctx, array, index):
    """array[index]; what the thread that stored it wrote before is seen after."""
    def codegen(context, builder, sig, args):
        return builder.load_atomic(_slot(context, builder, sig.args[0], *args), "acquire", 8)
    return types.int64(array, types.intp), codegen


@intrinsic
def store_release(typingctx, array, index, value):
    """array[index] = value; what this thread wrote before is seen by a thread that loads it."""
    def codegen(context, builder, sig, args):
        builder.store_atomic(args[2], _slot(context, builder, sig.args[0], args[0], args[1]),
                             "release", 8)
        return context.get_dummy_value()
    return types.void(array, types.intp, types.int64), codegen


@intrinsic
def compare_exchange(typingctx, array, index, expected, new):
    """array[index] = new if it holds `expected` (True), else nothing (False), at once."""
    def codegen(context, builder, sig, args):
        pair = builder.cmpxchg(_slot(context, builder, sig.args[0], args[0], args[1]),
                               args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)
    return types.boolean(array, types.intp, types.int64, types.int64), codegen


@intrinsic
def fetch_add(typingctx, array, index, value):
    """array[index] += value at once; the value before."""
    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("add", _slot(context, builder, sig.args[0], args[0], args[1]),
                                  args[2], "seq_cst")
    return types.int64(array, types.intp, types.int64), codegen
