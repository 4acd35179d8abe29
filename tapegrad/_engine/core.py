"""The engine's compiled code as the layers above call it: op entry, the sweep, the
entries Python calls, and the helpers the op families' kernels build on. Each is defined
in the module of its responsibility:

- memory: storages, meta and tape rows, reference counts, the recording log;
- views: version counters, views and their regenerated history;
- loops: typed strided loops and broadcast shapes;
- grads: gradient buffers of rows and leaves;
- elementwise: the operand descriptors of the generated elementwise loops;
- creation: tensors the engine makes for Python (new, adopted, detached, copies);
- entry: recording an op and running its forward;
- sweep: the reverse sweep.

Everything is compiled once (cache=True) and reaches its tables through the ctx array's
addresses; per-op kernels are called through tables of function addresses, so none of
these modules grows with the number of ops.
"""
# ruff: noqa: F401  (this module re-exports)
from .memory import (KIND_META, contiguous_id, count_of, data_addr, decref, decref_row,
                     drain_queue, incref_meta, incref_row, is_contiguous, meta_contiguous,
                     meta_new, numel_of, release_id)
from .views import bump_version, bump_version_id, regen_views
from .loops import (_gather, aligned_contiguous_strides, aligned_strides, broadcast_shape,
                    copy_strided, gather_layout, input_id, make_output, set_outputs1,
                    transposed_tiles)
from .grads import edge_grad_addr, input_shape, out_numel, row_grad_addr
from .elementwise import contiguous_strides, grad_for_write, span, tangent_entry
from .creation import adopt, clone_entry, contiguous_copy, data_alias, detach, new_tensor
from .entry import inplace_entry, op_entry
from .sweep import (add_to_edge, grad_of_row, prune_entry, sweep, sweep_abort, sweep_resume,
                    take_leaf_hook_grad)
