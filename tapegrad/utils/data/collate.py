"""default_collate and default_convert: PyTorch's rules for turning a list of samples into
a batch (torch/utils/data/_utils/collate.py), type for type and message for message."""
import collections.abc
import copy
import re

import numpy as np

from ..._front.creation import tensor
from ..._front.dtype import float64
from ..._front.out_ops import stack
from ..._front.tensor import Tensor
from ..._front.utilities import as_tensor

# NumPy dtypes of strings and objects, which have no tensor counterpart
np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, "
    "dicts or lists; found {}"
)


def default_convert(data):
    """Convert each NumPy array (or NumPy scalar) in data to a tensor, recursing into
    mappings, namedtuples and sequences; anything else is returned unchanged. The collate
    function of a DataLoader without automatic batching (batch_size=None)."""
    elem_type = type(data)
    if isinstance(data, Tensor):
        return data
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_"):
        if (elem_type.__name__ == "ndarray"
                and np_str_obj_array_pattern.search(data.dtype.str) is not None):
            return data
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):      # a namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]     # a list, as PyTorch returns
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch, *, collate_fn_map=None):
    """Collate a batch by the type of its first element: the function collate_fn_map
    gives for that type (exact type first, then the first key it is an instance of),
    else mappings, namedtuples and sequences collated field by field; anything else is
    PyTorch's TypeError."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        def fields():
            return {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                    for key in elem}
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(fields())
                return clone
            return elem_type(fields())
        except TypeError:
            return fields()
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):      # a namedtuple
        return elem_type(*(collate(samples, collate_fn_map=collate_fn_map)
                           for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [collate(samples, collate_fn_map=collate_fn_map)
                    for samples in transposed]        # a list, as PyTorch returns
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, samples in enumerate(transposed):
                    clone[i] = collate(samples, collate_fn_map=collate_fn_map)
                return clone
            return elem_type([collate(samples, collate_fn_map=collate_fn_map)
                              for samples in transposed])
        except TypeError:
            return [collate(samples, collate_fn_map=collate_fn_map)
                    for samples in transposed]
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    """Tensors of one shape stacked along a new first dimension."""
    return stack(list(batch), 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    """NumPy arrays made tensors, then stacked (string and object arrays refused)."""
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return collate([as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    """NumPy scalars as one tensor of their dtype."""
    return as_tensor(np.asarray(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    """Python floats as a float64 tensor."""
    return tensor(list(batch), dtype=float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    """Python ints as an int64 tensor (bools, a subclass of int, as a bool tensor)."""
    return tensor(list(batch))


def collate_str_fn(batch, *, collate_fn_map=None):
    """Strings and bytes left as they are: the batch itself."""
    return batch


default_collate_fn_map = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch):
    """Put a list of samples together into a batch, as PyTorch's default_collate: tensors
    stacked along a new first dimension, NumPy arrays and scalars made tensors, Python
    ints an int64 tensor, floats a float64 tensor, strings and bytes left as a list;
    mappings, namedtuples and sequences collated field by field (a tuple gives a list)."""
    return collate(batch, collate_fn_map=default_collate_fn_map)
