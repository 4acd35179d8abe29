"""nn.utils.rnn: padding and packing variable-length sequences, as PyTorch's.

Every tensor result is one gather (`x[positions]`, IndexBackward0) over the sequences'
rows, so gradients flow back to each sequence; the positions are computed in NumPy from
the lengths (which are values, so a compiled replay falls back to eager around them)."""
import collections

import numpy as np

from ..._front import creation as _creation
from ..._front import dtype as D
from ..._front.tensor import Tensor, _numpy_view

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]

_Fields = collections.namedtuple("PackedSequence_",
                                 ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])


def _ints(t):
    """A CPU int64 tensor's values as a NumPy int64 array."""
    return np.asarray(_numpy_view(t), dtype=np.int64).reshape(-1)


def _long(values):
    return _creation.tensor(np.asarray(values, dtype=np.int64).reshape(-1))


class PackedSequence(_Fields):
    """Holds the data and batch sizes of a packed batch of sequences (made by
    pack_padded_sequence / pack_sequence): data has the elements of every sequence, step
    by step, batch_sizes the number of sequences at each step; sorted_indices /
    unsorted_indices map the original batch order to the order by decreasing length."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is not None:
            if isinstance(batch_sizes, Tensor) and batch_sizes.dtype.is_floating_point:
                raise TypeError("batch_sizes should always be on CPU. Instances of "
                                "PackedSequence should never be created manually. They "
                                "should be instantiated by functions like "
                                "pack_sequence and pack_padded_sequences in "
                                "nn.utils.rnn. https://pytorch.org/docs/stable/nn.html#"
                                "torch.nn.utils.rnn.pack_sequence")
            return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)
        if not isinstance(data, (list, tuple)) or len(data) != 2:
            raise TypeError("PackedSequence: data must be a tensor with batch_sizes, or a "
                            "(data, batch_sizes) pair")
        return super().__new__(cls, data[0], data[1], sorted_indices, unsorted_indices)

    def _with_data(self, data):
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def to(self, *args, **kwargs):
        """Moves/converts data (as Tensor.to); the index tensors stay as they are."""
        data = self.data.to(*args, **kwargs)
        return self if data is self.data else self._with_data(data)

    def cpu(self, *args, **kwargs):
        """The sequence on the CPU (it is there already)."""
        return self

    def cuda(self, *args, **kwargs):
        """Refused as Tensor.cuda is: tapegrad runs on the CPU."""
        return self._with_data(self.data.cuda(*args, **kwargs))

    def double(self):
        """data as float64."""
        return self.to(dtype=D.float64)

    def float(self):
        """data as float32."""
        return self.to(dtype=D.float32)

    def long(self):
        """data as int64."""
        return self.to(dtype=D.int64)

    def int(self):
        """data as int32 (refused as tapegrad refuses int32 tensors)."""
        return self.to(dtype=D.int32)

    def short(self):
        """data as int16 (refused as tapegrad refuses int16 tensors)."""
        return self.to(dtype=D.int16)

    def half(self):
        """data as float16 (refused as tapegrad refuses float16 tensors)."""
        return self.to(dtype=D.float16)

    def byte(self):
        """data as uint8 (refused as tapegrad refuses uint8 tensors)."""
        return self.to(dtype=D.uint8)

    def char(self):
        """data as int8 (refused as tapegrad refuses int8 tensors)."""
        return self.to(dtype=D.int8)

    @property
    def is_cuda(self):
        """False: tapegrad tensors live on the CPU."""
        return False

    def is_pinned(self):
        """False: no pinned memory on tapegrad's CPU."""
        return False


def invert_permutation(permutation):
    """The inverse of a permutation given as an int64 tensor (None stays None)."""
    if permutation is None:
        return None
    p = _ints(permutation)
    inv = np.empty_like(p)
    inv[p] = np.arange(p.size, dtype=np.int64)
    return _long(inv)


