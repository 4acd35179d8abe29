"""nn.parallel.DistributedDataParallel on 2 MPI ranks (and 1): training equals one process
on the concatenated batches, compiled steps equal eager ones bitwise, no_sync(),
find_unused_parameters, PyTorch's errors, buffers from rank 0. The scenarios run in
tests/distributed/workers/ddp_scenarios.py (one mpirun launch for all of them); the
single-process references are computed here."""
import inspect
import os

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
import tapegrad.nn.functional as F
from tests.distributed._mpi import WORKERS, run_mpi_json
from tests.distributed.workers import ddp_scenarios as S

WORKER = os.path.join(WORKERS, "ddp_scenarios.py")
DDP = nn.parallel.DistributedDataParallel


def _warm_kernels():
    """Compile here what the ranks run (they share this process's kernel cache), so on a
    cold cache two ranks do not compile the same kernels at once."""
    for kind in ("mlp", "conv", "lstm"):
        S.reference(kind, world=2, steps=1)
    m = S.make_model("bn", seed=1)
    opt = S.make_optimizer(m.parameters())

    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    step = tg.compile(step, fuse=False)
    x, y = S.make_data("bn", 1, steps=1)[0]
    for _ in range(2):
        step(tg.tensor(x[0]), tg.tensor(y[0]))


@pytest.fixture(scope="module")
def two_ranks():
    _warm_kernels()
    out = run_mpi_json(WORKER, n=2)
    for r, res in enumerate(out):
        assert res["rank"] == r and res["world"] == 2
        for name, value in res.items():
            if isinstance(value, dict) and "exception" in value:
                pytest.fail(f"rank {r}, scenario {name}:\n{value['exception']}")
    return out


def _close(got, want, what):
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-15,
                                   err_msg=f"{what}[{k}]")


@pytest.mark.parametrize("kind", ["mlp", "conv", "lstm"])
def test_training_equals_one_process_on_the_concatenated_batches(two_ranks, kind):
    r0, r1 = (res["train"][kind] for res in two_ranks)
    assert r0 == r1                     # the ranks end bitwise equal
    want = S.reference(kind, world=2)
    assert len(r0) == len(want)
    _close(r0, want, kind)
    # (not vacuous: the ranks started from different parameters, and training moved them)
    start = [p.detach().numpy() for p in S.make_model(kind, seed=1).parameters()]
    assert not all(np.allclose(np.asarray(a), b) for a, b in zip(r0, start))


@pytest.mark.parametrize("kind", ["mlp", "bn"])
def test_compiled_ddp_step_equals_eager_bitwise(two_ranks, kind):
    for res in two_ranks:
        got = res["compiled"][kind]
        assert got["eager"] is None             # no graph break
        assert got["stats"] == {"recordings": 1, "replays": S.STEPS - 1}
        assert got["equal"] is True


def test_compiled_with_unused_parameters_and_inside_no_sync(two_ranks):
    for res in two_ranks:
        got = res["compiled_more"]
        assert got["equal"] is True
        assert got["stats"] == [{"recordings": 1, "replays": 2},
                                {"recordings": 1, "replays": 3}]
        assert got["never_grad_none"] is True


def test_no_sync_accumulates_then_averages_the_sums(two_ranks):
    g0, g1 = (res["no_sync"]["grads"] for res in two_ranks)
    assert g0 == g1
    m = S.make_model("mlp", seed=1)
    for x, y in S.make_data("mlp", 2, steps=3, seed=5):
        F.cross_entropy(m(tg.tensor(x.reshape(-1, 5))), tg.tensor(y.reshape(-1))).backward()
    _close(g0, [p.grad.numpy() for p in m.parameters()], "grad")
    # inside no_sync the ranks' gradients were their own
    l0, l1 = (res["no_sync"]["local_after_two"] for res in two_ranks)
    assert l0 != l1


def _local_branch_grads(rank):
    m = S._Branches(rank)
    x = tg.tensor(np.random.default_rng(rank).standard_normal((3, 4)))
    m(x).pow(2).sum().backward()
    return {n: None if p.grad is None else p.grad.numpy().copy()
            for n, p in m.named_parameters()}


def test_find_unused_parameters(two_ranks):
    local = [_local_branch_grads(r) for r in range(2)]
    for res in two_ranks:
        got = res["unused"]
        assert got["never.weight"] is None and got["never.bias"] is None
        for n in ("a.weight", "a.bias"):
            _close([got[n]], [(local[0][n] + local[1][n]) / 2], n)
        for n in ("rank0.weight", "rank0.bias"):    # used on rank 0 only: the average
            _close([got[n]], [local[0][n] / 2], n)


