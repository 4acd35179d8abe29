"""The conv op family: kernels and OpDefs."""
