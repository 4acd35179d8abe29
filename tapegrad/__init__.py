"""tapegrad: PyTorch-style reverse-mode autograd on a flat tape, compiled with Numba.

The package is built in layers, each importing only from those below it:
_engine (the tables, op entry, the sweep), ops (the op table), _front (Tensor, dtypes,
creation, promotion, indexing and the functions of the ops), autograd, nn, optim,
replay and viz. Tensor's methods and this namespace's functions are collected by the front's
modules as they load and installed here, in one loop (_front/methods.py).
"""
# ruff: noqa: F401  (this module re-exports the public names)
import sys as _sys
import time as _time

_T0 = _time.perf_counter()
from ._engine.cache import kernel_cache as _kernel_cache

with _kernel_cache():
    from ._engine import core as _core  # (the engine core, under its own key)
from . import ops as _ops  # the op table, every family loaded

from ._front.dtype import dtype, float32, float64, int64, bool_ as bool, float, double, long  # noqa: A004
from ._front.dtype import (float16, half, bfloat16, float8_e4m3fn, float8_e5m2,  # noqa: A004
                           float8_e4m3fnuz, float8_e5m2fnuz, complex32, chalf, complex64,
                           cfloat, complex128, cdouble, uint8, uint16, uint32, uint64, int8,
                           int16, short, int32, int, finfo, iinfo, get_default_dtype,
                           set_default_dtype)
from ._front.device import device, set_default_device, get_default_device
from ._front.tensor import Tensor, Size
from ._front.creation import (tensor, empty, zeros, ones, full, arange, zeros_like,
                              ones_like, empty_like, full_like, from_numpy)
from ._front.generator import (Generator, default_generator, manual_seed, seed, initial_seed,
                               get_rng_state, set_rng_state)
from ._front import (nodes as _nodes, arithmetic as _arithmetic, promotion as _promotion,
                     indexing as _indexing, functions as _functions, math_ops as _math_ops,
                     ordering as _ordering, composite as _composite, sampling as _sampling,
                     generated as _generated, methods as _methods)
from ._front import assembly as _assembly, statistics as _statistics, storage as _storage
from ._front import statistics_ops as _statistics_ops, scatter_ops as _scatter_ops
from . import autograd
from .autograd import no_grad, enable_grad, inference_mode, set_grad_enabled, is_grad_enabled
from .autograd.anomaly_mode import (is_anomaly_enabled, is_anomaly_check_nan_enabled,
                                     set_anomaly_enabled)


from ._front.functions import *  # noqa: F403  (module-level op spellings)
from ._front.utilities import *  # noqa: F403  (equal, isclose, eye, randint, ...)
from ._front.out_ops import *  # noqa: F403  (add, sum, cat, ... with out=)
from . import distributed  # (mpi4py is imported at init_process_group only)
from . import nn
# every method and function the modules above defined (nn's too: conv2d, max_pool2d, ...);
# names the star imports above put here first are kept
_methods.install(Tensor, globals())
from . import func
from .func import vmap
from . import optim
from . import utils
from .serialization import save, load
from . import testing
from . import random
from . import cuda, backends, accelerator
from ._front import linalg_ops as linalg
_sys.modules[__name__ + ".linalg"] = linalg     # (import tapegrad.linalg, as torch.linalg)
globals().update(linalg.LEGACY)
from . import viz
from .replay.compiled import compile, CompileWarning  # noqa: A004  (PyTorch's spelling)
from ._engine.state import set_num_threads, get_num_threads
from . import _docs
_docs.attach(Tensor, globals(), vars(nn.functional))

__version__ = "0.1.0"

_IMPORT_SECONDS = _time.perf_counter() - _T0     # (the demo reports it: a cold import compiles)
