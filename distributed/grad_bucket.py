"""GradBucket: what DistributedDataParallel hands a communication hook (torch.distributed's
GradBucket): one bucket's flattened gradients and the parameters they belong to."""


class GradBucket:
    """`buffer()`: the flat gradient tensor of the bucket (the hook reduces it, or a tensor
    made from it); `gradients()`: views of it, one per parameter; `parameters()`; `index()`
    (buckets are numbered in the order their all-reduces start); `is_last()`;
    `set_buffer(t)`: replace the buffer's contents."""

    def __init__(self, index, buffer, gradients, parameters, is_last):
        self._index, self._buffer = index, buffer
        self._gradients, self._parameters = gradients, parameters
        self._is_last = is_last

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def gradients(self):
        return list(self._gradients)

    def parameters(self):
        return list(self._parameters)

    def is_last(self):
        return self._is_last

    def set_buffer(self, buffer):
        self._buffer.copy_(buffer)

    def __repr__(self):
        return f"GradBucket(index={self._index}, numel={self._buffer.numel()})"
