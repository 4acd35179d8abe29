"""torch.distributed's process groups and collectives, on MPI through mpi4py.

Every rank is a process started by `mpirun -n N python script.py`; init_process_group
(backend="mpi") initialises MPI (MPI_Init_thread, asking for MPI_THREAD_MULTIPLE) unless
the program did already, and the default group is a duplicate of MPI_COMM_WORLD.

No copies: a contiguous tensor's memory is handed to MPI as it is (a NumPy view at its
address, MPI.IN_PLACE where the result overwrites the input). A non-contiguous tensor is
copied into a contiguous buffer and the result copied back (documented; a tensor whose
elements overlap, an expanded one, is refused). Collectives that write a tensor bump its
version counter, so a tensor autograd saved and a collective overwrote is caught at
backward (PyTorch's gloo does not bump it: tapegrad is stricter there).

Checks: before the data moves, the ranks exchange a small description of their call
(the collective, shapes, dtypes, op, root) and every rank raises the same RuntimeError,
naming each rank's arguments, when they disagree; a rank whose arguments are wrong by
themselves (a non-tensor, a bad root rank, a list of the wrong length) raises its own
error and the others a RuntimeError naming it, instead of waiting forever for it. Internal
callers that verified the shapes once (DDP's buckets) skip the exchange with
`_unchecked()`.

mpi4py is imported at init_process_group, never at `import tapegrad`."""
import atexit
import datetime
import enum
import importlib.util
import sys
import threading
import warnings

import numpy as np

from .._front.dtype import bool_, float32, float64, int64
from .._front.promotion import bump_version
from .._front.tensor import Tensor, _numpy_view

__all__ = ["Backend", "GroupMember", "ProcessGroup", "ReduceOp", "Work", "all_gather",
           "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_to_all",
           "all_to_all_single", "barrier", "broadcast", "broadcast_object_list",
           "destroy_process_group", "gather", "get_backend", "get_global_rank", "get_group_rank",
           "get_process_group_ranks", "get_rank", "get_world_size", "group", "init_process_group",
           "irecv", "is_available", "is_gloo_available", "is_initialized", "is_mpi_available",
           "is_nccl_available", "is_torchelastic_launched", "isend", "new_group", "recv", "reduce",
           "reduce_scatter", "reduce_scatter_tensor", "scatter", "send"]

_NOT_INIT = ("Default process group has not been initialized, please make sure to call "
             "init_process_group.")


# ------------------------------------------------------------------ reduce ops
class ReduceOp:
    """The reduction of all_reduce, reduce, reduce_scatter: ReduceOp.SUM, AVG, PRODUCT,
    MIN, MAX, BAND, BOR, BXOR (PREMUL_SUM, NCCL's, is refused), as PyTorch's: each is a
    ReduceOp.RedOpType member."""

    class RedOpType(enum.IntEnum):
        """PyTorch's reduction codes (their values are PyTorch's)."""
        SUM = 0
        AVG = 1
        PRODUCT = 2
        MIN = 3
        MAX = 4
        BAND = 5
        BOR = 6
        BXOR = 7
        PREMUL_SUM = 8

    SUM = RedOpType.SUM
    AVG = RedOpType.AVG
    PRODUCT = RedOpType.PRODUCT
    MIN = RedOpType.MIN
    MAX = RedOpType.MAX
    BAND = RedOpType.BAND
    BOR = RedOpType.BOR
    BXOR = RedOpType.BXOR
    PREMUL_SUM = RedOpType.PREMUL_SUM


class Backend(str):
    """A backend name, lower-cased, as PyTorch's Backend: Backend.MPI is the one tapegrad
    has; GLOO, NCCL, UCC and XCCL are named so scripts that mention them import."""
    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    UCC = "ucc"
    MPI = "mpi"
    XCCL = "xccl"

    def __new__(cls, name):
        if not isinstance(name, str):
            raise ValueError(f"Backend constructor parameter must be string-ish, "
                             f"but got: {type(name)}")
        return str.__new__(cls, name.lower())


_OTHER_BACKENDS = ("gloo", "nccl", "ucc", "xccl", "cuda", "cpu")


# ------------------------------------------------------------------ MPI and state
class _State:
    mpi = None                  # the mpi4py.MPI module, once imported
    we_initialised = False      # MPI_Init was ours: we finalise it at exit
    world = None                # the default ProcessGroup
    groups = []                 # every live ProcessGroup (the default one first)
    excepthook = None


_TLS = threading.local()        # .unchecked: skip the metadata exchange


class _unchecked:
    """with _unchecked(): collectives skip the ranks' metadata exchange (for internal
    callers whose shapes and dtypes were verified once, such as DDP's buckets). A bad
    argument still raises, but only on the rank that has it."""

    def __enter__(self):
        self._old = getattr(_TLS, "unchecked", False)
        _TLS.unchecked = True
        return self

    def __exit__(self, *exc):
        _TLS.unchecked = self._old
        return False


def _checking():
    return not getattr(_TLS, "unchecked", False)


def _import_mpi():
    """mpi4py.MPI, without letting its import initialise MPI (we do, in
    init_process_group, with the thread level we want)."""
    if _State.mpi is None:
        if importlib.util.find_spec("mpi4py") is None:
            raise RuntimeError("tapegrad.distributed needs mpi4py (pip install mpi4py, or "
                               "pip install 'tapegrad[distributed]') and an MPI library "
                               "such as Open MPI (apt-get install openmpi-bin "
                               "libopenmpi-dev)")
        import mpi4py
        if "mpi4py.MPI" not in sys.modules:
            mpi4py.rc.initialize = False
            mpi4py.rc.finalize = False
        from mpi4py import MPI
        _State.mpi = MPI
    return _State.mpi


def _finalise():
    MPI = _State.mpi
    if MPI is not None and _State.we_initialised and MPI.Is_initialized() \
            and not MPI.Is_finalized():
        for g in list(_State.groups):
            g._free()
        MPI.Finalize()


