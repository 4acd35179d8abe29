"""docs/api-coverage.md is what scripts/api_coverage.py writes from the installed PyTorch
and this checkout; and the script classifies names as it says."""
import importlib.util
import os

import pytest

from tests.helpers import REPO_ROOT

torch = pytest.importorskip("torch")


def _script():
    path = os.path.join(REPO_ROOT, "scripts", "api_coverage.py")
    spec = importlib.util.spec_from_file_location("api_coverage", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_coverage_page_is_current():
    cov = _script()
    with open(cov.PAGE) as f:
        assert f.read() == cov.page(), "docs/api-coverage.md is stale: run python scripts/api_coverage.py"


def test_names_are_classified_by_what_tapegrad_does_with_them():
    import tapegrad as tg
    cov = _script()
    assert cov.status(tg, "torch", "matmul") == ("supported", "")
    assert cov.status(tg, "torch", "no_such_name") == ("missing", "")
    kind, why = cov.status(tg, "torch", "float16")
    assert kind == "refused" and "float16 is not supported" in why
    assert cov.status(tg, "Tensor", "cuda")[0] == "refused"
    common = cov.read_common()
    assert set(common) == {"torch", "Tensor"} and len(common["torch"]) > 200
