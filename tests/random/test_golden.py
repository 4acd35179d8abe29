"""tapegrad's random draws against PyTorch's recorded ones (tests/random/golden.json,
written by scripts/make_random_golden.py): every case bit for bit, under both CPU builds
whose numbers differ (cpu_path "default" and "avx2"), and the stream left behind. Needs
no PyTorch."""
import json
import os

import numpy as np
import pytest

import tapegrad as tg
from tapegrad._front import sampling
from tests.random.cases import CASES, run

with open(os.path.join(os.path.dirname(__file__), "golden.json")) as _f:
    GOLDEN = json.load(_f)


@pytest.fixture(params=["default", "avx2"])
def cpu_path(request):
    saved = list(sampling._PATH)
    sampling.cpu_path(request.param)
    yield request.param
    sampling._PATH[:] = saved


def _bits(values, dtype):
    a = np.array(values, dtype=np.dtype(dtype))
    return a.view({1: np.int8, 4: np.int32, 8: np.int64}[a.itemsize]).tolist()


def _same(got, want):
    assert got["dtype"] == want["dtype"] and got["shape"] == want["shape"]
    assert got.get("sha256") == want.get("sha256")
    assert _bits(got["values"], got["dtype"]) == _bits(want["values"], want["dtype"])
    assert _bits(got["after"], "float32") == _bits(want["after"], "float32")


def test_golden_file_covers_every_case():
    for path in ("default", "avx2"):
        assert sorted(GOLDEN["paths"][path]) == sorted(name for name, _, _ in CASES)


@pytest.mark.parametrize("name,seed,fn", CASES, ids=[c[0] for c in CASES])
def test_pytorch_values(cpu_path, name, seed, fn):
    _same(run(tg, name, seed, fn), GOLDEN["paths"][cpu_path][name])
