"""CPU and memory as users type them (``--cpu 2``, ``--memory 16G``, as Run:ai's ``runai
submit`` names them) and as the client shows them (``jobs``' CPU/MEM column, ``describe``),
and the quantities Kubernetes and KubeSpawner write."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

import pytest

from hub_ext.cli.main import build_parser
from hub_ext.client.arguments import cpu_cores, memory_size
from hub_ext.client.formatting import format_resources
from hub_ext.client.jobs import command_from, submission
from hub_ext.client.reports import describe_report, jobs_table
from scheduler.common.quantities import byte_spec_mib, kube_cpu, kube_memory, kube_quantity
from tests.unit.test_client_format import workload

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 22, 14, 10, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "cores"), [("2", 2.0), ("0.5", 0.5), ("500m", 0.5), ("1.25", 1.25), ("4096", 4096)]
)
def test_cpu_cores(text: str, cores: float) -> None:
    assert cpu_cores(text) == cores


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("two", "not a number of cores"),
        ("0", "must be above 0"),
        ("-1", "must be above 0"),
        ("5000", "at most 4096"),
        ("0.0001", "thousandths"),
        ("nan", "not a number of cores"),
    ],
)
def test_bad_cpu_cores(text: str, words: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        cpu_cores(text)


@pytest.mark.parametrize(
    ("text", "gib"),
    [("16G", 16.0), ("16GiB", 16.0), ("16", 16.0), ("512M", 0.5), ("512MiB", 0.5), ("1.5g", 1.5)],
)
def test_memory_sizes(text: str, gib: float) -> None:
    assert memory_size(text) == gib


@pytest.mark.parametrize("text", ["lots", "0", "-3G", "16T", "100000G"])
def test_bad_memory_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        memory_size(text)


def test_submit_sends_cpu_and_memory_only_when_given() -> None:
    words = ["submit", "-g", "0.5", "--cpu", "2", "--memory", "16G", "--", "python", "x.py"]
    args = build_parser().parse_args(words)
    body = submission(args, command_from(args.command), None)
    assert (body["cpu"], body["memory_gib"]) == (2.0, 16.0)
    args = build_parser().parse_args(["submit", "-g", "0.5", "--", "python", "x.py"])
    body = submission(args, command_from(args.command), None)
    assert "cpu" not in body and "memory_gib" not in body  # the service's default applies


def test_jobs_and_describe_show_what_was_asked() -> None:
    asked = workload(cpu=1.5, memory_gib=16.0)
    assert format_resources(asked) == "1.5/16G"
    assert format_resources(workload(cpu=0, memory_gib=0.5)) == "-/512M"
    assert format_resources(asked, words=True) == "1.5 CPUs and 16 GiB of memory per replica"
    header, first, second = str(jobs_table([asked, workload(id=3)], NOW)).splitlines()
    assert header.split()[6] == "CPU/MEM"
    at = header.index("CPU/MEM")
    assert first[at:].split()[0] == "1.5/16G" and second[at:].split()[0] == "-"
    # nobody asked: no column (and a service from before sends neither field)
    assert "CPU/MEM" not in str(jobs_table([workload()], NOW))
    text = str(describe_report(asked, NOW, tz=timezone.utc))
    assert "CPU, memory:  1.5 CPUs and 16 GiB of memory per replica" in text
    assert "CPU, memory" not in str(describe_report(workload(), NOW, tz=timezone.utc))


def test_kubernetes_quantities() -> None:
    assert kube_quantity("7910m") == pytest.approx(7.91)
    assert kube_quantity("32986620Ki") == 32986620 * 1024
    assert kube_quantity("64Gi") == 64 * 2**30
    assert kube_quantity("1e9") == 1e9 and kube_quantity("2") == 2
    assert kube_quantity("lots") is None and kube_quantity("5Xi") is None
    assert (kube_cpu(1500), kube_cpu(2000)) == ("1500m", "2")
    assert (kube_memory(16 * 1024), kube_memory(1536)) == ("16Gi", "1536Mi")


def test_kubespawner_memory_is_in_powers_of_1024() -> None:
    assert byte_spec_mib("16G") == 16 * 1024
    assert byte_spec_mib("512M") == 512
    assert byte_spec_mib(2**30) == 1024  # a number is bytes
    assert byte_spec_mib("1.5T") == 1536 * 1024
    for bad in ("16", "16X", "G", True, -1, None):
        assert byte_spec_mib(bad) is None
