"""DistributedDataParallel: data-parallel training over tapegrad.distributed (MPI), with
PyTorch's torch.nn.parallel.DistributedDataParallel arguments and behaviour.

At wrap time every rank checks that all ranks hold the same parameters (count, shapes,
dtypes) and takes rank 0's parameters and buffers. A backward() that reaches the wrapped
module's parameters ends with each parameter's .grad averaged over the ranks, reduced in
buckets (PyTorch's bucket_cap_mb, 25 MB by default, a 1 MB first bucket, filled in
reverse parameter order).

Where the reduction runs: tapegrad's backward is one compiled sweep, and Python sees the
gradients only after it, so communication cannot overlap the sweep as in PyTorch (where
each parameter's hook fires as its gradient is made). Instead a callback registered in
tapegrad.autograd.function.POST_BACKWARD runs after each sweep: it reads which leaves the
sweep reached (swept_leaves), and bucket by bucket scales each gradient by 1 / world size
(as PyTorch's reducer) and all-reduces it in place. The all-reduces are blocking: with the
sweep over nothing is left to overlap them with, Open MPI moves a non-blocking collective
forward only inside MPI calls, and for these sizes the blocking call is the faster. The reduction is a host
call (tapegrad._engine.state.host_call), so a training step compiled with
tapegrad.compile replays it at the same point of the step, in one compiled call per
step.
"""
import contextlib
import warnings
import weakref

import numpy as np

from ... import distributed as dist
from ..._engine.state import GRAD_MODE, RECORDING, host_call
from ..._front.tensor import _array_of
from ..._front.creation import zeros
from ...autograd.function import POST_BACKWARD, swept_leaves
from ..module import Module

__all__ = ["DistributedDataParallel"]

_DEFAULT_BUCKET_CAP_MB = 25
_DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024       # (torch.distributed's)
_MB_TO_BYTES = 1024 * 1024


def _unused_error(rank, unmarked, find_unused):
    """PyTorch's reducer error for a backward that left parameters without gradients."""
    msg = ("Expected to have finished reduction in the prior iteration before starting a "
           "new one. This error indicates that your module has parameters that were not "
           "used in producing loss. ")
    if not find_unused:
        msg += ("You can enable unused parameter detection by passing the keyword argument "
                "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel"
                "`, and by \n")
    else:
        msg += ("Since `find_unused_parameters=True` is enabled, this likely  means that not "
                "all `forward` outputs participate in computing loss. You can fix this by ")
    msg += ("making sure all `forward` function outputs participate in calculating loss. \n"
            "If you already have done the above, then the distributed data parallel module "
            "wasn't able to locate the output tensors in the return value of your module's "
            "`forward` function. Please include the loss function and the structure of the "
            "return value of `forward` of your module when reporting this issue (e.g. list, "
            "dict, iterable).\nParameter indices which did not receive grad for rank "
            f"{rank}: {' '.join(str(i) for i in unmarked)}\n In addition, you can set the "
            "environment variable TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL to print "
            "out information about which particular parameters did not receive gradient on "
            "this rank as part of this error")
    return RuntimeError(msg)


def _bucket_assignment(params, limits):
    """Lists of parameter indices, PyTorch's compute_bucket_assignment_by_size over the
    parameters in reverse order (the order their gradients are ready in a model used in
    definition order, which is the order PyTorch rebuilds its buckets in after the first
    iteration): one running bucket per dtype, closed once it holds `limit` bytes, the
    limits taken in turn (the last one repeats)."""
    result, open_, at = [], {}, {}
    for i in reversed(range(len(params))):
        p = params[i]
        key = p.dtype
        b = open_.setdefault(key, [[], 0])
        b[0].append(i)
        b[1] += p.numel() * p.element_size()
        k = at.setdefault(key, 0)
        if b[1] >= limits[k]:
            result.append(b[0])
            open_[key] = [[], 0]
            at[key] = min(k + 1, len(limits) - 1)
    result += [b[0] for b in open_.values() if b[0]]
    return result


class _Bucket:
    """The parameters (indices) of one dtype whose gradients are reduced together, as one
    of PyTorch's buckets."""

    def __init__(self, params, idx):
        self.idx = list(idx)
        self.dtype = params[self.idx[0]].dtype


class _Reduction:
    """One backward's gradient averaging over some buckets: the host call a compiled
    replay makes at the same point of each step (so it reads the .grad tensors the step
    made, the ones the optimizer then reads)."""

    def __init__(self, ddp, buckets, local_used):
        self.ddp, self.buckets, self.local_used = ddp, buckets, local_used

    def __call__(self):
        self.ddp._reduce(self.buckets, self.local_used)


