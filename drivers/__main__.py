"""``python -m drivers agent ...``: the agent without the extender's CLI."""

import sys

from drivers.cli import main

sys.exit(main())
