"""The norm op family: kernels and OpDefs."""
