"""``python -m capsule.cli``: the ``capsule`` command."""

import sys

from capsule.cli import main

sys.exit(main())