def _lengths_array(lengths):
    if isinstance(lengths, Tensor):
        if lengths.ndim != 1:
            kind = {"float32": "Float", "float64": "Double", "int64": "Long",
                    "bool": "Bool"}[str(lengths.dtype).split(".")[-1]]
            raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got "
                               f"{lengths.ndim}D cpu {kind} tensor")
        return np.asarray(_numpy_view(lengths)).astype(np.int64).reshape(-1)
    return np.asarray([int(v) for v in lengths], dtype=np.int64)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded batch (T x B x *, or B x T x * with batch_first) of sequences of
    the given lengths; with enforce_sorted=False the lengths need not be decreasing (the
    batch is sorted, and the permutation kept in the result)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"pack_padded_sequence(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    lens = _lengths_array(lengths)
    if enforce_sorted:
        sorted_indices = None
        order = np.arange(lens.size, dtype=np.int64)
    else:
        order = np.argsort(-lens, kind="stable").astype(np.int64)
        sorted_indices = _long(order)
        lens = lens[order]
    if input.ndim < 2:
        raise RuntimeError(f"Dimension out of range (expected to be in range of [-{max(input.ndim, 1)}, "
                           f"{max(input.ndim, 1) - 1}], but got 1)")
    B = input.shape[0] if batch_first else input.shape[1]
    T = input.shape[1] if batch_first else input.shape[0]
    if lens.size != B:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{lens.size} (batch_size={B})")
    if lens.size and lens.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if enforce_sorted and np.any(lens[1:] > lens[:-1]):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                           "pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")
    if lens.size and lens.max() > T:
        raise RuntimeError(f"pack_padded_sequence: a length ({int(lens.max())}) exceeds the "
                           f"sequence dimension of the input ({T})")
    steps = int(lens[0]) if lens.size else 0
    batch_sizes = np.array([(lens > t).sum() for t in range(steps)], dtype=np.int64)
    rows = []
    for t in range(steps):
        b = order[:batch_sizes[t]]
        rows.append(b * T + t if batch_first else t * B + b)
    pos = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    flat = input.reshape(B * T, *input.shape[2:])
    data = flat[_long(pos)]
    return PackedSequence(data, _long(batch_sizes), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded batch, lengths), the batch in its
    original order, padded with padding_value to the longest length (or total_length)."""
    bs = _ints(sequence.batch_sizes)
    T = bs.size
    if total_length is not None:
        if total_length < T:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {T}")
        T = int(total_length)
    B = int(bs[0]) if bs.size else 0
    data = sequence.data
    n = data.shape[0]
    offs = np.concatenate([[0], np.cumsum(bs)]).astype(np.int64)
    lens_sorted = np.array([(bs > b).sum() for b in range(B)], dtype=np.int64)
    unsorted = (np.arange(B, dtype=np.int64) if sequence.unsorted_indices is None
                else _ints(sequence.unsorted_indices))
    pos = np.full((T, B), n, dtype=np.int64)            # n: the padding row
    for t in range(bs.size):
        pos[t, :bs[t]] = offs[t] + np.arange(bs[t])
    pos = pos[:, unsorted]                              # (original batch order)
    if batch_first:
        pos = pos.T
    pad = _creation.full((1, *data.shape[1:]), padding_value, dtype=data.dtype)
    ext = _creation_cat(data, pad)
    out = ext[_long(pos.reshape(-1))].reshape(*pos.shape, *data.shape[1:])
    return out, _long(lens_sorted[unsorted])


def _creation_cat(a, b):
    from ..._front.indexing import cat
    return cat([a, b])


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stacks a list of (L_i x *) tensors into one (max L x B x *) tensor (B x max L x *
    with batch_first), padding with padding_value at the end (or the start with
    padding_side="left")."""
    if isinstance(sequences, Tensor):
        sequences = list(sequences.unbind(0))
    sequences = list(sequences)
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    trailing = tuple(sequences[0].shape[1:])
    for s in sequences[1:]:
        if tuple(s.shape[1:]) != trailing:
            for d, (a, b) in enumerate(zip(trailing, s.shape[1:])):
                if a != b:
                    raise RuntimeError(f"The size of tensor a ({a}) must match the size of "
                                       f"tensor b ({b}) at non-singleton dimension {d + 1}")
            raise RuntimeError(f"The size of tensor a must match the size of tensor b: "
                               f"{list(trailing)} vs {list(s.shape[1:])}")
    lens = np.array([s.shape[0] for s in sequences], dtype=np.int64)
    T = int(lens.max())
    B = len(sequences)
    n = int(lens.sum())
    starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    pos = np.full((T, B), n, dtype=np.int64)
    for b in range(B):
        k = int(lens[b])
        first = 0 if padding_side == "right" else T - k
        pos[first:first + k, b] = starts[b] + np.arange(k)
    if batch_first:
        pos = pos.T
    from ..._front.indexing import cat
    dt = sequences[0].dtype
    pad = _creation.full((1, *trailing), padding_value, dtype=dt)
    ext = cat([s.reshape(-1, *trailing) if s.ndim else s.reshape(1) for s in sequences]
              + [pad])
    return ext[_long(pos.reshape(-1))].reshape(*pos.shape, *trailing)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The inverse of pad_sequence: the list of sequences, each cut to its length."""
    lens = _lengths_array(lengths)
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[b][:int(n)] for b, n in enumerate(lens)]


def pack_sequence(sequences, enforce_sorted=True):
    """Packs a list of (L_i x *) tensors (by decreasing length unless enforce_sorted is
    False)."""
    lengths = [v.size(0) for v in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The inverse of pack_sequence: the list of sequences."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
