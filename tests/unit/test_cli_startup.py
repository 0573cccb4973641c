"""Every rank and child process of ``hal run`` starts in ``hal``'s command line: it loads the one command it
runs, not every command's module nor the commands of packages above hal (``hal accept``)."""
import subprocess
import sys

from hal.cli import build_parser


def test_a_named_command_loads_only_its_module():
    code = ("import sys\nfrom hal.cli import build_parser\n"
            "p = build_parser(['run', '--quiet', 'train.py'])\n"
            "print(sorted(m for m in ('hal_accept', 'hal.cli.bench', 'hal.cli.doctor', 'hal.cli.run') "
            "if m in sys.modules))\n"
            "print(p.parse_args(['run', '--quiet', 'train.py']).script)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[:2] == ["['hal.cli.run']", "train.py"]


def test_help_and_other_commands_see_every_command():
    for argv in (["--help"], ["accept", "train.py"], []):  # hal --help, hal accept ..., hal alone
        parser = build_parser(argv)
        for command in (["doctor"], ["bench", "all_reduce"], ["accept", "train.py"]):
            assert parser.parse_args(command).command == command[0]
    assert build_parser(["accept", "train.py"]).parse_args(["accept", "train.py"]).run.__module__ == "hal_accept.cli"
