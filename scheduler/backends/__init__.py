"""Backends apply the scheduler's decisions to the outside world and report what really runs.

``base`` holds the contract every backend meets; ``local`` runs training as subprocesses on
this machine with GPUs from NVML or a declared inventory (``inventory``), each replica held
in a control group of its own (``confinement``), its command, directories and log checked as
the job's user (``workplace``), its processes read and signalled through ``processes``, its
checkpoints found off the event loop (``checkpoints``), and, with ``gpu_sharing = mps``, a
supervised NVIDIA MPS daemon per GPU and its clients' variables (``mps``; GPU faults and
their victims: ``mps_faults``). ``gpu_usage`` samples the GPUs through NVML (per GPU and per
process) and ``holders`` tells which workload a process is of: the memory watchdog's reading
on the local backend. The Kubernetes backend lives beside them.
Nothing above a backend knows which one is in use.
"""
