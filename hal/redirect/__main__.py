"""``python -m hal.redirect script.py [args]``: one process of ``hal run`` (used under torchrun)."""
import sys

from hal.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
