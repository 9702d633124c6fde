"""Compile workers that fail on purpose, for ``test_tiered`` (``worker.SERVE`` names one;
the worker process imports this module from the test session's ``sys.path``)."""

import os

from accel.backends.cpu import worker


def serve_compile_error(jobs_file, result_fd):
    """Every job ends as numba failing to compile a kernel."""
    def run(job):
        return {"id": job["id"], "status": "compile-error",
                "message": "cpu backend: numba failed to compile kernel k0_g: injected"}
    worker.serve(jobs_file, result_fd, run)


def serve_exit(jobs_file, result_fd):
    """The worker dies at once."""
    os._exit(3)
