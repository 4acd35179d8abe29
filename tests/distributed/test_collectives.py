"""tapegrad.distributed's collectives on 2 and 3 MPI ranks: one mpirun launch per world
size runs workers/collectives.py, which checks every case against its NumPy definition
and records each bad input's error on every rank; the tests here assert them case by
case. Skips without mpirun or mpi4py (see _mpi.py)."""
import os
import re

import pytest

from tests.distributed._mpi import WORKERS, run_mpi_json
from tests.distributed.workers import collectives as W

WORLDS = [2, 3]
_RESULTS = {}


def results(n):
    """Every rank's results of the worker on n ranks (launched once per world size)."""
    if n not in _RESULTS:
        _RESULTS[n] = run_mpi_json(os.path.join(WORKERS, "collectives.py"), n=n, timeout=600)
    return _RESULTS[n]


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("name", list(W.CASES))
def test_collective_matches_its_definition(name, n):
    for rank, res in enumerate(results(n)):
        assert res["_rank"] == rank and res["_world"] == n
        assert res[name] == "ok", f"rank {rank}: {res[name]}"


def _all(kind, pattern):
    return lambda r, n: (kind, pattern)


def _mismatch(detail):
    return _all("RuntimeError", r"the ranks' arguments differ .*" + detail)


def _one_rank(culprit, kind, own, name):
    """The culprit rank raises its own error; the others a RuntimeError naming it."""
    def want(r, n):
        c = culprit(n)
        if r == c:
            return kind, own
        return "RuntimeError", rf"^{name}: rank {c} raised {kind}: " + own.lstrip("^")
    return want


NOT_TENSOR = r"^Invalid function argument\. Expected parameter `tensor` of type torch\.Tensor"

