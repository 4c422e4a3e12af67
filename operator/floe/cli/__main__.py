"""``python -m floe.cli``: the ``floe`` command."""

import sys

from floe.cli.commands import main

sys.exit(main())
