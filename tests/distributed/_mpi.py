"""Running a worker script on N MPI ranks from a pytest test.

    from tests.distributed._mpi import run_mpi, run_mpi_json, WORKERS
    outs = run_mpi(os.path.join(WORKERS, "collectives.py"), n=2, args=("--quick",))
    outs[0], outs[1]            # each rank's stdout (a str), rank order

`run_mpi` launches `mpirun --allow-run-as-root --oversubscribe -n N sys.executable ...`
with every rank on one thread (TAPEGRAD_NUM_THREADS=1, OMP_NUM_THREADS=1), the parent's
kernel cache directory (TAPEGRAD_CACHE_DIR: ranks reuse what the test process compiled)
and the checkout first on PYTHONPATH. A target ending in ".py" (or naming a file) runs as
a script, anything else as a module (`python -m target`). A non-zero exit, a timeout or a
missing rank output fails the test with every rank's stderr; no mpirun or no mpi4py in
this Python skips it with the reason (set TAPEGRAD_REQUIRE_MPI=1 to fail instead, as CI
does where it installed Open MPI). `run_mpi_json` parses each rank's last stdout line as
JSON, the convention of the workers in tests/distributed/workers/. `mpirun_command` and
`mpi_env` give the same command line and environment to a test that runs mpirun itself
(to see a launch fail on purpose)."""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))

__all__ = ["HERE", "WORKERS", "REPO_ROOT", "mpi_env", "mpi_missing", "mpirun_command",
           "require_mpi", "run_mpi", "run_mpi_json"]


def mpi_missing():
    """Why the MPI tests cannot run here (a str), or None when mpirun and mpi4py exist."""
    if shutil.which("mpirun") is None:
        return "mpirun not found (install Open MPI: apt-get install openmpi-bin libopenmpi-dev)"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install -e '.[distributed]')"
    return None


def require_mpi():
    """Skips the calling test when MPI is missing (fails it under TAPEGRAD_REQUIRE_MPI=1)."""
    reason = mpi_missing()
    if reason is None:
        return
    if os.environ.get("TAPEGRAD_REQUIRE_MPI") == "1":
        pytest.fail(f"TAPEGRAD_REQUIRE_MPI=1 but {reason}")
    pytest.skip(reason)


def _cache_dir():
    from tapegrad._engine import cache
    return os.path.dirname(cache.CACHE_DIR)     # the root: ranks add the same version tag


def _env(extra):
    env = dict(os.environ)
    env["TAPEGRAD_NUM_THREADS"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["TAPEGRAD_CACHE_DIR"] = _cache_dir()
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + path if path else "")
    # as root, mpirun refuses to start without these (the flags below say the same)
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    # containers often forbid the cross-memory attach that Open MPI's shared-memory
    # transport tries first for large messages; copying through the shared segment works
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env.update(extra or {})
    return env


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def mpirun_command(target, n=2, args=(), output_dir=None):
    """The mpirun command line run_mpi uses (output_dir: mpirun's --output-filename)."""
    if target.endswith(".py") or os.path.isfile(target):
        program = [sys.executable, os.path.abspath(target)]
    else:
        program = [sys.executable, "-m", target]
    out = ["--output-filename", output_dir] if output_dir else []
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(n), *out,
            *program, *map(str, args)]


def mpi_env(extra=None):
    """The ranks' environment run_mpi uses (extra: added or overriding variables)."""
    return _env(extra)


def run_mpi(target, n=2, args=(), timeout=600, env=None):
    """Runs `target` (a script path, or a module name) on n ranks; returns the list of the
    ranks' stdouts (str, rank order). Fails the test (with each rank's stderr) when the
    launch exits non-zero or exceeds `timeout` seconds; skips it when MPI is missing.
    `env` adds or overrides environment variables of the ranks."""
    require_mpi()
    with tempfile.TemporaryDirectory(prefix="tapegrad-mpi-") as out:
        cmd = mpirun_command(target, n, args, out)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_env(env), cwd=REPO_ROOT, text=True,
                                start_new_session=True)
        timed_out = False
        try:
            launcher_out, launcher_err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)     # mpirun and its ranks (own session)
            launcher_out, launcher_err = proc.communicate()
        stdouts, stderrs = [], []
        for r in range(n):
            folder = os.path.join(out, "1", f"rank.{r}")
            stdouts.append(_read(os.path.join(folder, "stdout")))
            stderrs.append(_read(os.path.join(folder, "stderr")))
    failed = timed_out or proc.returncode != 0 or any(s is None for s in stdouts)
    if failed:
        why = (f"timed out after {timeout} s" if timed_out
               else f"exited with {proc.returncode}")
        parts = [f"mpirun -n {n} {' '.join(map(str, [target, *args]))} {why}"]
        for r in range(n):
            parts.append(f"--- rank {r} stdout:\n{(stdouts[r] or '')[-4000:]}")
            parts.append(f"--- rank {r} stderr:\n{(stderrs[r] or '(none)')[-8000:]}")
        parts.append(f"--- mpirun stderr:\n{launcher_err[-4000:]}")
        pytest.fail("\n".join(parts), pytrace=False)
    return [s or "" for s in stdouts]


def run_mpi_json(target, n=2, args=(), timeout=600, env=None):
    """run_mpi, then each rank's last non-empty stdout line parsed as JSON (rank order)."""
    outs = run_mpi(target, n=n, args=args, timeout=timeout, env=env)
    results = []
    for r, text in enumerate(outs):
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            pytest.fail(f"rank {r} printed nothing; its stdout was empty", pytrace=False)
        try:
            results.append(json.loads(lines[-1]))
        except ValueError:
            pytest.fail(f"rank {r}'s last line is not JSON:\n{text[-4000:]}", pytrace=False)
    return results
