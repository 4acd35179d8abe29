"""The committed type stub of Tensor is what scripts/make_stubs.py writes now, so editors
see every method, including those registered by the front's modules."""
import importlib.util
import os

from tests.helpers import REPO_ROOT


def _make_stubs():
    path = os.path.join(REPO_ROOT, "scripts", "make_stubs.py")
    spec = importlib.util.spec_from_file_location("make_stubs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_stub_is_current():
    make_stubs = _make_stubs()
    with open(make_stubs.STUB) as f:
        committed = f.read()
    assert committed == make_stubs.stub_text(), "run: python scripts/make_stubs.py"


def test_the_stub_lists_registered_methods_with_their_parameters():
    from tapegrad._front.methods import METHODS
    text = _make_stubs().stub_text()
    for name in METHODS:
        assert f"def {name}(" in text or f"    {name}: Any" in text, name
    assert "def add(self, other, *, alpha=...) -> Any: ..." in text
    assert "def backward(self, gradient=..., retain_graph=..., create_graph=..., " \
           "inputs=...) -> Any: ..." in text
