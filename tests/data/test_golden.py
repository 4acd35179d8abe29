"""tapegrad's samplers, shuffled DataLoader and random_split give the indices PyTorch gave
for the same seeds (tests/data/golden_indices.json, written by
scripts/make_data_golden.py); no PyTorch needed."""
import importlib.util
import json
import os

import pytest
import tapegrad
from tests.helpers import REPO_ROOT

_HERE = os.path.dirname(os.path.abspath(__file__))


def _script():
    path = os.path.join(REPO_ROOT, "scripts", "make_data_golden.py")
    spec = importlib.util.spec_from_file_location("make_data_golden", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


with open(os.path.join(_HERE, "golden_indices.json")) as _f:
    GOLDEN = json.load(_f)["cases"]
MINE = _script().cases(tapegrad)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_indices_are_pytorchs(name):
    assert MINE[name] == GOLDEN[name]
