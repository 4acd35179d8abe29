"""The recurrent op family: kernels and OpDefs."""
