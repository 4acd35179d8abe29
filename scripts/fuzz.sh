#!/usr/bin/env bash
# Long differential runs against PyTorch (needs torch installed). CI runs a bounded slice
# of the same tests with their default budgets; this runs them longer, from a new seed
# unless one is given, and prints the seed so a failure can be replayed.
#   bash scripts/fuzz.sh [KEYS] [SEED]     e.g. bash scripts/fuzz.sh 200000 12345
#   (GRAPH_CASES=50000 bash scripts/fuzz.sh: more random graphs, see scripts/fuzz_graphs.py)
set -euo pipefail
cd "$(dirname "$0")/.."
keys="${1:-100000}"
seed="${2:-$(date +%s)}"
echo "index keys: $keys, seed: $seed"
TAPEGRAD_INDEX_FUZZ="$keys" TAPEGRAD_FUZZ_SEED="$seed" \
  python -m pytest -q -p no:cacheprovider tests/ops/test_index_keys.py -k random_keys
# random graphs and wrong arguments against PyTorch, each case in a worker process (a crash
# is one finding): GRAPH_CASES cases of each kind from the seed (about 2 minutes per
# 10000 cases on 2 cores once kernels are cached)
cases="${GRAPH_CASES:-20000}"
echo "graph and argument cases: $cases from seed $seed"
python scripts/fuzz_graphs.py --seeds "$seed:$((seed + cases))" --workers 2
