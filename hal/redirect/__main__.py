"""``python -m hal.redirect script.py [args]``: one process of ``hal run`` (used under torchrun).

``python -m hal.redirect --child script.py [args]`` is how a child process of a ``hal run``
script re-executes itself (hal/redirect/_child_start.py); the working directory that ``-m`` put
first on ``sys.path`` is taken off, so that the script sees ``sys.path`` as ``python script.py``
would have given it.
"""
import os
import sys

from hal.cli import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"] and not getattr(sys.flags, "safe_path", False) and sys.path[:1] == [os.getcwd()]:
        del sys.path[0]
    sys.exit(main(["run", *sys.argv[1:]]))
