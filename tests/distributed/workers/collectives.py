"""Runs on every rank (mpirun -n N): each collective of tapegrad.distributed against its
definition, computed with NumPy from every rank's input (each rank can make every other
rank's input: it is seeded by the case and the rank), and each bad input. Prints one JSON
line: {case: result}, where a result is "ok", a mismatch's description, or
{"error": [type, message]} for the error cases (tests/distributed/test_collectives.py
asserts them). With TRACE_CASES=1 each rank names every case on stderr as it starts
(to find the case a hang is in)."""
import json
import os
import sys
import traceback
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import tapegrad as tg  # noqa: E402
import tapegrad.distributed as dist  # noqa: E402
from tapegrad._front.tensor import _numpy_view  # noqa: E402

DTYPES = {"float32": tg.float32, "float64": tg.float64, "int64": tg.int64, "bool": tg.bool}
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
SHAPE = (3, 4)


def values(case, rank, dtype, shape=SHAPE):
    """Rank `rank`'s input for a case: exact in every dtype (quarters and small ints), so
    sums and products do not depend on the order MPI adds them in."""
    rng = np.random.default_rng([zlib.crc32(case.encode()), rank])
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "int64":
        return rng.integers(-4, 5, size=shape).astype(np.int64)
    return (rng.integers(-8, 9, size=shape) / 4).astype(dtype)


def tensor(a):
    return tg.tensor(a)


def arr(t):
    return np.array(_numpy_view(t))


def reduce_np(arrays, op, dtype):
    """The definition of each ReduceOp over the ranks' arrays (bools logically, as
    tapegrad documents)."""
    a = np.stack(arrays)
    if dtype == "bool":
        return {"SUM": a.any(0), "MAX": a.any(0), "BOR": a.any(0), "PRODUCT": a.all(0),
                "MIN": a.all(0), "BAND": a.all(0),
                "BXOR": np.logical_xor.reduce(a, 0)}[op]
    if op == "AVG":
        return (a.sum(0) / len(arrays)).astype(dtype)
    return {"SUM": lambda: a.sum(0), "PRODUCT": lambda: a.prod(0), "MIN": lambda: a.min(0),
            "MAX": lambda: a.max(0), "BAND": lambda: np.bitwise_and.reduce(a, 0),
            "BOR": lambda: np.bitwise_or.reduce(a, 0),
            "BXOR": lambda: np.bitwise_xor.reduce(a, 0)}[op]().astype(dtype)


def same(got, want, what="result"):
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        return f"{what}: got {got.dtype} {got.shape} {got.tolist()}, want {want.dtype} " \
               f"{want.shape} {want.tolist()}"
    return "ok"


def supported(op, dtype):
    if op == "AVG" and dtype in ("int64", "bool"):
        return False
    if op in ("BAND", "BOR", "BXOR") and dtype in ("float32", "float64"):
        return False
    return True


CASES = {}      # name -> function(rank, n) returning "ok" / a mismatch / raising


def case(name):
    def deco(fn):
        CASES[name] = fn
        return fn
    return deco


def _reduce_case(dt, op, async_op):
    def run(r, n):
        name = f"all_reduce/{dt}/{op}"
        x = tensor(values(name, r, dt))
        out = dist.all_reduce(x, getattr(dist.ReduceOp, op), async_op=async_op)
        if async_op:
            if not isinstance(out, dist.Work) or out.wait() is not True or \
                    not out.is_completed():
                return f"async: {out!r}"
        elif out is not None:
            return f"returned {out!r}"
        return same(arr(x), reduce_np([values(name, k, dt) for k in range(n)], op, dt))
    return run


for _dt in DTYPES:
    for _op in OPS:
        if supported(_op, _dt):
            CASES[f"all_reduce/{_dt}/{_op}"] = _reduce_case(_dt, _op, False)
    CASES[f"all_reduce_async/{_dt}/SUM"] = _reduce_case(_dt, "SUM", True)
    CASES[f"all_reduce_async/{_dt}/MAX"] = _reduce_case(_dt, "MAX", True)


