"""The fake Kubernetes API server (tests/kube/fakeapi.py) in a process of its own, for
benchmarks: in the benchmark's own process it shares one interpreter (and its lock) with the
clients that submit and poll, and at 500 nodes that interpreter, not FracHub, sets the pace.

    python -m tests.kube.fakeproc --nodes 500 --gpus 8 --kubeconfig /tmp/kubeconfig
    python -m tests.kube.fakeproc --layout nodes.json     # [[name, {label: value}], ...]

It adds the nodes (Ready, labelled as GPU feature discovery does, plus each layout entry's
labels), writes a kubeconfig, prints one JSON line ``{"url", "kubeconfig", "pid"}`` on
stdout once it answers, and serves until its stdin closes or it gets SIGTERM. Its
reservation pods report their GPU as the tests' do (``conftest.report_reserved_gpu``).
``FakeProcess`` starts one from Python and reads its ``/_fake/running`` view.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from urllib.parse import urlencode

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--nodes", type=int, default=0, help="nodes named kwok-0000, ...")
    parser.add_argument("--layout", default="", help="JSON file: [[name, {labels}], ...]")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--memory-mib", type=int, default=81920, help="memory per GPU")
    parser.add_argument("--kubeconfig", default="", help="write a kubeconfig here")
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))  # conftest imports hubharness from tests/
    from kube.conftest import report_reserved_gpu
    from kube.fakeapi import FakeKube

    if args.layout:
        layout = [
            (name, dict(labels)) for name, labels in json.loads(Path(args.layout).read_text())
        ]
    else:
        layout = [(f"kwok-{n:04d}", {}) for n in range(args.nodes)]
    fake = FakeKube()
    fake.port = args.port
    fake.start()
    fake.on_running.append(report_reserved_gpu)
    for name, labels in layout:
        fake.add_node(name, gpus=args.gpus, memory_mib=args.memory_mib, labels=labels)
    kubeconfig = fake.kubeconfig(args.kubeconfig, args.namespace) if args.kubeconfig else ""
    print(json.dumps({"url": fake.url, "kubeconfig": kubeconfig, "pid": os.getpid()}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    fake.stop()
    return 0


class FakeProcess:
    """``python -m tests.kube.fakeproc`` as a context manager: ``url``, ``kubeconfig``,
    ``running_url()`` and the process's CPU seconds (``cpu_seconds()``); ``profile``: a
    path where cProfile writes the server's profile when it ends."""

    def __init__(
        self, kubeconfig: str, *args: str, log: str | None = None, profile: str = ""
    ) -> None:
        profiled = ["-m", "cProfile", "-o", profile] if profile else []
        self.command = [
            sys.executable,
            *profiled,
            "-m",
            "tests.kube.fakeproc",
            "--kubeconfig",
            kubeconfig,
            *args,
        ]
        self.log = log
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.kubeconfig = kubeconfig

    def __enter__(self) -> FakeProcess:
        err = open(self.log, "w") if self.log else subprocess.DEVNULL
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE.parent)])}
        self.proc = subprocess.Popen(
            self.command,
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.proc.wait(10)
            raise RuntimeError(f"the fake API server did not start (exit {self.proc.returncode})")
        self.url = json.loads(line)["url"]
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.proc is None:
            return
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the fake's process has used so far (Linux /proc)."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def running_url(self, namespace: str, label_selector: str, label: str) -> str:
        """Where ``/_fake/running`` lists the Running pods of ``namespace`` that match
        ``label_selector``, each as [node, its ``label``'s value]."""
        query = urlencode({"namespace": namespace, "labelSelector": label_selector, "label": label})
        return f"{self.url}/_fake/running?{query}"


if __name__ == "__main__":
    sys.exit(main())
