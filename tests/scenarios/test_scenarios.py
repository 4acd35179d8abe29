"""The programs in scenarios/, written as tutorials and courses write them, run on
tapegrad (and on PyTorch, where installed) and pass their own checks."""
import importlib.util
import pathlib

import pytest
from tests.helpers import REPO_ROOT

SCENARIOS = sorted((pathlib.Path(REPO_ROOT) / "scenarios").glob("*.py"))


def _load(path):
    spec = importlib.util.spec_from_file_location(f"scenario_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("lib", ["tapegrad", "torch"])
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_passes_its_own_checks(path, lib, capsys):
    if lib == "torch":
        pytest.importorskip("torch")
    assert _load(path).main(lib), capsys.readouterr().out
