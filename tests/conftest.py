"""Session-wide test setup.

The CUDA backend's tests (and the cuda column of the parity tests) run on numba-cuda's
CUDA simulator when this machine has no NVIDIA GPU.  ``NUMBA_ENABLE_CUDASIM`` must be
set before ``numba.cuda`` is first imported (numba#3075), so it is set here, before
any test module imports accel or the backends.  Set ``NUMBA_ENABLE_CUDASIM=0`` in the
environment to opt out explicitly (the CUDA tests are then skipped without a GPU).
"""

import glob
import os


def _has_nvidia_gpu() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/proc/driver/nvidia/gpus")


if not _has_nvidia_gpu():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
