"""The front: what users hold and call (Tensor, dtypes, devices, creation, promotion,
indexing, random draws and the functions of the ops), built on the op table and the
engine; see docs/design.md, "Layout"."""