@case("all_reduce/float64/AVG/async")
def _(r, n):
    x = tensor(values("avg", r, "float64"))
    dist.all_reduce(x, dist.ReduceOp.AVG, async_op=True).wait()
    return same(arr(x), reduce_np([values("avg", k, "float64") for k in range(n)], "AVG",
                                  "float64"))


@case("all_reduce/non_contiguous")
def _(r, n):
    x = tensor(values("nc", r, "float32", (4, 3))).t()
    before = x._version
    dist.all_reduce(x)
    want = reduce_np([values("nc", k, "float32", (4, 3)) for k in range(n)], "SUM",
                     "float32").T
    return same(arr(x), want) if x._version > before else "version not bumped"


@case("all_reduce/view_of_a_bigger_tensor")
def _(r, n):
    base = tensor(values("view", r, "float64", (5, 4)))
    x = base[1:3]                       # contiguous, at an offset into the storage
    dist.all_reduce(x)
    want = values("view", r, "float64", (5, 4))
    want[1:3] = sum(values("view", k, "float64", (5, 4)) for k in range(n))[1:3]
    return same(arr(base), want)


@case("all_reduce/0d_and_empty")
def _(r, n):
    x = tg.tensor(float(r + 1))
    e = tg.zeros(0, 3)
    dist.all_reduce(x)
    dist.all_reduce(e)
    return same(arr(x), np.float32(n * (n + 1) / 2)) if tuple(e.shape) == (0, 3) else "empty"


@case("all_reduce/bumps_version_saved_tensor_caught")
def _(r, n):
    a = tg.ones(3, requires_grad=True)
    y = a.exp()                         # exp saves its output for backward
    dist.all_reduce(y)
    try:
        y.sum().backward()
    except RuntimeError as e:
        ok = "modified by an inplace operation" in str(e)
        return "ok" if ok else f"wrong message {e}"
    return "backward did not notice"


@case("all_reduce/leaf_requiring_grad")
def _(r, n):
    a = tg.full((2,), float(r), requires_grad=True)
    dist.all_reduce(a)
    return same(arr(a), np.full(2, n * (n - 1) / 2, np.float32))


@case("all_reduce/unchecked")
def _(r, n):
    x = tensor(values("unchecked", r, "float32"))
    with dist._unchecked():
        w = dist.all_reduce(x, async_op=True)
    w.wait()
    return same(arr(x), reduce_np([values("unchecked", k, "float32") for k in range(n)],
                                  "SUM", "float32"))


def _bcast_case(dt, async_op):
    def run(r, n):
        res = []
        for src in range(n):
            name = f"broadcast/{dt}/{src}"
            x = tensor(values(name, r, dt))
            w = dist.broadcast(x, src, async_op=async_op)
            if async_op:
                w.wait()
            res.append(same(arr(x), values(name, src, dt), f"src {src}"))
        bad = [x for x in res if x != "ok"]
        return bad[0] if bad else "ok"
    return run


for _dt in DTYPES:
    CASES[f"broadcast/{_dt}"] = _bcast_case(_dt, False)
    CASES[f"broadcast_async/{_dt}"] = _bcast_case(_dt, True)


@case("broadcast/group_src_keyword")
def _(r, n):
    x = tensor(values("gsrc", r, "int64"))
    dist.broadcast(x, group_src=n - 1)
    return same(arr(x), values("gsrc", n - 1, "int64"))


@case("broadcast/non_contiguous")
def _(r, n):
    x = tensor(values("bnc", r, "float64", (4, 6)))[:, ::2]
    dist.broadcast(x, 0)
    return same(arr(x), values("bnc", 0, "float64", (4, 6))[:, ::2])


def _reduce_to_case(dt, op, async_op):
    def run(r, n):
        name = f"reduce/{dt}/{op}"
        dst = n - 1
        x = tensor(values(name, r, dt))
        w = dist.reduce(x, dst, getattr(dist.ReduceOp, op), async_op=async_op)
        if async_op:
            w.wait()
        if r == dst:
            return same(arr(x), reduce_np([values(name, k, dt) for k in range(n)], op, dt))
        return same(arr(x), values(name, r, dt), "non-destination tensor")
    return run