def _abort_on_uncaught(exc_type, exc, tb):
    """An uncaught exception on one rank ends the whole job (MPI_Abort) after the usual
    traceback, instead of leaving the other ranks waiting in a collective forever."""
    hook = _State.excepthook or sys.__excepthook__
    hook(exc_type, exc, tb)
    MPI = _State.mpi
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized() and \
            MPI.COMM_WORLD.Get_size() > 1:
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


# ------------------------------------------------------------------ groups
class ProcessGroup:
    """A set of ranks that run collectives together (an MPI communicator): the default
    group (GroupMember.WORLD) holds every rank; new_group makes others."""

    def __init__(self, comm, ranks, name):
        self._comm = comm               # collectives and the user's send/recv
        self._p2p = comm.Dup()          # the library's own point-to-point messages
        self._ranks = list(ranks)       # the global rank of each group rank
        self._name = name
        _State.groups.append(self)

    def rank(self):
        """This process's rank in the group."""
        return self._comm.Get_rank()

    def size(self):
        """The number of ranks in the group."""
        return self._comm.Get_size()

    def name(self):
        """The group's name."""
        return self._name

    def _free(self):
        MPI = _State.mpi
        for c in (self._p2p, self._comm):
            if c is not None and c != MPI.COMM_NULL and not MPI.Is_finalized():
                c.Free()
        self._comm = self._p2p = None
        if self in _State.groups:
            _State.groups.remove(self)

    def __repr__(self):
        return f"<tapegrad.distributed.ProcessGroup {self._name} ranks={self._ranks}>"


class _GroupMemberMeta(type):
    @property
    def WORLD(cls):
        """The default process group (None before init_process_group)."""
        return _State.world


class GroupMember(metaclass=_GroupMemberMeta):
    """GroupMember.WORLD: the default group; GroupMember.NON_GROUP_MEMBER: what new_group
    returns on a rank it does not include. As PyTorch's."""
    NON_GROUP_MEMBER = -100


group = GroupMember      # torch.distributed.group.WORLD, as PyTorch spells it too


def _default():
    if _State.world is None:
        raise ValueError(_NOT_INIT)
    return _State.world


def _group(g):
    """The ProcessGroup to use, or None when this rank is not in it."""
    world = _default()
    if g is None:
        return world
    if g is GroupMember.NON_GROUP_MEMBER or (isinstance(g, int) and not isinstance(g, bool)
                                             and g == GroupMember.NON_GROUP_MEMBER):
        return None
    if not isinstance(g, ProcessGroup) or g._comm is None:
        raise ValueError(f"Group {g} is not registered, please create group with "
                         "torch.distributed.new_group API")
    return g


def _not_member(name):
    warnings.warn(f"Running {name} on global rank {get_rank()} which does not belong to "
                  "the given group.", stacklevel=3)


# ------------------------------------------------------------------ init / teardown
def is_available():
    """True: tapegrad.distributed exists (its MPI backend needs mpi4py; see
    is_mpi_available)."""
    return True


def is_mpi_available():
    """Whether the MPI backend can run: mpi4py is installed (not imported here)."""
    return _State.mpi is not None or importlib.util.find_spec("mpi4py") is not None


def is_gloo_available():
    """False: tapegrad.distributed has no Gloo backend (MPI only)."""
    return False


def is_nccl_available():
    """False: tapegrad runs on the CPU (MPI only)."""
    return False


def is_torchelastic_launched():
    """False: tapegrad's processes are started by mpirun, not torchelastic."""
    return False


def is_initialized():
    """Whether init_process_group ran (and destroy_process_group did not since)."""
    return _State.world is not None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Joins the job mpirun started: backend "mpi" (the default; the only one: Gloo and
    NCCL are not available). Rank and world size come from MPI; world_size and rank, if
    given, must agree with them. init_method ("env://" or None) and timeout are accepted
    for PyTorch scripts but unused: MPI has its own rendezvous and no timeouts."""
    if _State.world is not None:
        raise ValueError("trying to initialize the default process group twice!")
    name = "mpi" if backend is None else backend
    if not isinstance(name, str):
        raise ValueError(f"Backend constructor parameter must be string-ish, but got: "
                         f"{type(name)}")
    name = name.lower()
    if name != "mpi":
        parts = {p.split(":")[-1] for p in name.split(",")}
        if parts & set(_OTHER_BACKENDS):
            raise RuntimeError(f"Distributed package doesn't have {name.upper()} built in: "
                               "tapegrad.distributed runs on MPI only (backend='mpi', "
                               "started with mpirun -n N python script.py)")
        raise AssertionError(f"Unknown backend type {backend}")
    if init_method is not None and init_method != "env://":
        raise ValueError(f"init_method={init_method!r}: tapegrad's MPI backend takes its "
                         "ranks from mpirun; pass init_method=None")
    if timeout is not None and not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got "
                        f"{type(timeout)}")
    if store is not None:
        raise ValueError("tapegrad's MPI backend takes no store (mpirun connects the ranks)")
    if pg_options is not None:
        raise ValueError("tapegrad's MPI backend takes no pg_options")
    if device_id is not None and str(device_id) != "cpu":
        raise ValueError(f"device_id={device_id!r}: tapegrad runs on the CPU only")
    if not isinstance(group_name, str):
        raise TypeError(f"group_name must be a str, got {type(group_name).__name__}")
    for arg, v in (("world_size", world_size), ("rank", rank)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{arg} must be an int, got {type(v).__name__}")
    MPI = _import_mpi()
    if MPI.Is_finalized():
        raise RuntimeError("MPI was finalized in this process and cannot start again")
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
        if not _State.we_initialised:
            _State.we_initialised = True
            atexit.register(_finalise)
    size, me = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
    if world_size != -1 and world_size != size:
        raise ValueError(f"world_size={world_size} but mpirun started {size} processes "
                         "(the MPI backend takes the world size from mpirun)")
    if rank != -1 and rank != me:
        raise ValueError(f"rank={rank} but MPI gave this process rank {me} (the MPI "
                         "backend takes ranks from mpirun)")
    _State.world = ProcessGroup(MPI.COMM_WORLD.Dup(), range(size), group_name or "0")
    if sys.excepthook is not _abort_on_uncaught:
        _State.excepthook = sys.excepthook
        sys.excepthook = _abort_on_uncaught


def destroy_process_group(group=None):
    """Frees a group (its communicators), or with None every group and the default one:
    init_process_group may run again afterwards. MPI itself is finalised at exit, and only
    if init_process_group initialised it."""
    if _State.world is None:
        raise AssertionError("Process group cannot be None")
    if group is None or group is _State.world:
        for g in list(_State.groups):
            g._free()
        _State.world = None
        if sys.excepthook is _abort_on_uncaught:
            sys.excepthook = _State.excepthook or sys.__excepthook__
        return
    if group is GroupMember.NON_GROUP_MEMBER:
        return
    if not isinstance(group, ProcessGroup) or group._comm is None:
        raise ValueError(f"Invalid process group specified: {group}")
    group._free()


def get_rank(group=None):
    """This process's rank in the group (the default one: its global rank); -1 if it is
    not a member."""
    g = _group(group)
    return -1 if g is None else g.rank()


def get_world_size(group=None):
    """The number of ranks in the group (the default one: every rank); -1 if this process
    is not a member."""
    g = _group(group)
    return -1 if g is None else g.size()


def get_backend(group=None):
    """"mpi", the only backend."""
    _group(group)
    return Backend.MPI


def get_process_group_ranks(group):
    """The global ranks of the group's members, in group-rank order."""
    g = _group(group)
    if g is None:
        raise ValueError(f"Group {group} is not registered, please create group with "
                         "torch.distributed.new_group API")
    return list(g._ranks)


