"""``python -m polecat``: the ``polecat`` command."""

import sys

from polecat.commands.main import main

sys.exit(main())