for _dt in DTYPES:
    CASES[f"reduce/{_dt}/SUM"] = _reduce_to_case(_dt, "SUM", False)
    CASES[f"reduce/{_dt}/MIN"] = _reduce_to_case(_dt, "MIN", False)
CASES["reduce_async/float32/SUM"] = _reduce_to_case("float32", "SUM", True)
CASES["reduce/float32/AVG"] = _reduce_to_case("float32", "AVG", False)


def _gather_case(dt, async_op):
    def run(r, n):
        name = f"all_gather/{dt}"
        out = [tg.zeros(SHAPE, dtype=DTYPES[dt]) for _ in range(n)]
        w = dist.all_gather(out, tensor(values(name, r, dt)), async_op=async_op)
        if async_op:
            w.wait()
        return same(np.stack([arr(t) for t in out]),
                    np.stack([values(name, k, dt) for k in range(n)]))
    return run


for _dt in DTYPES:
    CASES[f"all_gather/{_dt}"] = _gather_case(_dt, False)
CASES["all_gather_async/float32"] = _gather_case("float32", True)


@case("all_gather/non_contiguous_outputs")
def _(r, n):
    outs = [tg.zeros(3, 2).t() for _ in range(n)]
    dist.all_gather(outs, tensor(values("agnc", r, "float32", (2, 3))))
    return same(np.stack([arr(t) for t in outs]),
                np.stack([values("agnc", k, "float32", (2, 3)) for k in range(n)]))


def _into_case(dt, async_op):
    def run(r, n):
        name = f"all_gather_into_tensor/{dt}"
        out = tg.zeros((n * SHAPE[0], SHAPE[1]), dtype=DTYPES[dt])
        w = dist.all_gather_into_tensor(out, tensor(values(name, r, dt)), async_op=async_op)
        if async_op:
            w.wait()
        return same(arr(out), np.concatenate([values(name, k, dt) for k in range(n)]))
    return run


for _dt in DTYPES:
    CASES[f"all_gather_into_tensor/{_dt}"] = _into_case(_dt, False)
CASES["all_gather_into_tensor_async/int64"] = _into_case("int64", True)


def _rs_case(dt, op, async_op):
    def run(r, n):
        name = f"reduce_scatter/{dt}/{op}"
        ins = [tensor(values(f"{name}/{j}", r, dt)) for j in range(n)]
        out = tg.zeros(SHAPE, dtype=DTYPES[dt])
        w = dist.reduce_scatter(out, ins, getattr(dist.ReduceOp, op), async_op=async_op)
        if async_op:
            w.wait()
        return same(arr(out), reduce_np([values(f"{name}/{r}", k, dt) for k in range(n)],
                                        op, dt))
    return run


def _rst_case(dt, op, async_op):
    def run(r, n):
        name = f"reduce_scatter_tensor/{dt}/{op}"
        x = tensor(values(name, r, dt, (n * 2, 3)))
        out = tg.zeros((2, 3), dtype=DTYPES[dt])
        w = dist.reduce_scatter_tensor(out, x, getattr(dist.ReduceOp, op), async_op=async_op)
        if async_op:
            w.wait()
        full = reduce_np([values(name, k, dt, (n * 2, 3)) for k in range(n)], op, dt)
        return same(arr(out), full[2 * r:2 * r + 2])
    return run


for _dt in DTYPES:
    CASES[f"reduce_scatter/{_dt}/SUM"] = _rs_case(_dt, "SUM", False)
    CASES[f"reduce_scatter_tensor/{_dt}/SUM"] = _rst_case(_dt, "SUM", False)
    CASES[f"reduce_scatter_tensor/{_dt}/MAX"] = _rst_case(_dt, "MAX", False)
