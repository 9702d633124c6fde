"""accel as a GradBench tool (``python -m accel.adbench.gradbench``).

GradBench (see the GradBench section of the README) runs an *eval* that sends JSON
messages, one per line, to a *tool* on stdin and reads one JSON response per line from
its stdout.  This package is that tool:

* ``__main__``: the protocol loop (stdout carries only responses; everything else,
  including what numba or accel might print, goes to stderr).
* ``protocol``: message handling, the ``min_runs``/``min_seconds`` repetition rule and
  the timings (compilation reported as its own ``compile`` timing).
* ``evalfn``: :class:`~accel.adbench.gradbench.evalfn.EvalFunction`, the shape every
  eval's functions share (decode input -> compiled accel program -> encode output).
* one module per eval (``hello``, ``lse``, ``llsq``, ``gmm``, ``kmeans``, ``det``, ``ba``,
  ``ode``, ``lstm``, ``ht``, ``particle``, ``saddle``), each exporting ``FUNCTIONS``:
  function name -> ``EvalFunction`` (``descent``: the gradient descent ``particle`` and
  ``saddle`` share).
* ``compare``: runs evals against accel, GradBench's JAX/PyTorch tools and its
  hand-written C++ and tabulates the times.

The backend is ``cpu`` unless ``ACCEL_GRADBENCH_BACKEND`` names another (the tests use
the ``interpreter``).
"""
