"""The pool op family: kernels and OpDefs."""
