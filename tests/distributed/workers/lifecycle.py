"""Small lifecycle checks on N ranks, chosen by argv[1]:
- "basic": init with the defaults, world size and rank, MPI initialised by us and
  finalised at exit; prints JSON.
- "crash": the last rank raises while the others wait in a collective: the uncaught
  exception must end the job (MPI_Abort) instead of leaving them waiting.
- "user_mpi": the program imported mpi4py.MPI (which initialised MPI) before
  init_process_group: tapegrad uses that MPI and leaves finalising it to mpi4py."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

mode = sys.argv[1]
if mode == "user_mpi":
    from mpi4py import MPI  # noqa: F401  (initialises MPI: mpi4py's default)

import tapegrad as tg  # noqa: E402
import tapegrad.distributed as dist  # noqa: E402
from tapegrad.distributed import distributed_c10d as c10d  # noqa: E402

before = "mpi4py" in sys.modules
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
if mode == "crash":
    if r == n - 1:
        raise ValueError("this rank fails")
    dist.all_reduce(tg.ones(2))          # waits for the failed rank forever without Abort
    print("not reached")
x = tg.full((2,), float(r))
dist.all_reduce(x)
print(json.dumps({"rank": r, "world": n, "sum": x.tolist(), "mpi4py_before_init": before,
                  "we_initialised": c10d._State.we_initialised,
                  "backend": dist.get_backend(), "initialized": dist.is_initialized(),
                  "threads": tg.get_num_threads(),
                  "cache": os.environ.get("TAPEGRAD_CACHE_DIR")}))
