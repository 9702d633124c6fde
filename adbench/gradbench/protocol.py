"""GradBench's protocol: one response (a dict) per message, never an exception.

Messages are ``start``, ``define``, ``evaluate`` and ``analysis`` (GradBench's
CONTRIBUTING.md, "Protocol").  ``define`` of a module this tool does not implement
answers ``{"success": false}``; an ``evaluate`` that fails (unknown function, malformed
or wrongly shaped input, an accel error) answers ``"success": false`` with an ``error``
message, and the tool goes on to the next message.

Timings follow the ``min_runs``/``min_seconds`` rule: the function runs until it has
run ``min_runs`` times *and* spent ``min_seconds``; each run is one ``evaluate`` timing
covering only the compiled program's call (input decoding and output encoding are
outside it).  The first call of a (module, function, signature) traces and compiles
the program; that call is reported as a ``compile`` timing (its time includes that
one run) and is not counted as a run.
"""

from __future__ import annotations

import importlib
import time
import traceback

#: Module name -> Python module implementing it (each has ``FUNCTIONS``).
MODULES = {name: f"accel.adbench.gradbench.{name}"
           for name in ("hello", "lse", "llsq", "gmm", "kmeans", "det", "ba", "ode",
                             "lstm", "ht", "particle", "saddle")}


class Tool:
    """The tool's state: the modules defined so far and the signatures compiled."""

    def __init__(self):
        self.modules: dict = {}
        self.compiled: set = set()

    def handle_line(self, line: str) -> dict:
        """The response to one line of input (malformed JSON included)."""
        import json
        try:
            msg = json.loads(line)
        except ValueError as e:
            return {"id": None, "success": False, "error": f"malformed JSON message: {e}"}
        if not isinstance(msg, dict):
            return {"id": None, "success": False,
                    "error": f"a message must be a JSON object, got {type(msg).__name__}"}
        return self.handle(msg)

    def handle(self, msg: dict) -> dict:
        resp = {"id": msg.get("id")}
        kind = msg.get("kind")
        if kind == "start":
            resp["tool"] = "accel"
        elif kind == "define":
            resp.update(self.define(msg.get("module")))
        elif kind == "evaluate":
            resp.update(self.evaluate(msg))
        return resp

    def define(self, name) -> dict:
        if name not in MODULES:
            return {"success": False}
        if name not in self.modules:
            try:
                self.modules[name] = importlib.import_module(MODULES[name])
            except Exception as e:  # noqa: BLE001 -- reported to the eval
                return {"success": False, "error": _describe(e)}
        return {"success": True}

    def evaluate(self, msg: dict) -> dict:
        name, fname = msg.get("module"), msg.get("function")
        module = self.modules.get(name)
        if module is None:
            return {"success": False, "error": f"module {name!r} is not defined"}
        fn = module.FUNCTIONS.get(fname)
        if fn is None:
            known = ", ".join(sorted(module.FUNCTIONS))
            return {"success": False,
                    "error": f"module {name!r} has no function {fname!r} (it has: {known})"}
        inp = msg.get("input")
        try:
            min_runs, min_seconds = _runs(inp)
            args = fn.decode(inp)
            timings = []
            sig = (name, fname, fn.signature(args))
            if sig not in self.compiled:
                t0 = time.perf_counter_ns()
                out = fn.run(*args)
                timings.append({"name": "compile", "nanoseconds": time.perf_counter_ns() - t0})
                self.compiled.add(sig)
            runs, elapsed = 0, 0
            while runs < min_runs or elapsed < min_seconds * 1e9:
                t0 = time.perf_counter_ns()
                out = fn.run(*args)
                dt = time.perf_counter_ns() - t0
                timings.append({"name": "evaluate", "nanoseconds": dt})
                runs += 1
                elapsed += dt
            return {"success": True, "output": fn.encode(out), "timings": timings}
        except Exception as e:  # noqa: BLE001 -- any failure is this evaluation's answer
            return {"success": False, "error": _describe(e)}


def _runs(inp) -> tuple:
    """``(min_runs, min_seconds)`` of an input (``hello``'s have none: one run)."""
    if not isinstance(inp, dict):
        return 1, 0.0
    min_runs, min_seconds = inp.get("min_runs", 1), inp.get("min_seconds", 0)
    if not isinstance(min_runs, int) or not isinstance(min_seconds, (int, float)):
        from .evalfn import InputError
        raise InputError(f"min_runs/min_seconds must be numbers, got {min_runs!r}, "
                         f"{min_seconds!r}")
    return max(1, min_runs), float(min_seconds)


def _describe(e: BaseException) -> str:
    """An error message: the exception and where it was raised."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"
