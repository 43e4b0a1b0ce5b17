"""``python -m hub_ext.cli.up --help``: the options, before anything is installed
(``scripts/up.sh --help``)."""

import sys

from hub_ext.cli.up.run import main

sys.exit(main())
