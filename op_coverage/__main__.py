"""``python -m op_coverage`` is the ``op_coverage`` command."""
import sys

from op_coverage.cli import main

sys.exit(main())
