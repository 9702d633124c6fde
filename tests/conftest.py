"""Session-wide test setup.

The CUDA backend's tests (and the cuda column of the parity tests) run on numba-cuda's
CUDA simulator when this machine has no NVIDIA GPU.  ``NUMBA_ENABLE_CUDASIM`` must be
set before ``numba.cuda`` is first imported (numba#3075), so it is set here, before
any test module imports accel or the backends.  Set ``NUMBA_ENABLE_CUDASIM=0`` in the
environment to opt out explicitly (the CUDA tests are then skipped without a GPU).

The cpu backend's tiered execution (first calls on NumPy while the kernels compile in a
worker process) is off for the whole session, whatever the environment says, so that
every cpu test runs the numba kernels; ``tests/test_tiered.py`` turns it on per
program (``A.compile(..., tiered=True)``).  The log line about long compilations is off.
The program cache (``accel.progcache``) is off too, so that every test runs the passes
it tests (some replace a pass to inject a fault); ``tests/test_progcache.py`` turns it on.
"""

import glob
import os


def _has_nvidia_gpu() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/proc/driver/nvidia/gpus")


os.environ["ACCEL_TIERED"] = "0"
os.environ["ACCEL_COMPILE_LOG"] = "0"
os.environ["ACCEL_PROGRAM_CACHE"] = "0"

if not _has_nvidia_gpu():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


import pytest  # noqa: E402  (after the environment above, as the module says)


@pytest.fixture
def small_parallel(monkeypatch):
    """The cpu backend launches phases in parallel from 4096 units of work rather than
    ``emitter.PAR_MIN_WORK`` (tuned for speed, large), so that tests of the parallel
    drivers reach them with small, fast inputs."""
    from accel.backends.cpu import plan
    monkeypatch.setattr(plan, "PAR_MIN_WORK", 4096)


#: The test files that take longest (over 75 s of one worker's time each in the
#: durations of a full run, mostly numba compiling), longest first.  The suite runs
#: file by file on two workers (``--dist loadfile``), handing files out in collection
#: order; a long file handed out last leaves the other worker idle until it ends, so
#: these are collected first and the short files fill in around them.
LONG_FILES = ("test_loop_higher_order.py", "test_cpu_backend.py", "test_permute_general.py",
              "test_cpu_layout.py", "test_while_reverse.py", "test_cpu_unravel.py",
              "test_contraction.py", "test_cpu_fold_lanes.py", "test_gradbench_nested.py",
              "test_corpus.py", "test_cuda_backend.py", "test_gather_adjoint.py",
              "test_loop_replay.py")


def pytest_collection_modifyitems(items):
    rank = {name: k for k, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))
