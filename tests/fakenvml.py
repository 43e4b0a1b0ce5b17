"""A stand-in for ``pynvml`` (package nvidia-ml-py) as far as FracHub calls it, for machines
without NVIDIA GPUs: GPUs, their memory and utilization, and the compute processes on each
with the memory they hold.

The GPUs' state lives in a JSON file when ``state_file`` is given, read again at every call,
so a test can change what a service in another process sees::

    {"gpus": [{"utilization": 35, "processes": {"<pid>": <bytes>},
               "process_utilization": {"<pid>": <SM percent>}}, {...}]}

A GPU without ``process_utilization`` answers ``nvmlDeviceGetProcessUtilization`` with
NVML_ERROR_NOT_SUPPORTED (as some models and MIG do); with it, each call answers one sample
per listed pid, newer than the timestamp asked for, or NVML_ERROR_NOT_FOUND when none is
(an empty mapping). Temperature is 40 + utilization / 2 degrees and power 100 + 3 ×
utilization watts, so they move with the load.

A service picks the fake up from its config file (``install_line``), which runs before the
service first imports ``pynvml``. ``broken`` makes ``nvmlInit`` fail like a missing driver.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pynvml

GIB = 1 << 30
TESTS_DIR = Path(__file__).resolve().parent


class FakeNvml:
    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        broken: bool = False,
        *,
        state_file: str | os.PathLike[str] | None = None,
        gpus: int = 2,
        memory_gib: int = 80,
    ) -> None:
        self.broken = broken
        self.state_file = state_file
        self.gpus = gpus
        self.memory = memory_gib * GIB
        self.state: dict[str, Any] = {"gpus": [{} for _ in range(gpus)]}
        self.calls: list[str] = []

    # -- the test's side ------------------------------------------------------------------

    @classmethod
    def in_directory(cls, directory: str | os.PathLike[str], gpus: int = 2) -> FakeNvml:
        """A fake whose state lives in ``directory``'s ``nvml-state.json`` (written now, no
        process on any GPU): for a service in another process (``install_line``)."""
        fake = cls(state_file=Path(directory) / "nvml-state.json", gpus=gpus)
        fake.set_processes(0, {})
        return fake

    def set_processes(self, index: int, processes: dict[int, int]) -> None:
        """Pid -> bytes on GPU ``index`` (kept in memory, or written to the state file)."""
        state = self._state()
        state["gpus"][index]["processes"] = {str(pid): used for pid, used in processes.items()}
        self._save(state)

    def set_utilization(self, index: int, percent: int) -> None:
        state = self._state()
        state["gpus"][index]["utilization"] = percent
        self._save(state)

    def set_process_utilization(self, index: int, percents: dict[int, int] | None) -> None:
        """Pid -> SM percent on GPU ``index``; None: the GPU gives no per-process figures."""
        state = self._state()
        if percents is None:
            state["gpus"][index].pop("process_utilization", None)
        else:
            state["gpus"][index]["process_utilization"] = {
                str(pid): percent for pid, percent in percents.items()
            }
        self._save(state)

    def _state(self) -> dict[str, Any]:
        if self.state_file is not None and os.path.exists(self.state_file):
            return json.loads(Path(self.state_file).read_text())
        return self.state

    def _save(self, state: dict[str, Any]) -> None:
        self.state = state
        if self.state_file is not None:
            tmp = Path(f"{self.state_file}.tmp")
            tmp.write_text(json.dumps(state))
            tmp.replace(self.state_file)

    def _gpu(self, device: int) -> dict[str, Any]:
        return self._state()["gpus"][device]

    # -- pynvml's side --------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.broken:
            raise self.NVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, device: int) -> Any:
        used = sum(self._gpu(device).get("processes", {}).values())
        return type(
            "Memory", (), {"total": self.memory, "used": used, "free": self.memory - used}
        )()

    def nvmlDeviceGetUtilizationRates(self, device: int) -> Any:
        percent = self._gpu(device).get("utilization")
        if percent is None:
            raise self.NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED
        return type("Utilization", (), {"gpu": percent, "memory": 0})()

    def nvmlDeviceGetProcessUtilization(self, device: int, since: int) -> list[Any]:
        percents = self._gpu(device).get("process_utilization")
        if percents is None:
            raise self.NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED
        self.clock_us = max(getattr(self, "clock_us", 0), since) + 1
        if not percents:
            raise self.NVMLError(6)  # NVML_ERROR_NOT_FOUND: no sample since ``since``
        return [
            type(
                "Sample",
                (),
                {"pid": int(pid), "timeStamp": self.clock_us, "smUtil": percent, "memUtil": 0},
            )()
            for pid, percent in percents.items()
        ]

    def nvmlDeviceGetTemperature(self, device: int, sensor: int) -> int:
        return 40 + int(self._gpu(device).get("utilization") or 0) // 2

    def nvmlDeviceGetPowerUsage(self, device: int) -> int:
        return (100 + 3 * int(self._gpu(device).get("utilization") or 0)) * 1000  # milliwatts

    def nvmlDeviceGetComputeRunningProcesses(self, device: int) -> list[Any]:
        return [
            type("Process", (), {"pid": int(pid), "usedGpuMemory": used})()
            for pid, used in self._gpu(device).get("processes", {}).items()
        ]

    def nvmlDeviceGetUUID(self, device: int) -> bytes:
        return f"GPU-real-{device}".encode()

    def nvmlDeviceGetName(self, device: int) -> str:
        return "NVIDIA H100"


def install_line(state_file: str | os.PathLike[str], gpus: int = 2) -> str:
    """Lines of a service config file that make its ``pynvml`` this fake, reading
    ``state_file``."""
    return (
        f"import sys\nsys.path.insert(0, {str(TESTS_DIR)!r})\n"
        "from fakenvml import FakeNvml\n"
        f"sys.modules['pynvml'] = FakeNvml(state_file={str(state_file)!r}, gpus={gpus})\n"
    )
