"""What every side of FracHub shares, and the bottom layer of its imports.

The scopes and API paths (``scopes``), where the data files live (``paths``), the words for a
workload's states (``states``), the words for quantities (``quantities``, ``messages``), the
bounds on input and the one GPU-count rule (``limits``), placements and their JSON
(``placement``), the environment a GPU holder gets (``contract``), project membership
(``projects``), opening files in users' directories safely (``files``) and calls sent
side by side, a bounded number at a time (``concurrency``). Nothing here
imports the engine or any other part of FracHub, so the REST client, the CLI and the spawner
use it without pulling in the scheduler (``tests/unit/test_layers.py`` keeps it so).
"""
