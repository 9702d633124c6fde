"""Host orchestration of a kernel program on a GPU (or the CUDA simulator).

Like the CPU backend's runtime (both use ``backends.numba``'s argument checking,
``ArrVal``, control flow and host expression evaluator), the host walks the kernel
program in Python.  Differences:

* every array of a run lives on the device (``ArrVal`` leaves are device arrays): the
  inputs are copied to the device once per call, ``KUse`` constants once per runner,
  intermediate arrays never leave the device, and the results are copied back once;
* shapes, inner lengths and ``KAcond`` conditions are evaluated on the host; when they
  read an array (``Index``), only that element is copied back (``KAwhile`` copies back
  its rank-0 condition each iteration);
* a step is a kernel launch ``fn[blocks, threads](outs..., ins..., sizes..., err)``:
  ``threads`` is the block size, ``blocks`` at most ``max_blocks`` (the kernels loop
  grid-stride); folds launch one block per row, up to ``max_blocks``;
* with ``check_bounds`` the device flag array ``err`` is copied back after each kernel
  that can fail, and a failure raises ``OutOfBoundsError``.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from contextlib import contextmanager

import numpy as np

from accel.ast.types import ArrayT, int32, int64, leaves
from accel.errors import BackendError, OutOfBoundsError, ShapeError
from accel.fusion.kernels import (KAcond, KAwhile, KBlock, KFold, KGenerate, KPermute, KScan,
                                  KUse, KernelProgram, count_loops, show_kernel_program,
                                  step_label, step_outs)
from accel.memory import check_allocatable, out_of_memory
from accel.backends.numba import cache
from accel.backends.numba.host import (ArrVal, collect_uses, nest, read_input, result_layout,
                                       run_control, shape_of, shown, size_of)
from accel.backends.numba.hosteval import HostEval
from accel.backends.numba.kernelgen import ERR_SIZE
from accel.backends.numba.trees import rebuild

from . import codegen

#: Launch configuration on a GPU.  Under the simulator every CUDA thread is a Python
#: thread and every ``syncthreads`` a barrier among them, so smaller defaults are used
#: there (the results do not depend on them beyond floating-point reassociation).
GPU_BLOCK_SIZE = 128
GPU_MAX_BLOCKS = 1024
SIM_BLOCK_SIZE = 32
SIM_MAX_BLOCKS = 4


def simulator_enabled() -> bool:
    from .intrinsics import SIMULATOR
    return SIMULATOR


def default_launch() -> tuple:
    """``(block_size, max_blocks)``: ``$ACCEL_CUDA_BLOCK_SIZE``/``$ACCEL_CUDA_MAX_BLOCKS``,
    else 128/1024 on a GPU and 32/4 under the simulator."""
    sim = simulator_enabled()
    b = int(os.environ.get("ACCEL_CUDA_BLOCK_SIZE") or (SIM_BLOCK_SIZE if sim else
                                                       GPU_BLOCK_SIZE))
    m = int(os.environ.get("ACCEL_CUDA_MAX_BLOCKS") or (SIM_MAX_BLOCKS if sim else
                                                       GPU_MAX_BLOCKS))
    return b, m


_ERR = "\0err"  # the env entry of a run's device flag array (never an array name)


def _device_out_of_memory(e: Exception) -> bool:
    """Whether ``e`` is the driver's ``CUDA_ERROR_OUT_OF_MEMORY`` (numba-cuda has already
    freed its pending deallocations and retried once)."""
    code = getattr(e, "code", None)
    return code is not None and str(getattr(code, "name", code)) in (
        "CUDA_ERROR_OUT_OF_MEMORY", "2")


class Runner:
    """A kernel program compiled for CUDA: ``runner(args)`` runs it."""

    def __init__(self, kp: KernelProgram, check_bounds: bool = False,
                 block_size: int | None = None, max_blocks: int | None = None):
        from numba import cuda
        self.cuda = cuda
        self.kp = kp
        self.check_bounds = bool(check_bounds)
        db, dm = default_launch()
        self.block_size = int(block_size or db)
        self.max_blocks = int(max_blocks or dm)
        if self.max_blocks < 1:
            raise BackendError(f"cuda backend: max_blocks must be positive, got {max_blocks}")
        self.simulator = simulator_enabled()
        t0 = time.perf_counter()
        self.gen = codegen.generate(kp.body, self.check_bounds, self.block_size)
        t1 = time.perf_counter()
        self.module = cache.load(self.gen.source, kind="cuda")
        self._codegen_seconds = t1 - t0
        self._load_seconds = time.perf_counter() - t1
        self._compile_seconds = 0.0
        self._compiled: set = set()
        self._lock = threading.Lock()
        self._uses: dict = {}  # id(KUse) -> host ArrVal
        self._dev_uses: dict | None = None  # id(KUse) -> device ArrVal (first call)
        self._launches = 0
        self._calls = 0
        collect_uses(kp.body, self._uses, "cuda")

    # ---- preparation

    def _device(self, v: ArrVal) -> ArrVal:
        return ArrVal(v.shape, [self.cuda.to_device(b) for b in v.leaves])

    # ---- running

    @contextmanager
    def _quiet(self):
        """Under the simulator kernels run as Python on NumPy scalars, which warn on
        overflow, 1/0 and the like (the values are the GPU's: inf, nan, wrap-around)."""
        if not self.simulator:
            yield
            return
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            yield

    def __call__(self, args):
        args = list(args)
        params = self.kp.params
        if len(args) != len(params):
            raise ShapeError(f"program takes {len(params)} arguments, got {len(args)}")
        host = [read_input(x, p.type, f"argument {i} ({p.name})")
                for i, (p, x) in enumerate(zip(params, args))]
        with self._quiet():
            if self._dev_uses is None:
                self._dev_uses = {k: self._device(v) for k, v in self._uses.items()}
            env = {p.name: self._device(v) for p, v in zip(params, host)}
            env[_ERR] = self.cuda.to_device(np.zeros(ERR_SIZE, dtype=np.int64))
            self._block(self.kp.body, env)
            res = [env[r.name] for r in self.kp.body.result]
            out = self._outputs(res)
        self._calls += 1
        return out

    def _outputs(self, res: list):
        arrays: list = []
        layout = result_layout(self.kp.result_type, arrays)
        return nest(layout, [rebuild(t.elt, iter([b.copy_to_host().reshape(v.shape)
                                                         for b in v.leaves]))
                              for v, t in zip(res, arrays)])

    def _block(self, block: KBlock, env: dict) -> None:
        for s in block.steps:
            if isinstance(s, KUse):
                env[s.out.name] = self._dev_uses[id(s)]
            elif isinstance(s, (KAcond, KAwhile)):
                run_control(s, env, self._block)
            else:
                self._loop(s, env)

    def _grid(self, n: int) -> int:
        return max(1, min(self.max_blocks, -(-n // self.block_size)))

    def _loop(self, s, env: dict) -> None:
        plan = self.gen.plans[id(s)]
        ev = HostEval(env)
        vals: dict = {}
        launches = []  # (blocks, extra size values) per launch
        extra = []  # extra array arguments
        if isinstance(s, KGenerate):
            shape = shape_of(ev(s.shape), "generate")
            size = size_of(shape)
            outs = [self._alloc(s, o.type, shape, size) for o in s.outs]
            if size:
                launches.append((self._grid(size), {}))
        elif isinstance(s, (KFold, KScan)):
            op = "fold" if isinstance(s, KFold) else "scan"
            shape = shape_of(ev(s.shape), op)
            n = int(ev(s.n))
            if n < 0:
                raise ShapeError(f"{op}: negative inner length {n}")
            size = size_of(shape)
            vals[("n",)] = n
            if isinstance(s, KFold):
                if s.z is None and n == 0:
                    raise ShapeError(f"fold1: the innermost dimension is empty (shape "
                                     f"{shape + (0,)})")
                outs = [self._alloc(s, s.out.type, shape, size)]
                if size:
                    launches.append((max(1, min(self.max_blocks, size)), {}))
            else:
                kout = n + 1 if s.z is not None else n
                vals[("kout",)] = kout
                outs = [self._alloc(s, s.out.type, shape + (kout,), size * kout)]
                if size:
                    launches.append((self._grid(size), {}))
        elif isinstance(s, KPermute):
            shape = shape_of(ev(s.out_shape), "permute")
            sshape = shape_of(ev(s.shape), "permute")
            size, ssize = size_of(shape), size_of(sshape)
            vals[("ssize",)] = ssize
            for d, x in enumerate(sshape):
                vals[("src", d)] = x
            outs = [self._alloc(s, s.out.type, shape, size)]
            if plan.mode == "cas" and leaves(s.out.type.elt)[0].is_float:
                b = outs[0].leaves[0]
                extra.append(b.view(np.int64 if b.dtype.itemsize == 8 else np.int32))
            elif plan.mode == "lock":
                locks = self._alloc(s, ArrayT(int32, 1), (max(size, 1),), max(size, 1))
                extra.append(locks.leaves[0])  # one spin lock per target
            elif plan.mode == "winner":  # each target's winning source index
                wins = self._alloc(s, ArrayT(int64, 1), (max(size, 1),), max(size, 1))
                extra.append(wins.leaves[0])
            if size:
                launches.append((self._grid(size), {("phase",): 0}))
                if ssize:
                    launches.append((self._grid(ssize), {("phase",): 1}))
                    if plan.mode == "winner":
                        launches.append((self._grid(ssize), {("phase",): 2}))
        else:
            raise BackendError(f"cuda backend: unknown step {type(s).__name__}")
        vals[("size",)] = size
        for d, x in enumerate(shape):
            vals[("out", d)] = x
        ins = [env[a.name] for a in plan.inputs]
        bufs = ([b for o in outs for b in o.leaves] + extra
                + [b for a in ins for b in a.leaves])
        for blocks, more in launches:
            vals.update(more)
            sizes = [np.int64(ins[key[1]].shape[key[2]] if key[0] == "in" else vals[key])
                     for key in plan.layout]
            self._launch(plan.fn, blocks, bufs + sizes + [env[_ERR]])
            if self.check_bounds and plan.sites:
                self._check(plan, env, shape)
        for o, v in zip(step_outs(s), outs):
            env[o.name] = v

    def _check(self, plan, env: dict, shape: tuple) -> None:
        err = env[_ERR].copy_to_host()
        if err[0] != 0:
            site = plan.sites[int(err[0]) - 1]
            ix = tuple(int(i) for i in err[1:1 + site.rank])
            tshape = env[site.avar.name].shape if site.avar is not None else shape
            raise OutOfBoundsError(f"{site.what}: index {shown(ix)} is out of bounds for "
                                   f"shape {tshape}")

    def _alloc(self, s, t, shape: tuple, size: int) -> ArrVal:
        """Device arrays for an output of step ``s``; running out of device (or, under
        the simulator, host) memory raises ``OutOfMemoryError`` naming the step."""
        check_allocatable("cuda backend", step_label(s), shape, t.elt)
        try:
            return ArrVal(shape, [self.cuda.device_array(size, dtype=x.dtype)
                                  for x in leaves(t.elt)])
        except Exception as e:
            if isinstance(e, MemoryError) or _device_out_of_memory(e):
                raise out_of_memory("cuda backend", step_label(s), shape, t.elt,
                                    f"the allocation failed: {type(e).__name__}: {e}") from None
            raise BackendError(f"cuda backend: cannot allocate a device array of shape "
                               f"{shape}: {type(e).__name__}: {e}") from e

    def _launch(self, name: str, blocks: int, args: list) -> None:
        fn = getattr(self.module, name)
        first = name not in self._compiled
        t0 = time.perf_counter()
        try:
            fn[blocks, self.block_size](*args)
        except (OutOfBoundsError, ShapeError):
            raise
        except Exception as e:
            what = "compile" if first and not self.simulator else "run"
            raise BackendError(f"cuda backend: failed to {what} kernel {name}: "
                               f"{type(e).__name__}: {e}") from e
        if first:
            with self._lock:
                self._compiled.add(name)
                if not self.simulator:  # the first launch compiles (or loads the cache)
                    self._compile_seconds += time.perf_counter() - t0
        self._launches += 1

    # ---- introspection

    def show(self) -> str:
        """The kernel program, as text."""
        return show_kernel_program(self.kp)

    def source(self) -> str:
        """The generated numba-cuda module."""
        return self.gen.source

    def stats(self) -> dict:
        """Facts about the compiled program (``kernels``: parallel loops, as in
        ``count_loops``; ``launches``: kernel launches so far)."""
        return {
            "kernels": count_loops(self.kp.body),
            "functions": len({p.fn for p in self.gen.plans.values()}),
            "launches": self._launches,
            "compile_seconds": self._compile_seconds,
            "codegen_seconds": self._codegen_seconds,
            "load_seconds": self._load_seconds,
            "compiled_functions": len(self._compiled),
            "module": getattr(self.module, "__file__", None),
            "check_bounds": self.check_bounds,
            "block_size": self.block_size,
            "max_blocks": self.max_blocks,
            "simulator": self.simulator,
        }
