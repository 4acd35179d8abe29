#!/usr/bin/env bash
# Long differential runs against PyTorch (needs torch installed). CI runs a bounded slice
# of the same tests with their default budgets; this runs them longer, from a new seed
# unless one is given, and prints the seed so a failure can be replayed.
#   bash scripts/fuzz.sh [KEYS] [SEED]     e.g. bash scripts/fuzz.sh 200000 12345
set -euo pipefail
cd "$(dirname "$0")/.."
keys="${1:-100000}"
seed="${2:-$(date +%s)}"
echo "index keys: $keys, seed: $seed"
TAPEGRAD_INDEX_FUZZ="$keys" TAPEGRAD_FUZZ_SEED="$seed" \
  python -m pytest -q -p no:cacheprovider tests/ops/test_index_keys.py -k random_keys
