#!/usr/bin/env bash
# The oldest and newest Numba that pyproject.toml admits, each in a fresh virtual
# environment, on a slice of the suite that exercises the engine, the op kernels, the
# kernel cache and the compile shortcuts (each checks for the Numba internals it uses).
#   bash scripts/numba_range.sh [VERSION ...]     (default: the range's two ends)
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(0.60.0 0.68.1)
slice="tests/autograd/test_semantics.py tests/ops/test_values.py tests/ops/test_index_keys.py
       tests/engine/test_compile_speed.py tests/engine/test_kernel_cache.py
       tests/optim/test_optimizers_schedulers.py"
for v in "${versions[@]}"; do
  venv="$(mktemp -d)/numba-$v"
  python -m venv "$venv"
  "$venv/bin/pip" install -q "numba==$v" scipy pytest hypothesis
  "$venv/bin/pip" install -q --no-deps -e .
  echo "== numba $v, numpy $("$venv/bin/python" -c 'import numpy; print(numpy.__version__)')"
  # a cache of its own: kernels compiled by one Numba never load in another
  TAPEGRAD_CACHE_DIR="$venv/cache" "$venv/bin/python" -m pytest -q -p no:cacheprovider $slice
done
