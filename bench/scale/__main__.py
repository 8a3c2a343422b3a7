"""``python -m bench.scale``: the command of bench/scale/cli.py."""

import sys

from bench.scale.cli import main

sys.exit(main())