def get_global_rank(group, group_rank):
    """The global rank of the group's rank group_rank."""
    ranks = get_process_group_ranks(group)
    if not 0 <= group_rank < len(ranks):
        raise ValueError(f"Group rank {group_rank} is not part of group {group}")
    return ranks[group_rank]


def get_group_rank(group, global_rank):
    """The rank in the group of the global rank global_rank."""
    ranks = get_process_group_ranks(group)
    if global_rank not in ranks:
        raise ValueError(f"Global rank {global_rank} is not part of group {group}")
    return ranks.index(global_rank)


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False, group_desc=None, device_id=None,
              sort_ranks=True):
    """A group of the given global ranks (None: all), made collectively: every rank of
    the default group calls new_group with the same ranks. Ranks outside it get
    GroupMember.NON_GROUP_MEMBER, as in PyTorch."""
    world = _default()
    err = None
    try:
        ranks = _new_group_ranks(ranks, world.size(), sort_ranks)
        if backend is not None and str(backend).lower() != "mpi":
            raise RuntimeError(f"Distributed package doesn't have {str(backend).upper()} "
                               "built in: tapegrad.distributed runs on MPI only")
        if pg_options is not None:
            raise ValueError("tapegrad's MPI backend takes no pg_options")
        if use_local_synchronization:
            raise ValueError("new_group(use_local_synchronization=True) is not supported by "
                             "tapegrad's MPI backend: every rank calls new_group")
        if device_id is not None and str(device_id) != "cpu":
            raise ValueError(f"device_id={device_id!r}: tapegrad runs on the CPU only")
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(world, "new_group", None if err else f"ranks {ranks}", err)
    MPI = _State.mpi
    me = world.rank()
    color = 0 if me in ranks else MPI.UNDEFINED
    comm = world._comm.Split(color, ranks.index(me) if me in ranks else 0)
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    return ProcessGroup(comm, ranks, group_desc or f"{len(_State.groups)}")


def _new_group_ranks(ranks, n, sort_ranks):
    if ranks is None:
        return list(range(n))
    ranks = list(ranks)
    for r in ranks:
        if not isinstance(r, int) or isinstance(r, bool):
            raise TypeError(f"new_group: ranks must be ints, got {type(r).__name__}")
    if len(ranks) > n:
        raise ValueError("the new group's world size should be less or equal to the "
                         "world size set by init_process_group")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"new_group: ranks {ranks} repeat a rank")
    for r in ranks:
        if not 0 <= r < n:
            raise ValueError(f"The new group's rank should be within the world_size set "
                             f"by init_process_group: rank {r} of world size {n}")
    return sorted(ranks) if sort_ranks else ranks


# ------------------------------------------------------------------ buffers
def _mpi_type(dtype):
    MPI = _State.mpi
    return {float32: MPI.FLOAT, float64: MPI.DOUBLE, int64: MPI.INT64_T,
            bool_: MPI.C_BOOL}[dtype]


_TORCH_TYPE_NAMES = {"int64": "Long", "bool": "Bool", "float32": "Float", "float64": "Double"}


def _mpi_op(op, dtype):
    """The MPI reduction for a ReduceOp on a dtype, and whether to divide afterwards
    (AVG). Bool tensors reduce logically (PyTorch's gloo adds their bytes: SUM and MAX
    are or, PRODUCT and MIN are and)."""
    MPI = _State.mpi
    if not isinstance(op, ReduceOp.RedOpType):
        raise TypeError(f"op must be a tapegrad.distributed.ReduceOp (ReduceOp.SUM, ...), "
                        f"got {op!r}")
    if op is ReduceOp.PREMUL_SUM:
        raise RuntimeError("ReduceOp.PREMUL_SUM is not supported by tapegrad's MPI backend "
                           "(PyTorch has it on NCCL only)")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and dtype.is_floating_point:
        raise RuntimeError(f"Cannot use ReduceOp.{op.name} with non-integral dtype")
    if op is ReduceOp.AVG and not dtype.is_floating_point:
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{_TORCH_TYPE_NAMES[dtype.name]}")
    if dtype is bool_:
        return {ReduceOp.SUM: MPI.LOR, ReduceOp.MAX: MPI.LOR, ReduceOp.BOR: MPI.LOR,
                ReduceOp.PRODUCT: MPI.LAND, ReduceOp.MIN: MPI.LAND, ReduceOp.BAND: MPI.LAND,
                ReduceOp.BXOR: MPI.LXOR}[op], False
    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
            ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX, ReduceOp.BAND: MPI.BAND,
            ReduceOp.BOR: MPI.BOR, ReduceOp.BXOR: MPI.BXOR}[op], op is ReduceOp.AVG


