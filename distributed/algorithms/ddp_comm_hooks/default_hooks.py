"""The default communication hooks: the plain all-reduce (what DDP does without a hook) and
all-reduces of the bucket compressed to 16-bit floats (half the bytes on the wire)."""
import aotgrad
from aotgrad.distributed import collectives
from aotgrad.distributed.process_group import default_group
from aotgrad.runtime.grad_mode import no_grad


def allreduce_hook(process_group, bucket):
    """The bucket divided by the group's size, then summed over the ranks: the average."""
    group = default_group(process_group)
    buffer = bucket.buffer()
    with no_grad():
        buffer.div_(group.size())
    fut = collectives.all_reduce(buffer, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def _compress_hook(dtype, process_group, bucket):
    group = default_group(process_group)
    buffer = bucket.buffer()
    with no_grad():
        compressed = buffer.to(dtype).div_(group.size())
    fut = collectives.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(f):
        with no_grad():
            buffer.copy_(f.value()[0])   # back in the bucket's dtype
        return buffer
    return fut.then(decompress)


def fp16_compress_hook(process_group, bucket):
    """All-reduce the bucket as float16 (divided by the group's size first, against
    overflow), then cast the average back into the bucket's dtype."""
    return _compress_hook(aotgrad.float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket):
    """fp16_compress_hook with bfloat16 (float32's range, 8 bits of mantissa)."""
    return _compress_hook(aotgrad.bfloat16, process_group, bucket)
