"""tapegrad's benchmarks.

* ``bench_core.py``: the asv suite (``asv run --python=same --quick``; see asv.conf.json).
* ``compare.py``: tapegrad against PyTorch, JAX and hand-written NumPy on the same
  workloads, as a Markdown table (``python -m benchmarks.compare``).

This file stays import-free: asv imports the package to discover benchmarks, and
``compare.py`` must set thread-count environment variables before NumPy, Numba or
PyTorch are first imported.
"""