def _need_tensor(t, name):
    if not isinstance(t, Tensor):
        raise TypeError(f"Invalid function argument. Expected parameter `{name}` of type "
                        f"torch.Tensor\n             but got {type(t)} instead.")


def _need_tensor_list(ts, name):
    if not isinstance(ts, (list, tuple)):
        raise TypeError(f"Invalid function argument. Expected parameter `{name}` of type "
                        f"List[torch.Tensor]\n             but got {type(ts)} instead.")
    if not all(isinstance(t, Tensor) for t in ts):
        raise TypeError(f"Invalid function argument. Expected parameter `{name}` of type "
                        f"List[torch.Tensor]\n             but got {type(ts)} with elements "
                        f"of type {[type(t) for t in ts]}.")


def _need_rank(r, name, n):
    if not isinstance(r, int) or isinstance(r, bool):
        raise TypeError(f"{name} must be an int rank, got {type(r).__name__}")
    if not 0 <= r < n:
        raise ValueError(f"Invalid {name} rank {r}: the group has ranks 0 to {n - 1}")


def _root(pg, global_rank, group_rank, what):
    """The group rank of a root given as a global rank (src/dst) or a group rank
    (group_src/group_dst), as PyTorch's _canonicalize_group_rank."""
    if group_rank is not None:
        if global_rank is not None:
            raise ValueError("Can't specify both group_rank and global_rank")
        _need_rank(group_rank, f"group_{what}", pg.size())
        return group_rank
    if global_rank is None:
        raise ValueError("Must specify global_rank or group_rank")
    if not isinstance(global_rank, int) or isinstance(global_rank, bool):
        raise TypeError(f"{what} must be an int rank, got {type(global_rank).__name__}")
    if global_rank not in pg._ranks:
        world = _State.world.size()
        if not 0 <= global_rank < world:
            raise ValueError(f"Invalid {what} rank {global_rank}: the world has ranks 0 to "
                             f"{world - 1}")
        raise ValueError(f"Global rank {global_rank} is not part of group {pg}")
    return pg._ranks.index(global_rank)


_OVERLAP = ("unsupported operation: the tensor's elements share memory (an expanded "
            "tensor); clone() it first")


def _writable(*tensors):
    """Refuses an output whose elements overlap (an expanded tensor): MPI would write
    several results to one place."""
    for t in tensors:
        if any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape)):
            raise RuntimeError(_OVERLAP)


class _Buf:
    """A tensor's memory for MPI: its own (contiguous) or a contiguous copy written back
    when the collective completes (non-contiguous tensors)."""
    __slots__ = ("tensor", "view", "arr", "copied")

    def __init__(self, t, write):
        self.tensor = t
        self.view = _numpy_view(t)
        if self.view.flags.c_contiguous:
            self.arr, self.copied = self.view, False
        else:
            if write and any(s == 0 and n > 1 for s, n in
                             zip(self.view.strides, self.view.shape)):
                raise RuntimeError(_OVERLAP)
            self.arr, self.copied = np.ascontiguousarray(self.view), True

    def spec(self):
        # (no count: mpi4py derives it from the buffer, per rank where the call splits
        # the buffer into blocks, as Allgather's receive buffer)
        return [self.arr, _mpi_type(self.tensor.dtype)]

    def done(self, written):
        if written and self.copied:
            self.view[...] = self.arr


def _desc(t):
    return f"shape {list(t.shape)} {t.dtype.name}"


# ------------------------------------------------------------------ agreement
def _agree(pg, name, sig, err, check=None):
    """The ranks' metadata exchange: each rank's `sig` (a str that must be equal on every
    rank) and its local error, if any. Raises on every rank when one has an error or the
    sigs differ; without checking, raises the local error alone."""
    if check is None:
        check = _checking()
    if not check:
        if err is not None:
            raise err
        return
    mine = (name, sig, None if err is None else (type(err).__name__, str(err)))
    metas = pg._comm.allgather(mine)
    if err is not None:
        raise err
    who = pg._ranks
    bad = [(who[r], m[2]) for r, m in enumerate(metas) if m[2] is not None]
    if bad:
        raise RuntimeError(f"{name}: " + "; ".join(f"rank {r} raised {t}: {msg}"
                                                   for r, (t, msg) in bad))
    if any(m[0] != name for m in metas):
        raise RuntimeError("the ranks called different collectives: " + "; ".join(
            f"rank {who[r]}: {m[0]}" for r, m in enumerate(metas)))
    if any(m[1] != sig for m in metas):
        raise RuntimeError(f"{name}: the ranks' arguments differ (every rank must pass the "
                           "same shapes, dtypes, op and root): " + "; ".join(
                               f"rank {who[r]}: {m[1]}" for r, m in enumerate(metas)))


# ------------------------------------------------------------------ work
class Work:
    """An asynchronous collective's handle (async_op=True): wait() blocks until it is
    done, is_completed() asks without blocking. The tensors hold their results once
    wait() returned (or is_completed() said True)."""

    def __init__(self, requests, finish, tensors):
        self._requests = list(requests)
        self._finish = finish
        self._tensors = tensors
        self._done = False

    def _complete(self):
        if not self._done:
            self._done = True
            if self._finish is not None:
                self._finish()

    def wait(self, timeout=None):
        """Blocks until the collective completed; True. (A timeout is not supported:
        MPI cannot cancel a collective.)"""
        if timeout is not None:
            raise ValueError("Work.wait(timeout=...) is not supported by tapegrad's MPI "
                             "backend (MPI cannot cancel a collective)")
        if not self._done:
            if self._requests:
                _State.mpi.Request.Waitall(self._requests)
            self._complete()
        return True

    def is_completed(self):
        """Whether the collective finished (and its results are in place)."""
        if not self._done and (not self._requests or
                               _State.mpi.Request.Testall(self._requests)):
            self._complete()
        return self._done

    def is_success(self):
        """Whether it completed without an error (MPI errors raise instead)."""
        return self.is_completed()

    def exception(self):
        """None: an MPI error raises at the call or at wait()."""
        return None

    def result(self):
        """The tensors the collective wrote (or read), as PyTorch's Work.result()."""
        self.wait()
        return list(self._tensors)

    def synchronize(self):
        """wait(), for PyTorch's CPU semantics."""
        self.wait()


