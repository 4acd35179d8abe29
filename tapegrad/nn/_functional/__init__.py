"""nn.functional's topic modules; tapegrad.nn.functional gathers their public names."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