CASES["reduce_scatter/float64/AVG"] = _rs_case("float64", "AVG", False)
CASES["reduce_scatter_async/float32/SUM"] = _rs_case("float32", "SUM", True)
CASES["reduce_scatter_tensor_async/float32/AVG"] = _rst_case("float32", "AVG", True)


def _gather_to_case(dt, async_op):
    def run(r, n):
        res = []
        for dst in (0, n - 1):
            name = f"gather/{dt}/{dst}"
            lst = [tg.zeros(SHAPE, dtype=DTYPES[dt]) for _ in range(n)] if r == dst else None
            w = dist.gather(tensor(values(name, r, dt)), lst, dst=dst, async_op=async_op)
            if async_op:
                w.wait()
            if r == dst:
                res.append(same(np.stack([arr(t) for t in lst]),
                                np.stack([values(name, k, dt) for k in range(n)])))
        bad = [x for x in res if x != "ok"]
        return bad[0] if bad else "ok"
    return run


def _scatter_case(dt, async_op):
    def run(r, n):
        res = []
        for src in (0, n - 1):
            name = f"scatter/{dt}/{src}"
            lst = [tensor(values(f"{name}/{j}", r, dt)) for j in range(n)] \
                if r == src else None
            out = tg.zeros(SHAPE, dtype=DTYPES[dt])
            w = dist.scatter(out, lst, src=src, async_op=async_op)
            if async_op:
                w.wait()
            res.append(same(arr(out), values(f"{name}/{r}", src, dt), f"src {src}"))
        bad = [x for x in res if x != "ok"]
        return bad[0] if bad else "ok"
    return run


for _dt in DTYPES:
    CASES[f"gather/{_dt}"] = _gather_to_case(_dt, False)
    CASES[f"scatter/{_dt}"] = _scatter_case(_dt, False)
CASES["gather_async/float32"] = _gather_to_case("float32", True)
CASES["scatter_async/int64"] = _scatter_case("int64", True)


@case("all_to_all_single/equal")
def _(r, n):
    x = tensor(values("a2a", r, "float64", (2 * n, 3)))
    out = tg.zeros(2 * n, 3, dtype=tg.float64)
    dist.all_to_all_single(out, x)
    want = np.concatenate([values("a2a", k, "float64", (2 * n, 3))[2 * r:2 * r + 2]
                           for k in range(n)])
    return same(arr(out), want)


@case("all_to_all_single/uneven")
def _(r, n):
    # rank k sends k + j + 1 rows to rank j
    def sends(k):
        return [k + j + 1 for j in range(n)]
    x = tensor(values("a2av", r, "int64", (sum(sends(r)), 2)))
    recv_rows = [sends(k)[r] for k in range(n)]
    out = tg.zeros(sum(recv_rows), 2, dtype=tg.int64)
    dist.all_to_all_single(out, x, recv_rows, sends(r))
    parts = []
    for k in range(n):
        start = sum(sends(k)[:r])
        parts.append(values("a2av", k, "int64", (sum(sends(k)), 2))[start:start + sends(k)[r]])
    return same(arr(out), np.concatenate(parts))


@case("all_to_all/lists")
def _(r, n):
    # rank k sends rank j a (k + 1, j + 1) int64 block
    ins = [tensor(values(f"a2al/{j}", r, "int64", (r + 1, j + 1))) for j in range(n)]
    outs = [tg.zeros(k + 1, r + 1, dtype=tg.int64) for k in range(n)]
    dist.all_to_all(outs, ins)
    return same(np.concatenate([arr(t).ravel() for t in outs]), np.concatenate(
        [values(f"a2al/{r}", k, "int64", (k + 1, r + 1)).ravel() for k in range(n)]))


@case("all_to_all/async_non_contiguous")
def _(r, n):
    ins = [tensor(values(f"a2aa/{j}", r, "float32", (3, 2))).t() for j in range(n)]
    outs = [tg.zeros(3, 2).t() for _ in range(n)]
    dist.all_to_all(outs, ins, async_op=True).wait()
    return same(np.stack([arr(t) for t in outs]),
                np.stack([values(f"a2aa/{r}", k, "float32", (3, 2)).T for k in range(n)]))


