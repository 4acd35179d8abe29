"""tapegrad: PyTorch-style reverse-mode autograd on a flat tape, compiled with Numba."""
from ._engine.cache import kernel_cache as _kernel_cache

with _kernel_cache(engine=True):
    from ._engine import state as _state  # noqa: F401  (the engine core, under its own key)
with _kernel_cache():
    from .ops import elementwise as _elementwise  # noqa: F401  (registers the op table)
    from .ops import reduce as _reduce  # noqa: F401
    from .ops import linalg as _linalg  # noqa: F401
    from .ops import shape as _shape  # noqa: F401
    from .ops import along as _along  # noqa: F401
    from .ops import index as _index  # noqa: F401
    from .ops import loss as _loss  # noqa: F401

from ._dtype import dtype, float32, float64, int64, bool_ as bool, float, double, long  # noqa: A004
from .tensor import Tensor, Size, _install as _install_methods
from ._creation import (tensor, empty, zeros, ones, full, arange, rand, randn, zeros_like,
                        ones_like, empty_like, full_like, rand_like, randn_like, from_numpy,
                        manual_seed)
from . import _functions, _promotion, _indexing, _math

_install_methods()
_functions.install()
_promotion.install(globals())
_indexing.install(globals())
_math.install(globals())

from ._functions import *  # noqa: F401,F403,E402  (module-level op spellings)
from . import nn  # noqa: E402
from .serialization import save, load  # noqa: E402,F401
from . import autograd  # noqa: E402
from .autograd import (no_grad, enable_grad, inference_mode, set_grad_enabled,  # noqa: E402
                       is_grad_enabled)
from . import testing  # noqa: E402

__version__ = "0.1.0"
