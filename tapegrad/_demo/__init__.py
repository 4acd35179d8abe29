"""The demo's data sets and models (``python -m tapegrad demo --model ...``), written in
PyTorch's spelling as functions of the library (tapegrad or torch), so the same code
builds both sides of a comparison; the benchmarks and the scenario tests use them too."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