@case("inside_compile_falls_back_to_eager")
def _(r, n):
    import warnings
    w = tg.nn.Parameter(tg.ones(3))

    def step(x):
        loss = (w * x).sum()
        loss.backward()
        dist.all_reduce(w.grad)       # Python reads the tensor's memory: a graph break
        return loss
    f = tg.compile(step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            w.grad = None
            loss = f(tg.full((3,), float(r + i)))
    if not any(issubclass(c.category, tg.CompileWarning) for c in caught):
        return "no CompileWarning"
    res = same(arr(w.grad), np.full(3, sum(k + 2 for k in range(n)), np.float32))
    return res if res != "ok" else same(arr(loss), np.float32(3 * (r + 2)), "loss")


@case("barrier")
def _(r, n):
    if dist.barrier() is not None:
        return "barrier returned something"
    w = dist.barrier(async_op=True)
    return "ok" if w.wait() and w.is_completed() else "async barrier"


@case("send_recv/ring")
def _(r, n):
    right, left = (r + 1) % n, (r - 1) % n
    got = tg.zeros(SHAPE, dtype=tg.float64)
    if r % 2 == 0:
        dist.send(tensor(values("ring", r, "float64")), right, tag=3)
        src = dist.recv(got, left, tag=3)
    else:
        src = dist.recv(got, left, tag=3)
        dist.send(tensor(values("ring", r, "float64")), right, tag=3)
    if src != left:
        return f"recv returned {src}"
    return same(arr(got), values("ring", left, "float64"))


@case("send_recv/any_source_and_tags")
def _(r, n):
    if r == 0:
        res = []
        for _ in range(n - 1):
            got = tg.zeros(2, dtype=tg.int64)
            src = dist.recv(got, tag=5)
            res.append(same(arr(got), np.array([src, 5 * src], np.int64), f"from {src}"))
        bad = [x for x in res if x != "ok"]
        return bad[0] if bad else "ok"
    dist.send(tg.tensor([r, 5 * r]), 0, tag=5)
    return "ok"


@case("isend_irecv")
def _(r, n):
    right, left = (r + 1) % n, (r - 1) % n
    got = tg.zeros(SHAPE, dtype=tg.bool)
    reqs = [dist.irecv(got, left, tag=1),
            dist.isend(tensor(values("iring", r, "bool")), right, tag=1)]
    for w in reqs:
        w.wait()
    return same(arr(got), values("iring", left, "bool"))


@case("isend_to_blocking_recv")
def _(r, n):
    if r == 0:
        works = [dist.isend(tg.full((2,), float(j)), j) for j in range(1, n)]
        for w in works:
            w.wait()
        return "ok"
    got = tg.zeros(2)
    dist.recv(got, 0)
    return same(arr(got), np.full(2, float(r), np.float32))


@case("new_group")
def _(r, n):
    ranks = [0, n - 1] if n > 2 else [1]
    g = dist.new_group(ranks)
    if r not in ranks:
        if g != dist.GroupMember.NON_GROUP_MEMBER or dist.get_rank(g) != -1:
            return f"non-member got {g!r}"
        return "ok"
    if dist.get_world_size(g) != len(ranks) or dist.get_rank(g) != ranks.index(r):
        return f"size/rank {dist.get_world_size(g)} {dist.get_rank(g)}"
    if dist.get_process_group_ranks(g) != ranks:
        return f"ranks {dist.get_process_group_ranks(g)}"
    x = tensor(values("group", r, "int64"))
    dist.all_reduce(x, group=g)
    res = same(arr(x), reduce_np([values("group", k, "int64") for k in ranks], "SUM",
                                 "int64"))
    y = tensor(values("gb", r, "float32"))
    dist.broadcast(y, src=ranks[-1], group=g)          # src: a global rank
    res2 = same(arr(y), values("gb", ranks[-1], "float32"), "group broadcast")
    lst = [tg.zeros(SHAPE) for _ in ranks]
    dist.all_gather(lst, tensor(values("gag", r, "float32")), group=g)
    res3 = same(np.stack([arr(t) for t in lst]),
                np.stack([values("gag", k, "float32") for k in ranks]), "group all_gather")
    dist.destroy_process_group(g)
    return next((x for x in (res, res2, res3) if x != "ok"), "ok")


@case("group_world")
def _(r, n):
    w = dist.GroupMember.WORLD
    if w is None or dist.group.WORLD is not w or dist.get_rank(w) != r:
        return f"WORLD {w!r}"
    x = tg.ones(2)
    dist.all_reduce(x, group=w)
    return same(arr(x), np.full(2, n, np.float32))


@case("objects")
def _(r, n):
    got = [None] * n
    dist.all_gather_object(got, {"rank": r})
    objs = [f"from {r}", r] if r == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    if got != [{"rank": k} for k in range(n)] or objs != ["from 0", 0]:
        return f"{got} {objs}"
    return "ok"


# ------------------------------------------------------------------ bad input
def shape_by_rank(r, n):
    dist.all_reduce(tg.ones(2 + r, 3))


def dtype_by_rank(r, n):
    dist.all_reduce(tg.ones(2, dtype=tg.float64 if r else tg.float32))


def op_by_rank(r, n):
    dist.all_reduce(tg.ones(2), dist.ReduceOp.MAX if r else dist.ReduceOp.SUM)


def collective_by_rank(r, n):
    if r:
        dist.broadcast(tg.ones(2), 0)
    else:
        dist.all_reduce(tg.ones(2))


def broadcast_src_by_rank(r, n):
    dist.broadcast(tg.ones(2), r)


def bad_src_on_last_rank(r, n):
    dist.broadcast(tg.ones(2), n + 3 if r == n - 1 else 0)


def non_tensor_on_rank_0(r, n):
    dist.all_reduce([1.0, 2.0] if r == 0 else tg.ones(2))


def non_tensor_everywhere(r, n):
    dist.all_reduce(np.ones(2))


def all_gather_list_count(r, n):
    dist.all_gather([tg.zeros(2) for _ in range(n + 1)], tg.ones(2))


def all_gather_list_shape(r, n):
    dist.all_gather([tg.zeros(3)] + [tg.zeros(2) for _ in range(n - 1)], tg.ones(2))


def all_gather_list_not_tensors(r, n):
    dist.all_gather([5] * n, tg.ones(2))


def all_gather_into_wrong_size(r, n):
    dist.all_gather_into_tensor(tg.zeros(2 * n + 1), tg.ones(2))


def reduce_scatter_list_count(r, n):
    dist.reduce_scatter(tg.zeros(2), [tg.ones(2)] * (n + 1))


def avg_int(r, n):
    dist.all_reduce(tg.ones(2, dtype=tg.int64), dist.ReduceOp.AVG)


def avg_bool(r, n):
    dist.all_reduce(tg.ones(2, dtype=tg.bool), dist.ReduceOp.AVG)


def band_float(r, n):
    dist.all_reduce(tg.ones(2), dist.ReduceOp.BAND)


def premul_sum(r, n):
    dist.all_reduce(tg.ones(2), dist.ReduceOp.PREMUL_SUM)


def op_not_reduce_op(r, n):
    dist.all_reduce(tg.ones(2), "sum")


def expanded_tensor(r, n):
    dist.all_reduce(tg.ones(1, 3).expand(4, 3))


def expanded_output_on_last_rank(r, n):
    out = tg.zeros(1, 3).expand(n, 3) if r == n - 1 else tg.zeros(n, 3)
    dist.all_gather_into_tensor(out, tg.ones(3))


def gather_without_list(r, n):
    dist.gather(tg.ones(2), None, dst=0)


def scatter_without_list(r, n):
    dist.scatter(tg.ones(2), None, src=0)


def send_to_self(r, n):
    dist.send(tg.ones(2), r)


def send_to_nobody(r, n):
    dist.send(tg.ones(2), n + 5)


def recv_size_mismatch(r, n):
    if r == 0:
        dist.send(tg.ones(4), 1, tag=9)
        return "sent"
    if r == 1:
        dist.recv(tg.zeros(3), 0, tag=9)
    return "idle"


def irecv_truncation(r, n):
    if r == 0:
        dist.isend(tg.ones(5, dtype=tg.float64), 1, tag=11).wait()
        return "sent"
    if r == 1:
        dist.irecv(tg.zeros(3, dtype=tg.float64), 0, tag=11).wait()
    return "idle"


def all_to_all_wrong_output_shape(r, n):
    outs = [tg.zeros(3 if k == 0 and r == 1 else 2) for k in range(n)]
    dist.all_to_all(outs, [tg.ones(2) for _ in range(n)])


def all_to_all_single_splits_disagree(r, n):
    # every rank sends one row to each rank, but rank 0 expects two from rank 1
    want = [1] * n
    if r == 0:
        want[1] = 2
    dist.all_to_all_single(tg.zeros(sum(want), 2), tg.ones(n, 2), want, [1] * n)


def bad_tag(r, n):
    dist.send(tg.ones(2), (r + 1) % n, tag=-1)


def async_op_not_bool(r, n):
    dist.all_reduce(tg.ones(2), async_op="yes")


def new_group_rank_out_of_range(r, n):
    dist.new_group([0, n])


def new_group_ranks_by_rank(r, n):
    dist.new_group([r])


def new_group_bad_rank_on_rank_0(r, n):
    dist.new_group([0, 0] if r == 0 else [0])


def bad_group(r, n):
    dist.all_reduce(tg.ones(2), group=5)


def init_twice(r, n):
    dist.init_process_group("mpi")


def both_src_and_group_src(r, n):
    dist.broadcast(tg.ones(2), 0, group_src=0)


ERRORS = [shape_by_rank, dtype_by_rank, op_by_rank, collective_by_rank,
          broadcast_src_by_rank, bad_src_on_last_rank, non_tensor_on_rank_0,
          non_tensor_everywhere, all_gather_list_count, all_gather_list_shape,
          all_gather_list_not_tensors, all_gather_into_wrong_size, reduce_scatter_list_count,
          avg_int, avg_bool, band_float, premul_sum, op_not_reduce_op, expanded_tensor,
          expanded_output_on_last_rank,
          gather_without_list, scatter_without_list, send_to_self, send_to_nobody,
          recv_size_mismatch, irecv_truncation, all_to_all_wrong_output_shape,
          all_to_all_single_splits_disagree, bad_tag,
          async_op_not_bool,
          new_group_rank_out_of_range, new_group_ranks_by_rank,
          new_group_bad_rank_on_rank_0, bad_group, init_twice, both_src_and_group_src]


def main():
    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    out = {"_rank": r, "_world": n}
    for name, fn in CASES.items():
        if os.environ.get("TRACE_CASES"):
            print(r, name, file=sys.stderr, flush=True)
        try:
            out[name] = fn(r, n)
        except Exception:           # the case failed on this rank: say how
            out[name] = "raised " + traceback.format_exc(limit=4)
        dist.barrier()              # (a failed case cannot spill into the next one)
    for fn in ERRORS:
        try:
            out["error/" + fn.__name__] = {"returned": repr(fn(r, n))}
        except Exception as e:
            out["error/" + fn.__name__] = {"error": [type(e).__name__, str(e)]}
        dist.barrier()
    # a destroyed group is gone; a new one can start in the same process
    dist.destroy_process_group()
    try:
        dist.all_reduce(tg.ones(2))
        out["after_destroy"] = "no error"
    except ValueError as e:
        out["after_destroy"] = str(e)
    dist.init_process_group("mpi")
    x = tg.ones(2)
    dist.all_reduce(x)
    out["reinit"] = same(arr(x), np.full(2, n, np.float32))
    dist.destroy_process_group()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
