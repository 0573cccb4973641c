import sys

from hal.cli import main

sys.exit(main())