def test_an_unused_parameter_without_the_flag_is_pytorchs_error(two_ranks):
    for r, res in enumerate(two_ranks):
        err = res["unused_error"]["error"]
        assert err.startswith("Expected to have finished reduction in the prior iteration "
                              "before starting a new one.")
        assert "find_unused_parameters=True" in err
        assert f"Parameter indices which did not receive grad for rank {r}: 2 3 4 5\n" in err
        assert res["unused_error"]["a_grad_none"] is False


def test_a_model_that_differs_across_ranks_is_refused_on_every_rank(two_ranks):
    for r, res in enumerate(two_ranks):
        got = res["mismatch"]
        assert got["shape"] == ("DDP expects same model across all ranks, but params[0] "
                                "(0.weight) in rank 1 with sizes [2, 4] appears not to match "
                                "sizes of the same param in process 0 ([3, 4]).")
        other, (mine, theirs) = 1 - r, ((2, 4) if r == 0 else (4, 2))
        assert got["count"] == (f"DDP expects same model across all ranks, but Rank {r} has "
                                f"{mine} params, while rank {other} has inconsistent {theirs} "
                                "params.")


def test_parameters_and_buffers_come_from_rank_0(two_ranks):
    b0, b1 = (res["buffers"] for res in two_ranks)
    assert b0["wrap_mean"] == b1["wrap_mean"] == [1.0] * 8      # rank 0 filled 1.0
    assert b0["wrap_weight"] == b1["wrap_weight"]
    w0 = S.make_model("bn", seed=1)[0].weight.detach().numpy()
    np.testing.assert_array_equal(np.asarray(b0["wrap_weight"]), w0)
    # before each forward every rank holds rank 0's statistics; each then updates them
    # with its own batch
    for k in range(2):
        assert b0["steps"][k]["before"] == b1["steps"][k]["before"]
        assert b0["steps"][k]["after"] != b1["steps"][k]["after"]
        assert b0["steps"][k]["batches"] == b1["steps"][k]["batches"] == k + 1
    assert b1["steps"][1]["before"] == b0["steps"][0]["after"]


def test_a_pickled_wrapper_averages_as_the_original(two_ranks):
    for res in two_ranks:
        assert res["pickle"]["same"] is True
        assert res["pickle"]["keys"] == ["module.0.weight", "module.0.bias"]


def test_one_rank_is_a_no_op_wrapper():
    (res,) = run_mpi_json(WORKER, n=1, args=("single",))
    assert res["world"] == 1
    got = res["single"]
    assert "exception" not in got, got.get("exception")
    assert got["same"] is True
    assert got["keys"] == [f"module.{k}" for k in S.make_model("mlp", 1).state_dict()]


# ------------------------------------------------------------ without MPI
def test_signature_is_pytorchs():
    torch = pytest.importorskip("torch")
    ours = inspect.signature(DDP.__init__).parameters
    theirs = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters
    assert [(p.name, p.default) for p in ours.values()] == \
        [(p.name, p.default) for p in theirs.values()]
    assert list(inspect.signature(DDP.join).parameters) == \
        list(inspect.signature(torch.nn.parallel.DistributedDataParallel.join).parameters)


@pytest.mark.parametrize("kwargs", [dict(device_mesh=object()), dict(mixed_precision=object()),
                                    dict(gradient_as_bucket_view=True),
                                    dict(skip_all_reduce_unused_params=True),
                                    dict(bucket_cap_mb_list=[1, 2])])
def test_unsupported_arguments_are_refused(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(NotImplementedError, match=f"{name}=.* is not supported"):
        DDP(nn.Linear(2, 2), **kwargs)


def test_pytorchs_argument_errors():
    with pytest.raises(ValueError, match="delay_all_reduce_named_params and "
                                         "param_to_hook_all_reduce need to be set"):
        DDP(nn.Linear(2, 2), delay_all_reduce_named_params=[])
    with pytest.raises(RuntimeError, match="Cannot specify both process_group and "
                                           "device_mesh arguments."):
        DDP(nn.Linear(2, 2), process_group=object(), device_mesh=object())


def test_without_init_process_group_it_is_pytorchs_error():
    import tapegrad.distributed as dist
    if dist.is_initialized():
        pytest.skip("a process group exists in this process")
    with pytest.raises(ValueError, match="^Default process group has not been initialized, "
                                         "please make sure to call init_process_group.$"):
        DDP(nn.Linear(2, 2))