EXPECTED = {
    "shape_by_rank": lambda r, n: ("RuntimeError", "; ".join(
        rf"rank {k}: shape \[{2 + k}, 3\] float32 op SUM" for k in range(n)) + "$"),
    "dtype_by_rank": _mismatch(r"rank 0: shape \[2\] float32 op SUM; rank 1: shape \[2\] "
                               r"float64 op SUM"),
    "op_by_rank": _mismatch(r"rank 0: shape \[2\] float32 op SUM; rank 1: shape \[2\] "
                            r"float32 op MAX"),
    "collective_by_rank": _all("RuntimeError", r"^the ranks called different collectives: "
                                               r"rank 0: all_reduce; rank 1: broadcast"),
    "broadcast_src_by_rank": _mismatch(r"rank 0: shape \[2\] float32 from group rank 0; "
                                       r"rank 1: shape \[2\] float32 from group rank 1"),
    "bad_src_on_last_rank": lambda r, n: _one_rank(
        lambda n: n - 1, "ValueError", rf"^Invalid src rank {n + 3}: the world has ranks 0 "
                                       rf"to {n - 1}", "broadcast")(r, n),
    "non_tensor_on_rank_0": _one_rank(lambda n: 0, "TypeError",
                                      NOT_TENSOR + r"\n +but got <class 'list'> instead\.",
                                      "all_reduce"),
    "non_tensor_everywhere": _all("TypeError", NOT_TENSOR),
    "all_gather_list_count": lambda r, n: (
        "RuntimeError", rf"^all_gather: tensor_list has {n + 1} tensors; the group has "
                        rf"{n} ranks"),
    "all_gather_list_shape": _all("RuntimeError", r"^all_gather: tensor_list\[0\] has shape "
                                                  r"\[3\] float32; every tensor in it must "
                                                  r"have shape \[2\] float32"),
    "all_gather_list_not_tensors": _all("TypeError", r"Expected parameter `tensor_list` of "
                                                     r"type List\[torch\.Tensor\]"),
    "all_gather_into_wrong_size": lambda r, n: (
        "RuntimeError", rf"^all_gather_into_tensor: output_tensor has {2 * n + 1} elements; "
                        rf"it must have world size \({n}\) times the input_tensor's 2"),
    "reduce_scatter_list_count": _all("RuntimeError",
                                      "^invalid input tensor list size, must be world size$"),
    "avg_int": _all("RuntimeError",
                    "^result type Float can't be cast to the desired output type Long$"),
    "avg_bool": _all("RuntimeError",
                     "^result type Float can't be cast to the desired output type Bool$"),
    "band_float": _all("RuntimeError", r"^Cannot use ReduceOp\.BAND with non-integral dtype$"),
    "premul_sum": _all("RuntimeError", r"^ReduceOp\.PREMUL_SUM is not supported"),
    "op_not_reduce_op": _all("TypeError", r"^op must be a tapegrad\.distributed\.ReduceOp"),
    "expanded_tensor": _all("RuntimeError", r"the tensor's elements share memory"),
    "expanded_output_on_last_rank": lambda r, n: _one_rank(
        lambda n: n - 1, "RuntimeError", r"^unsupported operation: the tensor's elements share "
                                         r"memory", "all_gather_into_tensor")(r, n),
    "gather_without_list": _one_rank(lambda n: 0, "ValueError", r"^Argument ``gather_list`` "
                                     r"must be specified on destination rank\.", "gather"),
    "scatter_without_list": _one_rank(lambda n: 0, "ValueError", r"^Argument "
                                      r"``scatter_list`` must be specified on source rank\.",
                                      "scatter"),
    "send_to_self": _all("ValueError", r"^Invalid destination rank: destination rank should "
                                       r"not be the same as the rank of the current process"),
    "send_to_nobody": lambda r, n: ("ValueError", rf"^Invalid dst rank {n + 5}: the world "
                                                  rf"has ranks 0 to {n - 1}$"),
    "recv_size_mismatch": lambda r, n: (
        ("RuntimeError", r"^recv: rank 0 sent 16 bytes; the receiving tensor \(shape \[3\] "
                         r"float32\) has 12$") if r == 1 else
        ("returned", "sent" if r == 0 else "idle")),
    "irecv_truncation": lambda r, n: (
        ("RuntimeError", r"^irecv: the message does not fit the tensor \(shape \[3\] "
                         r"float64\)") if r == 1 else
        ("returned", "sent" if r == 0 else "idle")),
    "all_to_all_wrong_output_shape": _all(
        "RuntimeError", r"^all_to_all: the tensors do not match: on rank 1: rank 0 sends "
                        r"shape \[2\] float32 into output_tensor_list\[0\] of shape \[3\] "
                        r"float32$"),
    "all_to_all_single_splits_disagree": lambda r, n: (
        "RuntimeError", r"^all_to_all_single: the split sizes do not match: rank 0 expects "
                        rf"\[1, 2{', 1' * (n - 2)}\] rows from the ranks, which send it "
                        rf"\[1, 1{', 1' * (n - 2)}\]$"),
    "bad_tag": _all("ValueError", r"^tag must be between 0 and \d+ \(MPI's upper bound\), "
                                  r"got -1$"),
    "async_op_not_bool": _all("TypeError", "^async_op must be a bool, got str$"),
    "new_group_rank_out_of_range": lambda r, n: (
        "ValueError", rf"^The new group's rank should be within the world_size set by "
                      rf"init_process_group: rank {n} of world size {n}$"),
    "new_group_ranks_by_rank": lambda r, n: ("RuntimeError", "; ".join(
        rf"rank {k}: ranks \[{k}\]" for k in range(n)) + "$"),
    "new_group_bad_rank_on_rank_0": _one_rank(lambda n: 0, "ValueError",
                                              r"^new_group: ranks \[0, 0\] repeat a rank$",
                                              "new_group"),
    "bad_group": _all("ValueError", r"^Group 5 is not registered, please create group with "
                                    r"torch\.distributed\.new_group API$"),
    "init_twice": _all("ValueError", "^trying to initialize the default process group "
                                     "twice!$"),
    "both_src_and_group_src": _all("ValueError", "^Can't specify both group_rank and "
                                                 "global_rank$"),
}


def test_every_error_case_has_an_expectation():
    assert sorted(EXPECTED) == sorted(fn.__name__ for fn in W.ERRORS)


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_input_raises_on_every_rank(name, n):
    for rank, res in enumerate(results(n)):
        got = res["error/" + name]
        kind, pattern = EXPECTED[name](rank, n)
        if kind == "returned":
            assert got == {"returned": repr(pattern)}, f"rank {rank}: {got}"
            continue
        assert "error" in got, f"rank {rank} raised nothing: {got}"
        assert got["error"][0] == kind, f"rank {rank}: {got['error']}"
        assert re.search(pattern, got["error"][1]), f"rank {rank}: {got['error'][1]!r}"


@pytest.mark.parametrize("n", WORLDS)
def test_destroy_then_init_again(n):
    for res in results(n):
        assert res["after_destroy"] == ("Default process group has not been initialized, "
                                        "please make sure to call init_process_group.")
        assert res["reinit"] == "ok"