def _launch(async_op, blocking, nonblocking, finish, tensors):
    """Runs the blocking call now, or starts the non-blocking one and returns its Work."""
    if async_op:
        reqs = nonblocking()
        return Work(reqs if isinstance(reqs, list) else [reqs], finish, tensors)
    blocking()
    if finish is not None:
        finish()
    return None


def _finisher(written, bufs, avg_by=None):
    def finish():
        for b in bufs:
            if avg_by is not None:
                np.divide(b.arr, avg_by, out=b.arr)
            b.done(True)
        for t in written:
            bump_version(t)
    return finish


def _async_flag(async_op):
    if not isinstance(async_op, bool):
        raise TypeError(f"async_op must be a bool, got {type(async_op).__name__}")


# ------------------------------------------------------------------ collectives
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces the tensor over the group's ranks (op: ReduceOp.SUM by default), in place
    on every rank (MPI_Allreduce with MPI_IN_PLACE on the tensor's own memory)."""
    pg = _group(group)
    if pg is None:
        return _not_member("all_reduce")
    err = sig = None
    try:
        _need_tensor(tensor, "tensor")
        _async_flag(async_op)
        _mpi_op(op, tensor.dtype)
        _writable(tensor)
        sig = f"{_desc(tensor)} op {getattr(op, 'name', op)}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "all_reduce", sig, err)
    mop, avg = _mpi_op(op, tensor.dtype)
    b = _Buf(tensor, True)
    MPI, comm = _State.mpi, pg._comm
    return _launch(async_op, lambda: comm.Allreduce(MPI.IN_PLACE, b.spec(), mop),
                   lambda: comm.Iallreduce(MPI.IN_PLACE, b.spec(), mop),
                   _finisher([tensor], [b], pg.size() if avg else None), [tensor])


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copies the tensor of rank src (a global rank; group_src: a rank in the group) to
    every rank's tensor, in place."""
    pg = _group(group)
    if pg is None:
        return _not_member("broadcast")
    err = sig = None
    try:
        _need_tensor(tensor, "tensor")
        _async_flag(async_op)
        root = _root(pg, src, group_src, "src")
        _writable(tensor)
        sig = f"{_desc(tensor)} from group rank {root}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "broadcast", sig, err)
    b = _Buf(tensor, True)
    comm = pg._comm
    mine = pg.rank() == root
    return _launch(async_op, lambda: comm.Bcast(b.spec(), root),
                   lambda: comm.Ibcast(b.spec(), root),
                   _finisher([] if mine else [tensor], [] if mine else [b]), [tensor])


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduces the tensor over the ranks into rank dst's tensor (in place there; the
    other ranks' tensors are left as they were)."""
    pg = _group(group)
    if pg is None:
        return _not_member("reduce")
    err = sig = None
    try:
        _need_tensor(tensor, "tensor")
        _async_flag(async_op)
        root = _root(pg, dst, group_dst, "dst")
        _mpi_op(op, tensor.dtype)
        _writable(tensor)
        sig = f"{_desc(tensor)} op {op.name} to group rank {root}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "reduce", sig, err)
    mop, avg = _mpi_op(op, tensor.dtype)
    MPI, comm = _State.mpi, pg._comm
    mine = pg.rank() == root
    b = _Buf(tensor, mine)
    send = MPI.IN_PLACE if mine else b.spec()
    recv = b.spec() if mine else None
    return _launch(async_op, lambda: comm.Reduce(send, recv, mop, root),
                   lambda: comm.Ireduce(send, recv, mop, root),
                   _finisher([tensor], [b], pg.size() if avg else None) if mine else None,
                   [tensor])


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] := rank r's tensor, on every rank (one broadcast from each rank
    straight into the list's tensors: no copies)."""
    pg = _group(group)
    if pg is None:
        return _not_member("all_gather")
    err = sig = None
    n = pg.size()
    try:
        _need_tensor_list(tensor_list, "tensor_list")
        _need_tensor(tensor, "tensor")
        _async_flag(async_op)
        if len(tensor_list) != n:
            raise RuntimeError(f"all_gather: tensor_list has {len(tensor_list)} tensors; "
                               f"the group has {n} ranks (one tensor per rank)")
        _same_as(tensor_list, tensor, "all_gather", "tensor_list")
        _writable(*tensor_list)
        sig = _desc(tensor)
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "all_gather", sig, err)
    me = pg.rank()
    src = _Buf(tensor, False)
    outs = [_Buf(t, r != me) for r, t in enumerate(tensor_list)]
    comm = pg._comm

    def local():
        outs[me].arr[...] = src.arr

    def blocking():
        local()
        for r in range(n):
            comm.Bcast(outs[r].spec() if r != me else src.spec(), r)

    def nonblocking():
        local()
        return [comm.Ibcast(outs[r].spec() if r != me else src.spec(), r) for r in range(n)]
    return _launch(async_op, blocking, nonblocking,
                   _finisher(list(tensor_list), outs), list(tensor_list))


def _same_as(ts, like, name, list_name):
    for i, t in enumerate(ts):
        if tuple(t.shape) != tuple(like.shape) or t.dtype is not like.dtype:
            raise RuntimeError(f"{name}: {list_name}[{i}] has {_desc(t)}; every tensor in "
                               f"it must have {_desc(like)}")


