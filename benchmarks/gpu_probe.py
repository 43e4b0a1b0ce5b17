"""The job ``benchmarks/gpu_sharing.py`` runs on a real GPU: one probe of what a share holds.

It runs as a FracHub training job (started by the local backend, with the environment
contract and the PyTorch hook), does one thing, and prints one JSON line with what it saw,
last in its log. It imports only the framework it probes, so that what it measures is that
framework's behaviour under FracHub's caps and nothing else.

    python gpu_probe.py fill torch|jax|cupy --ceiling-gib 80
    python gpu_probe.py alloc torch|jax|cupy --gib 30
    python gpu_probe.py matmul --seconds 8 --go FILE
    python gpu_probe.py fault
    python gpu_probe.py survive --seconds 12
    python gpu_probe.py hold --gib 52 --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

GIB = 1 << 30
MIB = 1 << 20


def say(**fields: object) -> None:
    print(json.dumps({"probe": True, **fields}), flush=True)


# -- each framework's way to allocate, free and report memory ---------------------------------


class Torch:
    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.cuda.init()

    def seen(self) -> dict[str, float]:
        cuda = self.torch.cuda
        free, total = cuda.mem_get_info()
        real = getattr(cuda.mem_get_info, "__wrapped__", None)
        seen = {"free_gib": free / GIB, "total_gib": total / GIB}
        if real is not None:
            real_free, real_total = real()
            seen.update(real_free_gib=real_free / GIB, real_total_gib=real_total / GIB)
        return seen

    def alloc(self, size: int) -> object:
        return self.torch.empty(size, dtype=self.torch.uint8, device="cuda")

    def oom(self) -> tuple[type[BaseException], ...]:
        return (self.torch.cuda.OutOfMemoryError, RuntimeError)


class Jax:
    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.device = jax.devices("gpu")[0]

    def seen(self) -> dict[str, float]:
        stats = self.device.memory_stats() or {}
        return {
            "bytes_limit_gib": stats.get("bytes_limit", 0) / GIB,
            "in_use_gib": stats.get("bytes_in_use", 0) / GIB,
        }

    def alloc(self, size: int) -> object:
        array = self.jnp.zeros((size // 4,), dtype=self.jnp.float32)
        return array.block_until_ready()

    def oom(self) -> tuple[type[BaseException], ...]:
        return (Exception,)


class Cupy:
    """Raw CUDA through CuPy's runtime bindings (``cudaMalloc``): no allocator of a
    framework between the program and the driver, as in TensorRT, custom CUDA or vLLM's own
    allocator."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy
        self.runtime = cupy.cuda.runtime
        self.runtime.setDevice(0)

    def seen(self) -> dict[str, float]:
        free, total = self.runtime.memGetInfo()
        return {"free_gib": free / GIB, "total_gib": total / GIB}

    def alloc(self, size: int) -> object:
        return _Raw(self.runtime, self.runtime.malloc(size))

    def oom(self) -> tuple[type[BaseException], ...]:
        return (self.cupy.cuda.runtime.CUDARuntimeError, MemoryError)


class _Raw:
    def __init__(self, runtime, pointer: int) -> None:
        self.runtime, self.pointer = runtime, pointer

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.runtime.free(self.pointer)


FRAMEWORKS = {"torch": Torch, "jax": Jax, "cupy": Cupy}


def fill(framework: str, ceiling_gib: float) -> None:
    """Allocate in 1 GiB steps, then 64 MiB steps, until refused or at the ceiling."""
    fw = FRAMEWORKS[framework]()
    seen = fw.seen()
    held: list[object] = []
    total = 0
    error = ""
    for step in (GIB, 64 * MIB):
        while total + step <= ceiling_gib * GIB:
            try:
                held.append(fw.alloc(step))
            except fw.oom() as e:
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                break
            total += step
    say(
        action="fill",
        framework=framework,
        allocated_gib=round(total / GIB, 3),
        stopped=bool(error),
        error=error,
        seen=seen,
    )


def alloc(framework: str, gib: float) -> None:
    """Allocate exactly ``gib`` in one piece: what a job that asked for it needs."""
    fw = FRAMEWORKS[framework]()
    try:
        block = fw.alloc(int(gib * GIB))
        del block
        say(action="alloc", framework=framework, gib=gib, ok=True, error="")
    except fw.oom() as e:
        first = str(e).splitlines()[0][:200]
        say(action="alloc", framework=framework, gib=gib, ok=False, error=first)


def matmul(seconds: float, go: str, size: int = 8192) -> None:
    """bf16 matrix products for ``seconds`` once ``go`` exists: TFLOP/s this share got."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    say(action="ready")
    while go and not os.path.exists(go):
        time.sleep(0.005)
    began = time.perf_counter()
    count = 0
    while time.perf_counter() - began < seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        count += 10
    elapsed = time.perf_counter() - began
    say(action="matmul", tflops=round(2 * size**3 * count / elapsed / 1e12, 1))


def fault() -> None:
    """An illegal address in a kernel: the fault every buggy CUDA program can raise."""
    import cupy

    kernel = cupy.RawKernel(
        r'extern "C" __global__ void bad(int* p) { p[threadIdx.x] = 1; }', "bad"
    )
    time.sleep(1.0)
    try:
        kernel((1,), (32,), (cupy.uint64(0x10),))
        cupy.cuda.runtime.deviceSynchronize()
        say(action="fault", raised=False, error="")
    except Exception as e:
        say(action="fault", raised=True, error=str(e).splitlines()[0][:200])
        sys.exit(1)


def survive(seconds: float) -> None:
    """Keep the GPU busy for ``seconds``; say whether that went through unharmed."""
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    say(action="ready")
    began = time.perf_counter()
    try:
        while time.perf_counter() - began < seconds:
            (a @ a).sum().item()
        say(action="survive", ok=True, error="")
    except Exception as e:
        say(action="survive", ok=False, error=str(e).splitlines()[0][:200])
        sys.exit(1)


def hold(gib: float, seconds: float) -> None:
    """Take ``gib`` with raw CUDA in 1 GiB pieces and hold it: the program the watchdog is
    for. Says when it held it all (``over_at``, Unix seconds)."""
    fw = Cupy()
    held = [fw.alloc(GIB) for _ in range(int(gib))]
    say(action="holding", gib=len(held), over_at=time.time())
    time.sleep(seconds)
    say(action="hold", survived=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("fill")
    p.add_argument("framework", choices=FRAMEWORKS)
    p.add_argument("--ceiling-gib", type=float, default=80)
    p = sub.add_parser("alloc")
    p.add_argument("framework", choices=FRAMEWORKS)
    p.add_argument("--gib", type=float, required=True)
    p = sub.add_parser("matmul")
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--go", default="")
    sub.add_parser("fault")
    p = sub.add_parser("survive")
    p.add_argument("--seconds", type=float, default=12)
    p = sub.add_parser("hold")
    p.add_argument("--gib", type=float, required=True)
    p.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    if args.action == "fill":
        fill(args.framework, args.ceiling_gib)
    elif args.action == "alloc":
        alloc(args.framework, args.gib)
    elif args.action == "matmul":
        matmul(args.seconds, args.go)
    elif args.action == "fault":
        fault()
    elif args.action == "survive":
        survive(args.seconds)
    else:
        hold(args.gib, args.seconds)


if __name__ == "__main__":
    main()
