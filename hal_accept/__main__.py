"""``python -m hal_accept train.py ...``: the same as ``hal accept``."""
import sys

from hal_accept.cli import main

if __name__ == "__main__":
    sys.exit(main())
