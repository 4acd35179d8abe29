"""tapegrad: PyTorch-style reverse-mode autograd on a flat tape, compiled with Numba."""
# ruff: noqa: F401  (this module re-exports the public names)
import time as _time

_T0 = _time.perf_counter()
from ._engine.cache import kernel_cache as _kernel_cache

with _kernel_cache():
    from ._engine import core as _core  # noqa: F401  (the engine core, under its own key)
with _kernel_cache():
    from .ops import elementwise as _elementwise  # noqa: F401  (registers the op table)
    from .ops import reduce as _reduce  # noqa: F401
    from .ops import linalg as _linalg  # noqa: F401
    from .ops import shape as _shape  # noqa: F401
    from .ops import along as _along  # noqa: F401
    from .ops import index as _index  # noqa: F401
    from .ops import loss as _loss  # noqa: F401
    from .ops import function as _function  # noqa: F401
    from .ops import compare as _compare  # noqa: F401
    from .ops import linear as _linear_op  # noqa: F401

import os as _os

if not _os.environ.get("TAPEGRAD_KERNELS_ONLY"):
    # (set by `python -m tapegrad warmup --kernels-only` in a helper process: only the op
    # table, so the process compiles op kernels and never the engine core)
    from ._dtype import (dtype, float32, float64, int64, bool_ as bool, float,  # noqa: A004
                         double, long)
    from .tensor import Tensor, Size, _install as _install_methods
    from ._creation import (tensor, empty, zeros, ones, full, arange, rand, randn,
                            zeros_like, ones_like, empty_like, full_like, rand_like,
                            randn_like, from_numpy, manual_seed)
    from . import _functions, _promotion, _indexing, _math, _creation, _ordering, _composite

    _install_methods()
    _creation.install()
    _functions.install()
    _promotion.install(globals())
    _indexing.install(globals())
    _math.install(globals())
    _ordering.install(globals())
    _composite.install(globals())

    from ._functions import *  # noqa: F401,F403  (module-level op spellings)
    from ._utilities import *  # noqa: F401,F403  (equal, isclose, eye, randint, ...)
    from . import nn
    from . import optim
    from .serialization import save, load  # noqa: F401
    from . import autograd
    from .autograd import (no_grad, enable_grad, inference_mode, set_grad_enabled,
                           is_grad_enabled)
    from . import testing
    from .replay.compiled import compile, CompileWarning  # noqa: A004  (PyTorch's spelling)
    from ._engine.state import set_num_threads, get_num_threads
    from . import _docs
    _docs.attach(Tensor, globals(), vars(nn.functional))

__version__ = "0.1.0"

_IMPORT_SECONDS = _time.perf_counter() - _T0     # (the demo reports it: a cold import compiles)
