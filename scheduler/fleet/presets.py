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

UNIVERSITY = """\
name: university
description: >
  A university's research computing service: 12 nodes x 4 GPUs of 48 GiB shared by four
  labs and a course. Two science labs sit in a department capped at 20 GPUs; chem runs
  long single-GPU jobs that never checkpoint, physics saves hourly. Jobs run three times
  Philly's lengths. The course fills the day with quarter-GPU notebooks whose students
  give up after 20 minutes.
cluster:
  nodes:
    - {name: node, count: 12, gpus: 4, gpu_memory_gib: 48}
grace_seconds: 60
days: 7
working_hours: {start: 8, end: 20}
projects:
  - name: sciences
    limit_gpus: 20
  - name: chem
    parent: sciences
    deserved_gpus: 8
    notebooks:
      per_day: 8
      patience_minutes: 60
      shapes: [{gpus: 0.25, weight: 2}, {gpus: 0.5, weight: 1}]
    training:
      per_day: 36
      runtime_scale: 3
      max_runtime_hours: 72
      weekend_factor: 0.5
      shapes: [{gpus: 1, weight: 8}, {gpus: 2, weight: 1}]
  - name: physics
    parent: sciences
    deserved_gpus: 8
    notebooks:
      per_day: 6
      shapes: [{gpus: 0.5, weight: 1}, {gpus: 1, weight: 1}]
    training:
      per_day: 30
      checkpoint_minutes: 60
      runtime_scale: 3
      max_runtime_hours: 96
      shapes: [{gpus: 1, weight: 4}, {gpus: 2, weight: 2}, {gpus: 4, weight: 1}]
  - name: robotics
    deserved_gpus: 8
    notebooks:
      per_day: 6
      shapes: [{gpus: 0.5, weight: 1}, {gpus: 1, weight: 1}]
    training:
      per_day: 36
      checkpoint_minutes: 20
      runtime_scale: 3
      max_runtime_hours: 48
      shapes: [{gpus: 1, weight: 3}, {gpus: 4, weight: 2}, {gpus: 4, replicas: 2, weight: 1}]
  - name: linguistics
    deserved_gpus: 4
    notebooks:
      per_day: 10
      session_hours: {median: 3, p90: 8}
      shapes: [{gpus: 0.25, weight: 1}, {gpus: 0.5, weight: 2}, {gpus: 1, weight: 1}]
    training:
      per_day: 12
      runtime_scale: 3
      max_runtime_hours: 24
      shapes: [{gpus: 1, weight: 1}]
  - name: course
    deserved_gpus: 12
    notebooks:
      per_day: 70
      session_hours: {median: 1.5, p90: 3}
      weekend_factor: 0.2
      patience_minutes: 20
      shapes: [{gpus: 0.25, weight: 1}]
"""

STARTUP = """\
name: startup
description: >
  A startup: 4 nodes x 8 GPUs of 80 GiB, two product teams training around the clock
  (one saves every 15 minutes, one every 2 hours, both with 8-GPU and 2-node runs) and a
  research team that lives in notebooks of a whole GPU for half a day and never
  checkpoints its experiments. A 2-minute grace period lets jobs save on the way out.
cluster:
  nodes:
    - {name: gpu, count: 4, gpus: 8, gpu_memory_gib: 80}
grace_seconds: 120
days: 10
working_hours: {start: 9, end: 21}
projects:
  - name: search
    deserved_gpus: 12
    notebooks:
      per_day: 6
      shapes: [{gpus: 0.5, weight: 1}, {gpus: 1, weight: 1}]
    training:
      per_day: 24
      checkpoint_minutes: 15
      max_runtime_hours: 72
      weekend_factor: 0.6
      working_hours_share: 0.5
      shapes:
        - {gpus: 1, weight: 6}
        - {gpus: 2, weight: 3}
        - {gpus: 8, weight: 2}
        - {gpus: 8, replicas: 2, weight: 1}
  - name: ads
    deserved_gpus: 10
    notebooks:
      per_day: 4
      shapes: [{gpus: 0.5, weight: 1}, {gpus: 1, weight: 1}]
    training:
      per_day: 16
      checkpoint_minutes: 120
      max_runtime_hours: 120
      weekend_factor: 0.6
      shapes: [{gpus: 1, weight: 4}, {gpus: 4, weight: 2}, {gpus: 8, weight: 1}]
  - name: research
    deserved_gpus: 10
    notebooks:
      per_day: 24
      session_hours: {median: 4, p90: 10}
      weekend_factor: 0.2
      patience_minutes: 45
      shapes: [{gpus: 0.25, weight: 1}, {gpus: 0.5, weight: 2}, {gpus: 1, weight: 3}]
    training:
      per_day: 12
      max_runtime_hours: 48
      shapes: [{gpus: 1, weight: 6}, {gpus: 2, weight: 2}, {gpus: 4, weight: 1}]
"""

PRESETS = {"lab": LAB, "institute": INSTITUTE, "university": UNIVERSITY, "startup": STARTUP}
