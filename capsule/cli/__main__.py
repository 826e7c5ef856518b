"""``python -m capsule.cli``: the ``capsule`` command."""

import sys

try:
    from capsule.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command's modules are still being imported
    sys.exit(130)

sys.exit(main())