def _flat_check(out, inp, factor, name, out_name, in_name, bigger):
    if out.dtype is not inp.dtype:
        raise RuntimeError(f"{name}: {out_name} is {out.dtype.name} and {in_name} "
                           f"{inp.dtype.name}; they must have the same dtype")
    big, small = (out, inp) if bigger == "out" else (inp, out)
    if big.numel() != small.numel() * factor:
        raise RuntimeError(
            f"{name}: {(out_name if bigger == 'out' else in_name)} has {big.numel()} "
            f"elements; it must have world size ({factor}) times the "
            f"{(in_name if bigger == 'out' else out_name)}'s {small.numel()}")


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank's input_tensor, concatenated in rank order into output_tensor (world
    size times as many elements; MPI_Allgather into its memory)."""
    pg = _group(group)
    if pg is None:
        return _not_member("all_gather_into_tensor")
    err = sig = None
    n = pg.size()
    try:
        _need_tensor(output_tensor, "output_tensor")
        _need_tensor(input_tensor, "input_tensor")
        _async_flag(async_op)
        _flat_check(output_tensor, input_tensor, n, "all_gather_into_tensor",
                    "output_tensor", "input_tensor", "out")
        _writable(output_tensor)
        sig = f"input {_desc(input_tensor)}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "all_gather_into_tensor", sig, err)
    src, out = _Buf(input_tensor, False), _Buf(output_tensor, True)
    comm = pg._comm
    return _launch(async_op, lambda: comm.Allgather(src.spec(), out.spec()),
                   lambda: comm.Iallgather(src.spec(), out.spec()),
                   _finisher([output_tensor], [out]), [output_tensor])


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """output := the reduction over ranks of their input_list[this rank] (one reduce to
    each rank straight from the list's tensors)."""
    pg = _group(group)
    if pg is None:
        return _not_member("reduce_scatter")
    err = sig = None
    n = pg.size()
    try:
        _need_tensor(output, "output")
        _need_tensor_list(input_list, "input_list")
        _async_flag(async_op)
        if len(input_list) != n:
            raise RuntimeError("invalid input tensor list size, must be world size")
        _same_as(input_list, output, "reduce_scatter", "input_list")
        _mpi_op(op, output.dtype)
        _writable(output)
        sig = f"{_desc(output)} op {op.name}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "reduce_scatter", sig, err)
    mop, avg = _mpi_op(op, output.dtype)
    out = _Buf(output, True)
    ins = [_Buf(t, False) for t in input_list]
    comm = pg._comm
    me = pg.rank()

    def blocking():
        for r in range(n):
            comm.Reduce(ins[r].spec(), out.spec() if r == me else None, mop, r)

    def nonblocking():
        return [comm.Ireduce(ins[r].spec(), out.spec() if r == me else None, mop, r)
                for r in range(n)]
    return _launch(async_op, blocking, nonblocking,
                   _finisher([output], [out], n if avg else None), [output])


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """output := this rank's block of the reduction over ranks of input (world size
    times output's elements; MPI_Reduce_scatter_block)."""
    pg = _group(group)
    if pg is None:
        return _not_member("reduce_scatter_tensor")
    err = sig = None
    n = pg.size()
    try:
        _need_tensor(output, "output")
        _need_tensor(input, "input")
        _async_flag(async_op)
        _flat_check(output, input, n, "reduce_scatter_tensor", "output", "input", "in")
        _mpi_op(op, output.dtype)
        _writable(output)
        sig = f"output {_desc(output)} op {op.name}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "reduce_scatter_tensor", sig, err)
    mop, avg = _mpi_op(op, output.dtype)
    out, src = _Buf(output, True), _Buf(input, False)
    comm = pg._comm
    return _launch(async_op, lambda: comm.Reduce_scatter_block(src.spec(), out.spec(), mop),
                   lambda: comm.Ireduce_scatter_block(src.spec(), out.spec(), mop),
                   _finisher([output], [out], n if avg else None), [output])


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """gather_list[r] := rank r's tensor, on rank dst (straight into the list's tensors:
    the other ranks send theirs point to point)."""
    pg = _group(group)
    if pg is None:
        return _not_member("gather")
    err = sig = None
    n = pg.size()
    try:
        _need_tensor(tensor, "tensor")
        _async_flag(async_op)
        root = _root(pg, dst, group_dst, "dst")
        if pg.rank() == root:
            if gather_list is None:
                raise ValueError("Argument ``gather_list`` must be specified on destination "
                                 "rank.")
            _need_tensor_list(gather_list, "gather_list")
            if len(gather_list) != n:
                raise RuntimeError(f"gather: Incorrect output list size {len(gather_list)}. "
                                   f"Output list size should be {n}, same as size of the "
                                   "process group.")
            _same_as(gather_list, tensor, "gather", "gather_list")
            _writable(*gather_list)
        elif gather_list:
            raise ValueError("Argument ``gather_list`` must NOT be specified on "
                             "non-destination ranks.")
        sig = f"{_desc(tensor)} to group rank {root}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "gather", sig, err)
    return _p2p_fan(pg, root, tensor, gather_list, async_op, into_root=True)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """tensor := rank src's scatter_list[this rank] (sent point to point from the list's
    tensors straight into each rank's tensor)."""
    pg = _group(group)
    if pg is None:
        return _not_member("scatter")
    err = sig = None
    n = pg.size()
    try:
        _need_tensor(tensor, "tensor")
        _async_flag(async_op)
        root = _root(pg, src, group_src, "src")
        if pg.rank() == root:
            if scatter_list is None:
                raise ValueError("Argument ``scatter_list`` must be specified on source "
                                 "rank.")
            _need_tensor_list(scatter_list, "scatter_list")
            if len(scatter_list) != n:
                raise RuntimeError(f"scatter: Incorrect input list size {len(scatter_list)}. "
                                   f"Input list size should be {n}, same as size of the "
                                   "process group.")
            _same_as(scatter_list, tensor, "scatter", "scatter_list")
        elif scatter_list:
            raise ValueError("Argument ``scatter_list`` must NOT be specified on "
                             "non-source ranks.")
        _writable(tensor)
        sig = f"{_desc(tensor)} from group rank {root}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "scatter", sig, err)
    return _p2p_fan(pg, root, tensor, scatter_list, async_op, into_root=False)


_FAN_TAG = 0


def _p2p_fan(pg, root, tensor, tensors, async_op, into_root):
    """gather (into_root) or scatter over the group's private communicator."""
    comm, me, n = pg._p2p, pg.rank(), pg.size()
    if me == root:
        lst = [_Buf(t, into_root and r != me) for r, t in enumerate(tensors)]
        mine = _Buf(tensor, not into_root)
        written = list(tensors) if into_root else [tensor]

        def local():
            if into_root:
                lst[me].arr[...] = mine.arr
            else:
                mine.arr[...] = lst[me].arr

        def start():
            local()
            op = comm.Irecv if into_root else comm.Isend
            return [op(lst[r].spec(), r, _FAN_TAG) for r in range(n) if r != me]
        finish = _finisher(written, lst if into_root else [mine])
    else:
        mine = _Buf(tensor, not into_root)
        written = [] if into_root else [tensor]

        def start():
            op = comm.Isend if into_root else comm.Irecv
            return [op(mine.spec(), root, _FAN_TAG)]
        finish = _finisher(written, [] if into_root else [mine])

    def blocking():
        _State.mpi.Request.Waitall(start())
    return _launch(async_op, blocking, start, finish, written)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """Rank r's block j of input goes to rank j's block r of output; blocks are along
    dim 0, equal (no split sizes) or of the given row counts (MPI_Alltoall(v))."""
    pg = _group(group)
    if pg is None:
        return _not_member("all_to_all_single")
    err = sig = None
    n = pg.size()
    try:
        _need_tensor(output, "output")
        _need_tensor(input, "input")
        _async_flag(async_op)
        if output.dtype is not input.dtype:
            raise RuntimeError(f"all_to_all_single: output is {output.dtype.name} and input "
                               f"{input.dtype.name}; they must have the same dtype")
        row_in = _row(input)
        row_out = _row(output)
        if row_in != row_out:
            raise RuntimeError("all_to_all_single: input and output must have the same size "
                               "past dim 0")
        ins = _splits(input_split_sizes, input, n, "input")
        outs = _splits(output_split_sizes, output, n, "output")
        _writable(output)
        sig = f"{input.dtype.name} rows of {row_in}"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "all_to_all_single", sig, err)
    if _checking():
        sent = pg._comm.allgather(ins)      # rank r sends sent[r][j] rows to rank j
        want = [sent[r][pg.rank()] for r in range(n)]
        mine = None if want == outs else (f"rank {pg._ranks[pg.rank()]} expects {outs} rows "
                                          f"from the ranks, which send it {want}")
        problems = [p for p in pg._comm.allgather(mine) if p]
        if problems:
            raise RuntimeError("all_to_all_single: the split sizes do not match: " +
                               "; ".join(problems))
    b_in, b_out = _Buf(input, False), _Buf(output, True)
    comm = pg._comm
    t = _mpi_type(input.dtype)

    def specs():
        cin = [k * row_in for k in ins]
        cout = [k * row_out for k in outs]
        return ([b_in.arr, (cin, _offsets(cin)), t], [b_out.arr, (cout, _offsets(cout)), t])
    return _launch(async_op, lambda: comm.Alltoallv(*specs()),
                   lambda: comm.Ialltoallv(*specs()),
                   _finisher([output], [b_out]), [output])


