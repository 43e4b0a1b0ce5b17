"""Built-in fleet descriptions, written in the description-file format an admin would use.

``frachub simulate fleet --preset institute --print-description`` prints one, as a
starting point for describing one's own organisation (``docs/fleet.md``).

The institute's rates are anchored on public traces: about 2.3 GPU jobs a day per GPU
(SenseTime's Helios Earth cluster: 427,148 GPU jobs on 997 GPUs over six months), most
jobs on one GPU with a few large gangs (Helios: median 1 GPU, mean 2.1 to 6.7), run
times from Microsoft's Philly trace, capped at a week as many clusters do.
"""

from __future__ import annotations

LAB = """\
name: lab
description: >
  A research lab's workstation-class cluster: 2 nodes x 4 GPUs, three groups.
cluster:
  nodes:
    - {name: node, count: 2, gpus: 4, gpu_memory_gib: 48}
grace_seconds: 30
days: 5
working_hours: {start: 9, end: 18}
projects:
  - name: alice
    deserved_gpus: 4
    notebooks:
      per_day: 6
      shapes: [{gpus: 0.25, weight: 2}, {gpus: 0.5, weight: 2}, {gpus: 1, weight: 1}]
    training:
      per_day: 12
      checkpoint_minutes: 30
      max_runtime_hours: 48
      shapes:
        - {gpus: 1, weight: 14}
        - {gpus: 2, weight: 4}
        - {gpus: 4, weight: 2}
        - {gpus: 4, replicas: 2, weight: 1}
  - name: bob
    deserved_gpus: 2
    notebooks:
      per_day: 6
      shapes: [{gpus: 0.25, weight: 2}, {gpus: 0.5, weight: 2}, {gpus: 1, weight: 1}]
    training:
      per_day: 4
      checkpoint_minutes: 30
      max_runtime_hours: 48
      shapes: [{gpus: 1, weight: 3}, {gpus: 2, weight: 1}]
  - name: carol
    deserved_gpus: 2
    notebooks:
      per_day: 4
      shapes: [{gpus: 0.25, weight: 1}, {gpus: 0.5, weight: 1}]
    training:
      per_day: 1
      max_runtime_hours: 48
      shapes: [{gpus: 1, weight: 1}]
"""

_RESEARCH_NOTEBOOKS = """\
      session_hours: {median: 2, p90: 6}
      weekend_factor: 0.1
      patience_minutes: 60
      shapes: [{gpus: 0.25, weight: 4}, {gpus: 0.5, weight: 3}, {gpus: 1, weight: 3}]"""

_TRAINING_SHAPES = """\
      max_runtime_hours: 168
      weekend_factor: 0.3
      working_hours_share: 0.7
      shapes:
        - {gpus: 1, weight: 60}
        - {gpus: 2, weight: 15}
        - {gpus: 4, weight: 12}
        - {gpus: 8, weight: 8}
        - {gpus: 8, replicas: 2, weight: 4}
        - {gpus: 8, replicas: 4, weight: 1}"""

INSTITUTE = f"""\
name: institute
description: >
  A research institute: 16 nodes x 8 GPUs shared by six projects whose quotas add up
  to the cluster. Two large groups train around the clock, two smaller ones mostly work
  in notebooks, a course runs quarter-GPU notebooks in the day, and bio does not
  checkpoint.
cluster:
  nodes:
    - {{name: gpu, count: 16, gpus: 8, gpu_memory_gib: 80}}
grace_seconds: 30
days: 14
working_hours: {{start: 9, end: 18}}
projects:
  - name: vision
    deserved_gpus: 32
    notebooks:
      per_day: 25
{_RESEARCH_NOTEBOOKS}
    training:
      per_day: 100
      checkpoint_minutes: 30
{_TRAINING_SHAPES}
  - name: nlp
    deserved_gpus: 32
    notebooks:
      per_day: 20
{_RESEARCH_NOTEBOOKS}
    training:
      per_day: 80
      checkpoint_minutes: 30
{_TRAINING_SHAPES}
  - name: robotics
    deserved_gpus: 24
    notebooks:
      per_day: 15
{_RESEARCH_NOTEBOOKS}
    training:
      per_day: 50
      checkpoint_minutes: 30
{_TRAINING_SHAPES}
  - name: bio
    deserved_gpus: 16
    notebooks:
      per_day: 15
{_RESEARCH_NOTEBOOKS}
    training:
      per_day: 25
{_TRAINING_SHAPES}
  - name: teaching
    deserved_gpus: 16
    notebooks:
      per_day: 40
      session_hours: {{median: 1.5, p90: 3}}
      weekend_factor: 0
      patience_minutes: 30
      shapes: [{{gpus: 0.25, weight: 4}}, {{gpus: 0.5, weight: 1}}]
  - name: stats
    deserved_gpus: 8
    notebooks:
      per_day: 10
{_RESEARCH_NOTEBOOKS}
    training:
      per_day: 15
      checkpoint_minutes: 30
{_TRAINING_SHAPES}
"""

PRESETS = {"lab": LAB, "institute": INSTITUTE}
