"""Variable-length sequences (PyTorch's `nn.utils.rnn`): pad_sequence, and PackedSequence
with pack_padded_sequence / pad_packed_sequence / pack_sequence, which nn.RNN, nn.LSTM and
nn.GRU accept.

>>> pad_sequence([aotgrad.ones(2), aotgrad.ones(3)], batch_first=True)
tensor([[1., 1., 0.],
        [1., 1., 1.]])

PackedSequence stores `data` in PyTorch's layout (time-major, batch sorted by decreasing
length, `batch_sizes[t]` rows per step); the lengths it packs must be concrete values (not
traced ones), as in PyTorch where they live on the CPU.
"""
from typing import NamedTuple, Optional

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint
from aotgrad.nn import functional as F
from aotgrad.runtime import shape_ops
from aotgrad.runtime.factories import tensor
from aotgrad.runtime.tensor import Tensor


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack tensors of shape (L_i, *) into (L_max, B, *) (or (B, L_max, *)), padding each
    on the right (or the left) with padding_value."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got "
                         f"{padding_side}.")
    sequences = list(sequences) if not isinstance(sequences, Tensor) else \
        list(shape_ops.unbind(sequences, 0))
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        extra = longest - s.shape[0]
        if extra:
            spec = [0, 0] * (s.ndim - 1) + ([0, extra] if padding_side == "right" else
                                            [extra, 0])
            s = F.pad(s, spec, value=padding_value)
        padded.append(s)
    return shape_ops.stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The inverse of pad_sequence: a list of (L_i, *) tensors."""
    x = padded_sequences if batch_first else shape_ops.transpose(padded_sequences, 0, 1)
    return [x[i, :int(n)] for i, n in enumerate(_lengths(lengths))]


class PackedSequence(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Optional[Tensor] = None
    unsorted_indices: Optional[Tensor] = None

    def to(self, *args, **kwargs):
        data = self.data.to(*args, **kwargs)
        return self if data is self.data else self._replace(data=data)

    def double(self):
        return self.to(dt.float64)

    def float(self):
        return self.to(dt.float32)

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def _lengths(lengths):
    if isinstance(lengths, Tensor):
        value = lengths._value
        if not isinstance(value, np.ndarray):
            raise RuntimeError("pack_padded_sequence: `lengths` must be concrete values (a "
                               "list or a tensor outside the traced function)")
        return np.asarray(value, dtype=np.int64).reshape(-1)
    return np.asarray(list(lengths), dtype=np.int64).reshape(-1)


def _invert_permutation(perm):
    if perm is None:
        return None
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    return inv


def _pack(padded, lengths, sorted_idx):
    """Time-major padded (T, B, *) in the original batch order -> PackedSequence with
    `sorted_idx` (None: the batch is already sorted)."""
    order = np.arange(lengths.size) if sorted_idx is None else sorted_idx
    lens = lengths[order]
    batch_sizes = np.array([(lens > t).sum() for t in range(int(lens.max()))], dtype=np.int64)
    x = padded if sorted_idx is None else shape_ops.index_select(padded, 1, tensor(sorted_idx))
    steps = [x[t, :int(b)] for t, b in enumerate(batch_sizes)]
    data = shape_ops.cat(steps, 0) if len(steps) > 1 else steps[0]
    as_t = (lambda a: None if a is None else tensor(a))  # noqa: E731
    return PackedSequence(data, tensor(batch_sizes), as_t(sorted_idx),
                          as_t(_invert_permutation(sorted_idx)))


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch (T, B, *) (or (B, T, *)) of sequences with the given lengths."""
    lengths = _lengths(lengths)
    if lengths.size and lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    x = shape_ops.transpose(input, 0, 1) if batch_first else input
    if lengths.size != x.shape[1]:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{lengths.size} (batch_size={hint(x.shape[1])})")
    if lengths.max() > x.shape[0]:
        raise RuntimeError(f"pack_padded_sequence: a length ({lengths.max()}) exceeds the "
                           f"padded sequence length ({hint(x.shape[0])})")
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                               "to pack_padded_sequence and/or pack_sequence to sidestep this "
                               "requirement if you do not need ONNX exportability.")
        sorted_idx = None
    else:
        sorted_idx = np.argsort(-lengths, kind="stable")
    return _pack(x, lengths, sorted_idx)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Unpack to (padded (T, B, *) or (B, T, *), lengths int64) in the original order."""
    batch_sizes = _lengths(sequence.batch_sizes)
    longest = batch_sizes.size
    if total_length is not None:
        if total_length < longest:
            raise ValueError(f"Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {longest}")
        longest = total_length
    data, batch = sequence.data, int(batch_sizes[0])
    rows, start = [], 0
    for b in batch_sizes:
        step = data[start:start + int(b)]
        if b < batch:
            step = F.pad(step, [0, 0] * (data.ndim - 1) + [0, batch - int(b)],
                         value=padding_value)
        rows.append(step)
        start += int(b)
    padded = shape_ops.stack(rows, 0)
    if longest > batch_sizes.size:
        padded = F.pad(padded, [0, 0] * (padded.ndim - 1) + [0, longest - batch_sizes.size],
                       value=padding_value)
    lengths = np.array([(batch_sizes > i).sum() for i in range(batch)], dtype=np.int64)
    if sequence.unsorted_indices is not None:
        unsorted = _lengths(sequence.unsorted_indices)
        padded = shape_ops.index_select(padded, 1, tensor(unsorted))
        lengths = lengths[unsorted]
    if batch_first:
        padded = shape_ops.transpose(padded, 0, 1)
    return padded, tensor(lengths)


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of (L_i, *) tensors."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of (L_i, *) tensors of a PackedSequence, in the original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