_A2A_TAG = 1


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """output_tensor_list[r] := rank r's input_tensor_list[this rank], on every rank
    (point to point between the lists' tensors: no copies). The tensors may differ in
    shape from pair to pair, but each output must match the input it receives."""
    pg = _group(group)
    if pg is None:
        return _not_member("all_to_all")
    err = sig = None
    n, me = pg.size(), pg.rank()
    try:
        _need_tensor_list(output_tensor_list, "output_tensor_list")
        _need_tensor_list(input_tensor_list, "input_tensor_list")
        _async_flag(async_op)
        for name, lst in (("output_tensor_list", output_tensor_list),
                          ("input_tensor_list", input_tensor_list)):
            if len(lst) != n:
                raise RuntimeError(f"all_to_all: {name} has {len(lst)} tensors; the group "
                                   f"has {n} ranks (one tensor per rank)")
        _writable(*output_tensor_list)
        sig = "all_to_all"
    except (TypeError, ValueError, RuntimeError) as e:
        err = e
    _agree(pg, "all_to_all", sig, err)
    if _checking():
        sent = pg._p2p.allgather([_desc(t) for t in input_tensor_list])
        bad = [f"rank {pg._ranks[r]} sends {sent[r][me]} into output_tensor_list[{r}] of "
               f"{_desc(t)}" for r, t in enumerate(output_tensor_list)
               if sent[r][me] != _desc(t)]
        problems = pg._p2p.allgather(bad)
        if any(problems):
            raise RuntimeError("all_to_all: the tensors do not match: " + "; ".join(
                f"on rank {pg._ranks[r]}: " + ", ".join(b) for r, b in enumerate(problems)
                if b))
    outs = [_Buf(t, True) for t in output_tensor_list]
    ins = [_Buf(t, False) for t in input_tensor_list]
    comm = pg._p2p

    def start():
        outs[me].arr[...] = ins[me].arr
        reqs = [comm.Irecv(outs[r].spec(), r, _A2A_TAG) for r in range(n) if r != me]
        return reqs + [comm.Isend(ins[r].spec(), r, _A2A_TAG) for r in range(n) if r != me]

    def blocking():
        _State.mpi.Request.Waitall(start())
    return _launch(async_op, blocking, start, _finisher(list(output_tensor_list), outs),
                   list(output_tensor_list))


def _row(t):
    return int(np.prod(t.shape[1:], dtype=np.int64)) if t.dim() else 1


def _offsets(counts):
    return [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])]


