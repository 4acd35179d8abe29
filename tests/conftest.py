import os
import sys

import pytest

# run from a checkout without installing: the package is the folder next to tests/
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tests/ and its subfolders are packages (each has an __init__.py): pytest imports a test
# module as tests.<folder>.<module>, so modules in different folders may share a name, and
# every module imports the shared helpers as tests.helpers.


@pytest.fixture
def grad_mode_is_restored():
    """Fails a test that leaves grad mode disabled (and re-enables it for the next one).
    A module asks for it for all its tests: pytestmark = usefixtures(...)."""
    import tapegrad as tg

    assert tg.is_grad_enabled()
    yield
    leaked = not tg.is_grad_enabled()
    if leaked:
        tg.set_grad_enabled(True)
    assert not leaked, "grad mode was left disabled"
