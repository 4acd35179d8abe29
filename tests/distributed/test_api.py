"""tapegrad.distributed in one process, without MPI: PyTorch's names and signatures, the
errors before init_process_group, the backends it refuses, and that importing tapegrad
does not import mpi4py."""
import inspect
import subprocess
import sys

import pytest

import tapegrad as tg
import tapegrad.distributed as dist
from tests.helpers import REPO_ROOT

NOT_INIT = ("Default process group has not been initialized, please make sure to call "
            "init_process_group.")
FUNCTIONS = ["is_available", "is_mpi_available", "is_gloo_available", "is_nccl_available",
             "is_torchelastic_launched", "init_process_group", "is_initialized", "get_rank",
             "get_world_size", "destroy_process_group", "get_backend",
             "get_process_group_ranks", "get_global_rank", "get_group_rank", "new_group",
             "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
             "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter",
             "all_to_all_single", "all_to_all", "barrier", "send", "recv", "isend", "irecv",
             "all_gather_object", "broadcast_object_list"]


def _params(fn):
    return [(p.name, p.kind, repr(p.default)) for p in inspect.signature(fn).parameters.values()
            if not p.name.startswith("_")]      # (PyTorch's private _ranks of init)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_signatures_are_pytorchs(name):
    torch = pytest.importorskip("torch")
    assert _params(getattr(dist, name)) == _params(getattr(torch.distributed, name))


def test_reduce_op_is_pytorchs():
    torch = pytest.importorskip("torch")
    theirs = torch.distributed.ReduceOp
    for name in ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]:
        ours = getattr(dist.ReduceOp, name)
        assert int(ours) == int(getattr(theirs, name)) and repr(ours) == repr(
            getattr(theirs, name))
    assert list(dist.ReduceOp.RedOpType.__members__) == list(
        theirs.RedOpType.__members__)


def test_import_does_not_import_mpi4py():
    code = ("import sys, tapegrad, tapegrad.distributed as d, tapegrad.utils.data as u; "
            "assert tapegrad.distributed is d; assert u.DistributedSampler; "
            "print('mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"


def test_availability():
    assert dist.is_available() is True
    assert dist.is_gloo_available() is False and dist.is_nccl_available() is False
    assert dist.is_initialized() is False
    assert dist.GroupMember.WORLD is None and dist.group.WORLD is None


@pytest.mark.parametrize("call", [
    lambda: dist.get_rank(), lambda: dist.get_world_size(), lambda: dist.barrier(),
    lambda: dist.all_reduce(tg.ones(2)), lambda: dist.broadcast(tg.ones(2), 0),
    lambda: dist.all_gather([tg.ones(2)], tg.ones(2)), lambda: dist.new_group(),
    lambda: dist.send(tg.ones(2), 1), lambda: dist.recv(tg.ones(2), 1),
    lambda: dist.reduce_scatter_tensor(tg.ones(1), tg.ones(2)), lambda: dist.get_backend(),
    lambda: tg.utils.data.DistributedSampler(range(4))])
def test_before_init_process_group(call):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == NOT_INIT


def test_before_init_matches_pytorch():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError) as e:
        torch.distributed.all_reduce(torch.ones(2))
    assert str(e.value) == NOT_INIT
    with pytest.raises(AssertionError, match="^Process group cannot be None$"):
        torch.distributed.destroy_process_group()
    with pytest.raises(AssertionError, match="^Process group cannot be None$"):
        dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["gloo", "nccl", "cpu:gloo,cuda:nccl", "ucc", "GLOO"])
def test_other_backends_are_refused(backend):
    with pytest.raises(RuntimeError, match="Distributed package doesn't have .* built in: "
                                           "tapegrad.distributed runs on MPI only"):
        dist.init_process_group(backend)
    assert not dist.is_initialized()


@pytest.mark.parametrize("kwargs, kind, pattern", [
    ({"backend": "foo"}, AssertionError, "^Unknown backend type foo$"),
    ({"backend": 3}, ValueError, "Backend constructor parameter must be string-ish"),
    ({"init_method": "tcp://127.0.0.1:23456"}, ValueError, "takes its ranks from mpirun"),
    ({"store": object()}, ValueError, "takes no store"),
    ({"pg_options": object()}, ValueError, "takes no pg_options"),
    ({"device_id": "cuda:0"}, ValueError, "CPU only"),
    ({"timeout": 30}, TypeError, "Expected timeout argument to be of type "
                                 "datetime.timedelta"),
    ({"world_size": "2"}, TypeError, "world_size must be an int"),
])
def test_init_arguments_are_checked_before_mpi_starts(kwargs, kind, pattern):
    with pytest.raises(kind, match=pattern):
        dist.init_process_group(**{"backend": "mpi", **kwargs})
    assert not dist.is_initialized()


def test_backend_names():
    assert dist.Backend("MPI") == "mpi" == dist.Backend.MPI
    with pytest.raises(ValueError, match="string-ish"):
        dist.Backend(1)


def test_without_mpi4py_the_error_says_what_to_install():
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "import importlib.util as u; u.find_spec = lambda name, *a: None\n"
            "import tapegrad.distributed as d\n"
            "assert not d.is_mpi_available()\n"
            "try:\n    d.init_process_group('mpi')\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True)
    assert "tapegrad.distributed needs mpi4py" in out.stdout


def test_contiguous_tensors_go_to_mpi_without_a_copy():
    from tapegrad.distributed.distributed_c10d import _Buf
    x = tg.arange(12.).reshape(3, 4)
    for t in (x, x[1:], x[1], tg.tensor(2.0)):
        b = _Buf(t, True)
        assert not b.copied and b.arr.__array_interface__["data"][0] == t.data_ptr()
    b = _Buf(x.t(), True)                   # non-contiguous: one copy, written back
    assert b.copied and b.arr.flags.c_contiguous
    b.arr[...] = -b.arr
    b.done(True)
    assert x.tolist() == [[-v for v in row] for row in tg.arange(12.).reshape(3, 4).tolist()]
    with pytest.raises(RuntimeError, match="elements share memory"):
        _Buf(tg.ones(1, 3).expand(2, 3), True)