def _splits(sizes, t, n, name):
    rows = t.shape[0] if t.dim() else 1
    if sizes is None or len(sizes) == 0:
        if rows % n:
            raise RuntimeError(f"all_to_all_single: {name}'s dim 0 ({rows}) is not divisible "
                               f"by the world size ({n})")
        return [rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise RuntimeError(f"all_to_all_single: {name}_split_sizes {sizes} must be {n} "
                           f"non-negative row counts adding up to {name}'s dim 0 ({rows})")
    return sizes


def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """Waits until every rank of the group reached it (MPI_Barrier). device_ids and
    timeout are accepted for PyTorch scripts (CPU ranks; MPI has no timeouts)."""
    pg = _group(group)
    if pg is None:
        return _not_member("barrier")
    _async_flag(async_op)
    comm = pg._comm
    return _launch(async_op, comm.Barrier, comm.Ibarrier, None, [])


# ------------------------------------------------------------------ point to point
def _p2p_args(tensor, peer, group, group_peer, tag, what, allow_any=False):
    _need_tensor(tensor, "tensor")
    pg = _group(group)
    if pg is None:
        return None, None
    if not isinstance(tag, int) or isinstance(tag, bool):
        raise TypeError(f"tag must be an int, got {type(tag).__name__}")
    top = pg._comm.Get_attr(_State.mpi.TAG_UB)
    if not 0 <= tag <= top:
        raise ValueError(f"tag must be between 0 and {top} (MPI's upper bound), got {tag}")
    if allow_any and peer is None and group_peer is None:
        return pg, None
    r = _root(pg, peer, group_peer, what)
    if r == pg.rank():
        raise ValueError(f"Invalid {'destination' if what == 'dst' else 'source'} rank: "
                         f"{'destination' if what == 'dst' else 'source'} rank should not "
                         "be the same as the rank of the current process.")
    return pg, r


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Sends the tensor to rank dst (MPI_Send from the tensor's memory)."""
    pg, r = _p2p_args(tensor, dst, group, group_dst, tag, "dst")
    if pg is None:
        return _not_member("send")
    b = _Buf(tensor, False)
    pg._comm.Send(b.spec(), r, tag)


def _size_problem(got, b, tensor, peer, pg, name):
    return (f"{name}: rank {pg._ranks[peer]} sent {got} bytes; the receiving tensor "
            f"({_desc(tensor)}) has {b.arr.nbytes}")


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receives into the tensor from rank src (any rank when src is None); returns the
    sender's rank. A message of another size than the tensor raises (and is dropped)."""
    pg, r = _p2p_args(tensor, src, group, group_src, tag, "src", allow_any=True)
    if pg is None:
        _not_member("recv")
        return -1
    MPI = _State.mpi
    status = MPI.Status()
    msg = pg._comm.Mprobe(MPI.ANY_SOURCE if r is None else r, tag, status)
    got, peer = status.Get_count(MPI.BYTE), status.Get_source()
    b = _Buf(tensor, True)
    if got != b.arr.nbytes:
        msg.Recv([bytearray(max(got, 1)), got, MPI.BYTE])     # (so the sender is not left)
        raise RuntimeError(_size_problem(got, b, tensor, peer, pg, "recv"))
    msg.Recv(b.spec())
    b.done(True)
    bump_version(tensor)
    return pg._ranks[peer]


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Starts sending the tensor to rank dst; returns a Work (wait() before changing the
    tensor)."""
    pg, r = _p2p_args(tensor, dst, group, group_dst, tag, "dst")
    if pg is None:
        return _not_member("isend")
    b = _Buf(tensor, False)
    return Work([pg._comm.Isend(b.spec(), r, tag)], None, [tensor])


class _RecvWork(Work):
    """irecv's Work: checks the received size when it completes."""

    def __init__(self, req, finish, tensor):
        Work.__init__(self, [req], finish, [tensor])
        self._status = _State.mpi.Status()

    def wait(self, timeout=None):
        """Blocks until the message arrived; True. A message of another size raises."""
        if timeout is not None:
            return Work.wait(self, timeout)
        if not self._done:
            try:
                self._requests[0].Wait(self._status)
            except _State.mpi.Exception as e:
                self._done = True
                raise RuntimeError(f"irecv: the message does not fit the tensor "
                                   f"({_desc(self._tensors[0])}): {e}") from None
            self._complete()
        return True

    def is_completed(self):
        """Whether the message arrived (a message of another size raises)."""
        if not self._done and self._requests[0].Test():
            self.wait()
        return self._done

    def _complete(self):
        if not self._done:
            self._done = True
            self._finish(self._status)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Starts receiving into the tensor from rank src (any rank when None), straight into
    its memory; returns a Work. A message of another size raises at wait()."""
    pg, r = _p2p_args(tensor, src, group, group_src, tag, "src", allow_any=True)
    if pg is None:
        return _not_member("irecv")
    MPI = _State.mpi
    b = _Buf(tensor, True)
    req = pg._comm.Irecv(b.spec(), MPI.ANY_SOURCE if r is None else r, tag)

    def finish(status):
        got = status.Get_count(MPI.BYTE)
        if got != b.arr.nbytes:
            raise RuntimeError(_size_problem(got, b, tensor, status.Get_source(), pg,
                                             "irecv"))
        b.done(True)
        bump_version(tensor)
    return _RecvWork(req, finish, tensor)


# ------------------------------------------------------------------ objects
def all_gather_object(object_list, obj, group=None):
    """object_list[r] := rank r's obj (pickled), on every rank."""
    pg = _group(group)
    if pg is None:
        return _not_member("all_gather_object")
    if not isinstance(object_list, list) or len(object_list) != pg.size():
        raise ValueError(f"all_gather_object: object_list must be a list of world size "
                         f"({pg.size()}) entries")
    object_list[:] = pg._p2p.allgather(obj)


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """object_list's entries := rank src's (pickled), on every rank."""
    pg = _group(group)
    if pg is None:
        return _not_member("broadcast_object_list")
    root = _root(pg, src, group_src, "src")
    if not isinstance(object_list, list):
        raise TypeError("broadcast_object_list: object_list must be a list")
    got = pg._p2p.bcast(object_list if pg.rank() == root else None, root=root)
    object_list[:] = got
