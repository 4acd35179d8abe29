"""tapegrad.distributed's lifecycle on MPI ranks: a 1-rank job (MPI singleton), MPI that
the program initialised itself, and an uncaught exception on one rank ending the job
instead of hanging it."""
import os
import subprocess
import tempfile

from tests.distributed._mpi import (REPO_ROOT, WORKERS, mpi_env, mpirun_command,
                                    require_mpi, run_mpi_json)

LIFECYCLE = os.path.join(WORKERS, "lifecycle.py")


def test_one_rank_and_defaults():
    from tapegrad._engine.cache import CACHE_DIR
    (res,) = run_mpi_json(LIFECYCLE, n=1, args=("basic",))
    # (the harness gives each rank one thread and the test process's kernel cache)
    assert res == {"rank": 0, "world": 1, "sum": [0.0, 0.0], "mpi4py_before_init": False,
                   "we_initialised": True, "backend": "mpi", "initialized": True,
                   "threads": 1, "cache": os.path.dirname(CACHE_DIR)}


def test_mpi_initialised_by_the_program_is_used_not_finalised():
    res = run_mpi_json(LIFECYCLE, n=2, args=("user_mpi",))
    for r, got in enumerate(res):
        assert got["rank"] == r and got["world"] == 2 and got["sum"] == [1.0, 1.0]
        assert got["mpi4py_before_init"] and not got["we_initialised"]


def test_an_uncaught_exception_ends_the_job_instead_of_hanging():
    require_mpi()
    with tempfile.TemporaryDirectory() as out:
        # (a hang, the failure this guards against, ends in the timeout's exception)
        proc = subprocess.run(mpirun_command(LIFECYCLE, 2, ("crash",), out), env=mpi_env(),
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        with open(os.path.join(out, "1", "rank.1", "stderr")) as f:
            err = f.read()
    assert proc.returncode != 0
    assert "ValueError: this rank fails" in err
    assert "not reached" not in proc.stdout