class _BufferSync:
    """The broadcast of rank 0's buffers before a forward (a host call, see _Reduction)."""

    def __init__(self, ddp):
        self.ddp = ddp

    def __call__(self):
        if self.ddp.require_forward_param_sync:
            self.ddp._sync_buffers()


class _Callback:
    """The POST_BACKWARD entry of one DistributedDataParallel (held weakly: a dropped
    wrapper leaves the list at its first callback)."""

    def __init__(self, ddp):
        self.ref = weakref.ref(ddp)

    def __call__(self):
        ddp = self.ref()
        if ddp is None:
            if self in POST_BACKWARD:
                POST_BACKWARD.remove(self)
            return
        ddp._after_backward()


class DistributedDataParallel(Module):
    """Data parallelism over the ranks of a process group (tapegrad.distributed, MPI),
    as PyTorch's torch.nn.parallel.DistributedDataParallel: wrap the model on every rank
    (launched with `mpirun -n N python train.py`), call the wrapper in place of the
    model, and each backward() that reaches its parameters leaves their .grad averaged
    over the ranks. The wrapped model is `.module`; state dict keys carry the "module."
    prefix. With one rank it does no communication.

    Differences from PyTorch: the all-reduces start after the backward sweep rather than
    during it (buckets are launched one after the other as they are filled, then waited
    for); buckets are built once, in reverse parameter order; device_ids and
    output_device are refused as PyTorch refuses them for CPU modules; device_mesh,
    mixed_precision, delay_all_reduce_named_params, gradient_as_bucket_view=True,
    skip_all_reduce_unused_params=True, bucket_cap_mb_list, join() and communication
    hooks are not supported (NotImplementedError); batched_grad_copy changes nothing
    (gradients are copied per parameter either way); static_graph=True detects unused
    parameters at every backward, as find_unused_parameters=True does."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=None, init_sync=True, process_group=None,
                 bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None,
                 mixed_precision=None, device_mesh=None, skip_all_reduce_unused_params=False,
                 bucket_cap_mb_list=None, batched_grad_copy=False, forward_sync_buffers=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be a tapegrad.nn.Module, "
                            f"got {type(module).__name__}")
        if (delay_all_reduce_named_params is not None) != (param_to_hook_all_reduce is not None):
            raise ValueError("delay_all_reduce_named_params and param_to_hook_all_reduce "
                             "need to be set at the same time.")
        if process_group and device_mesh is not None:
            raise RuntimeError("Cannot specify both process_group and device_mesh arguments.")
        for name, value, default in (
                ("device_mesh", device_mesh, None), ("mixed_precision", mixed_precision, None),
                ("delay_all_reduce_named_params", delay_all_reduce_named_params, None),
                ("gradient_as_bucket_view", gradient_as_bucket_view, False),
                ("skip_all_reduce_unused_params", skip_all_reduce_unused_params, False),
                ("bucket_cap_mb_list", bucket_cap_mb_list, None)):
            if value is not default and value != default:
                raise NotImplementedError(
                    f"DistributedDataParallel({name}={value!r}) is not supported by tapegrad")
        if process_group is None and not dist.is_initialized():
            raise ValueError("Default process group has not been initialized, please make "
                             "sure to call init_process_group.")
        ignore = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))
        self.parameters_to_ignore = ignore
        module_params = [p for n, p in module.named_parameters() if n not in ignore]
        if not any(p.requires_grad for p in module_params):
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("device_ids can only be None or contain a single element.")
        if device_ids or output_device:
            devices = {p.device for p in module_params}
            raise ValueError(
                "DistributedDataParallel device_ids and output_device arguments only work "
                "with single-device/multiple-device GPU modules or CPU modules, but got "
                f"device_ids {device_ids}, output_device {output_device}, and module "
                f"parameters {devices}.")
        self.process_group = process_group
        self.device_ids = None
        self.output_device = None
        self.device_type = "cpu"
        self.is_multi_device_module = False
        self.static_graph = bool(static_graph)
        self.dim = dim
        self.module = module
        self.device = module_params[0].device
        if broadcast_buffers is not None:
            if forward_sync_buffers is not None:
                warnings.warn(
                    "Both `broadcast_buffers` and `forward_sync_buffers` were specified. "
                    "`broadcast_buffers` is deprecated and its value is ignored when "
                    "`forward_sync_buffers` is provided.", FutureWarning, stacklevel=2)
            else:
                warnings.warn(
                    "`broadcast_buffers` is deprecated. Use `forward_sync_buffers` instead. "
                    "IMPORTANT: unlike `broadcast_buffers=False`, `forward_sync_buffers=False` "
                    "still syncs buffers at init. If you rely on buffers NOT being synced at "
                    "init (e.g. rank-local buffers), keep using `broadcast_buffers=False` "
                    "until `init_sync_buffers` is available.", FutureWarning, stacklevel=2)
        if forward_sync_buffers is not None:
            self.forward_sync_buffers = bool(forward_sync_buffers)
            init_sync_buffers = True
        else:
            self.forward_sync_buffers = bool(broadcast_buffers if broadcast_buffers is not None
                                             else True)
            init_sync_buffers = self.forward_sync_buffers
        self.find_unused_parameters = bool(find_unused_parameters)
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self.gradient_as_bucket_view = False
        self.batched_grad_copy = bool(batched_grad_copy)
        self.mixed_precision = None
        if check_reduction:
            warnings.warn("The `check_reduction` argument in `DistributedDataParallel` module "
                          "is deprecated. Please avoid using it.", FutureWarning, stacklevel=2)
        cap_mb = _DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        self.bucket_bytes_cap = int(cap_mb * _MB_TO_BYTES)
        first = _DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.bucket_bytes_cap
        self._bucket_limits = ([first, self.bucket_bytes_cap] if first < self.bucket_bytes_cap
                               else [self.bucket_bytes_cap])
        self.broadcast_bucket_size = 250 * 1024 * 1024

        self._rank = dist.get_rank(process_group)
        self._world = dist.get_world_size(process_group)
        self._names, self._params = self._build_params_for_reducer()
        if init_sync:
            self._verify_params_across_processes()
            self._sync_module_states(init_sync_buffers)
        self._init_reducer()

    def _init_reducer(self):
        self._build_buckets()
        self._armed = False                 # a synchronised forward waits for its backward
        self._marked = np.zeros(len(self._params), bool)
        self._done = set()                  # buckets reduced since that forward
        self._unfinished = None             # (unmarked indices) of the last iteration
        self._eager_sync = None             # set while the eager path makes a host call
        self._reductions = {}
        self._buffer_sync = _BufferSync(self)
        self._callback = _Callback(self)
        POST_BACKWARD.append(self._callback)

    _REDUCER_STATE = ("_buckets", "_layout", "_inv", "_armed", "_marked", "_done",
                      "_unfinished", "_eager_sync", "_reductions", "_buffer_sync",
                      "_callback", "_rank", "_world", "_names", "_params")

    def __getstate__(self):
        """Pickling (PyTorch's rule: with the default process group only): the module
        and the settings; the reducer is rebuilt where it is unpickled."""
        if self.process_group is not None:
            raise RuntimeError("DDP Pickling/Unpickling are only supported when using DDP "
                               "with the default process group. That is, when you have "
                               "called init_process_group and have not passed process_group "
                               "argument to DDP constructor")
        state = dict(self.__dict__)
        for k in self._REDUCER_STATE:
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if not dist.is_initialized():
            raise RuntimeError("DDP Pickling/Unpickling are only supported when using DDP "
                               "with the default process group. That is, when you have "
                               "called init_process_group and have not passed process_group "
                               "argument to DDP constructor")
        self._rank = dist.get_rank()
        self._world = dist.get_world_size()
        self._names, self._params = self._build_params_for_reducer()
        self._init_reducer()

    # ------------------------------------------------------------ set-up
    def _build_params_for_reducer(self):
        """(names, parameters) that require grad, in module order, shared ones once."""
        names, params, seen = [], [], set()
        for mname, m in self.module.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                full = f"{mname}.{pname}" if mname else pname
                if p.requires_grad and full not in self.parameters_to_ignore and \
                        id(p) not in seen:
                    seen.add(id(p))
                    names.append(full)
                    params.append(p)
        return names, params

    def _build_buckets(self):
        self._buckets = [_Bucket(self._params, idx)
                         for idx in _bucket_assignment(self._params, self._bucket_limits)]
        self._layout = self._param_layout()
        self._inv = {b.dtype: np.asarray(1.0 / self._world,
                                         _array_of(self._params[b.idx[0]]).dtype)
                     for b in self._buckets}

    def _param_layout(self):
        return tuple((p.dtype, tuple(p.shape)) for p in self._params)

    def _verify_params_across_processes(self):
        """Every rank's parameter count, shapes and dtypes against every other's; a
        mismatch raises on every rank, naming the rank and the parameter."""
        if self._world == 1:
            return
        meta = [len(self._params)]
        for p in self._params:
            meta += [_dtype_code(p.dtype), p.dim()] + list(p.shape)
        n = zeros(1, dtype=_int64())
        _array_of(n)[0] = len(meta)
        counts = [zeros(1, dtype=_int64()) for _ in range(self._world)]
        dist.all_gather(counts, n, group=self.process_group)
        width = max(int(_array_of(c)[0]) for c in counts)
        mine = zeros(width, dtype=_int64())
        _array_of(mine)[:len(meta)] = meta
        every = [zeros(width, dtype=_int64()) for _ in range(self._world)]
        dist.all_gather(every, mine, group=self.process_group)
        rows = [_array_of(t).tolist() for t in every]
        nparams = [r[0] for r in rows]
        for q, m in enumerate(nparams):
            if m != nparams[self._rank]:
                raise RuntimeError(
                    f"DDP expects same model across all ranks, but Rank {self._rank} has "
                    f"{nparams[self._rank]} params, while rank {q} has inconsistent {m} "
                    "params.")
        described = []
        for r in rows:
            pos, out = 1, []
            for _ in range(r[0]):
                code, nd = r[pos], r[pos + 1]
                out.append((code, tuple(r[pos + 2:pos + 2 + nd])))
                pos += 2 + nd
            described.append(out)
        for q in range(1, self._world):
            for i, (a, b) in enumerate(zip(described[0], described[q])):
                if a[1] != b[1]:
                    raise RuntimeError(
                        f"DDP expects same model across all ranks, but params[{i}] "
                        f"({self._names[i]}) in rank {q} with sizes {list(b[1])} appears not "
                        f"to match sizes of the same param in process 0 ({list(a[1])}).")
                if a[0] != b[0]:
                    raise RuntimeError(
                        f"DDP expects same model across all ranks, but params[{i}] "
                        f"({self._names[i]}) in rank {q} has dtype {_dtype_name(b[0])}, "
                        f"while in process 0 it has dtype {_dtype_name(a[0])}.")

    def _module_buffers(self):
        return [b for n, b in self.module.named_buffers()
                if n not in self.parameters_to_ignore]

    def _sync_module_states(self, buffers):
        """Rank 0's parameters (and buffers) everywhere."""
        if self._world == 1:
            return
        tensors = [p.detach() for p in self._all_params()]
        if buffers:
            tensors += self._module_buffers()
        for t in tensors:
            dist.broadcast(t, 0, group=self.process_group)

    def _all_params(self):
        return [p for n, p in self.module.named_parameters()
                if n not in self.parameters_to_ignore]

    def _sync_buffers(self):
        """Rank 0's buffers everywhere (before a forward, as PyTorch's default)."""
        if self._world == 1:
            return
        with dist._unchecked():         # (their shapes were checked by the wrap's broadcast)
            for b in self._module_buffers():
                dist.broadcast(b, 0, group=self.process_group)

    # ------------------------------------------------------------ forward
    def forward(self, *inputs, **kwargs):
        """Run the wrapped module (after broadcasting rank 0's buffers, when they are
        synchronised); under grad mode outside no_sync(), the next backward that reaches
        the parameters averages their gradients."""
        grad_sync = GRAD_MODE.on and self.require_backward_grad_sync
        if GRAD_MODE.on and self._unfinished is not None:
            raise _unused_error(self._rank, self._unfinished, self.find_unused_parameters)
        if self._layout != self._param_layout():        # (Module.to(dtype) since)
            self._build_buckets()
        if (self._world > 1 and self.forward_sync_buffers and self._module_buffers()
                and (self.require_forward_param_sync or RECORDING[0] is not None)):
            host_call(self._buffer_sync)
        output = self.module(*inputs, **kwargs)
        self.require_forward_param_sync = bool(grad_sync)
        if grad_sync:
            self._armed = True
            self._marked[:] = False
            self._done = set()
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """Inside this context, forwards and their backwards do not synchronise: the
        gradients accumulate on each rank, and the first synchronised backward after it
        averages the accumulated sums."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ------------------------------------------------------------ backward
    def _after_backward(self):
        """After a backward sweep (POST_BACKWARD): if it reached the parameters, reduce the
        buckets whose parameters all have their gradients now (all of them with unused
        parameter detection), as a host call."""
        params = self._params
        ids = np.fromiter((p._i for p in params), np.int64, len(params))
        hit = np.isin(ids, swept_leaves())
        if not hit.any():
            return
        recording = RECORDING[0] is not None
        armed = self._armed
        if not armed and not recording:
            return                  # (no synchronised forward: gradients stay local)
        if self.find_unused_parameters or self.static_graph:
            buckets = tuple(range(len(self._buckets)))
            local_used = hit.copy()
            if armed:
                self._armed = False
        else:
            marked = self._marked | hit if armed else hit
            buckets = tuple(k for k, b in enumerate(self._buckets)
                            if k not in self._done and marked[b.idx].all())
            local_used = None
            if armed:
                self._marked = marked
                self._done.update(buckets)
                if marked.all():
                    self._armed = False
                    self._unfinished = None
                else:
                    self._unfinished = np.flatnonzero(~marked).tolist()
        if self._world == 1:
            return                  # (nothing to average: no host call, no communication)
        key = (buckets, None if local_used is None else local_used.tobytes())
        fn = self._reductions.get(key)
        if fn is None:
            fn = self._reductions[key] = _Reduction(self, buckets, local_used)
        self._eager_sync = armed
        try:
            host_call(fn)
        finally:
            self._eager_sync = None

    def _reduce(self, buckets, local_used):
        """Average the gradients of the parameters of `buckets` over the ranks, in place
        (times 1 / world size, then summed). With unused parameter detection, the ranks first agree which parameters any rank used: the others'
        .grad stay as they are (None stays None)."""
        sync = self._eager_sync
        if sync is None:                # (a compiled replay: the flag now decides)
            sync = self.require_backward_grad_sync
            self.require_forward_param_sync = bool(sync)
        if not sync or self._world == 1 or not buckets:
            return
        group = self.process_group
        params = self._params
        grads = [p.grad for p in params]
        used = None
        if local_used is not None:
            u = zeros(len(params), dtype=_int64())
            _array_of(u)[:] = local_used
            with dist._unchecked():     # (the ranks' buckets were verified at wrap time)
                dist.all_reduce(u, op=dist.ReduceOp.MAX, group=group)
            used = _array_of(u).astype(bool)
        # Bucket by bucket, each gradient is scaled and all-reduced where it is (.grad is
        # contiguous): no copies into a flat buffer and back, which cost more than the
        # transfer. The all-reduces are blocking: nothing is left to overlap them with
        # (the sweep is over, and Open MPI moves a non-blocking collective forward only
        # inside MPI calls), and for these sizes the blocking call is the faster.
        for k in buckets:
            b = self._buckets[k]
            if used is not None and not used[b.idx].any():
                continue                # (unused on every rank: every rank skips it)
            inv = self._inv[b.dtype]
            for i in b.idx:
                if used is not None and not used[i]:
                    continue
                g = grads[i]
                if g is None:           # used on another rank only: the average arrives
                    p = params[i]
                    g = zeros(p.shape, dtype=p.dtype)
                    p.grad = g
                a = _array_of(g)
                np.multiply(a, inv, out=a)
                with dist._unchecked():
                    dist.all_reduce(g, op=dist.ReduceOp.SUM, group=group)

    # ------------------------------------------------------------ refused
    def join(self, divide_by_initial_world_size=True, enable=True,
             throw_on_early_termination=False):
        """Not supported by tapegrad (uneven inputs): raises NotImplementedError."""
        raise NotImplementedError("DistributedDataParallel.join() is not supported by "
                                  "tapegrad: give every rank the same number of batches "
                                  "(DistributedSampler(drop_last=True))")

    def register_comm_hook(self, state, hook):
        """Not supported by tapegrad: raises NotImplementedError."""
        raise NotImplementedError("DistributedDataParallel.register_comm_hook() is not "
                                  "supported by tapegrad")

    @property
    def broadcast_buffers(self):
        """Whether rank 0's buffers are broadcast before each synchronised forward
        (PyTorch's deprecated name of forward_sync_buffers)."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value):
        self.forward_sync_buffers = value


def _int64():
    from ..._front.dtype import int64
    return int64


_DTYPES = ("float32", "float64", "int64", "bool")


def _dtype_code(dt):
    name = str(dt).rpartition(".")[2]
    return _DTYPES.index(name) if name in _DTYPES else len(_DTYPES)


def _dtype_name(code):
    return f"tapegrad.{_DTYPES[code]}" if code < len(_DTYPES) else "another dtype"
