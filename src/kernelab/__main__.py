"""`python3 -m kernelab ...`: the command-line tool where the `kernelab` script is not
installed (a machine that has the source tree on PYTHONPATH but no pip install)."""

from kernelab.cli import entry

entry()
