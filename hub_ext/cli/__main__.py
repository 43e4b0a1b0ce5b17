"""``python -m hub_ext.cli``: the ``frachub`` command (how the hub starts the service)."""

import sys

from hub_ext.cli.main import main

sys.exit(main())
