"""The command line's contract: help works, bad input is one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys

from kernelab.cli import main


def test_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    assert "kernelab" in capsys.readouterr().out


def test_unknown_command_is_one_line_and_exit_2(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelab:") and "\n" not in err


def test_importing_every_module_needs_no_gpu():
    # A fresh interpreter, so nothing imported by other tests hides a GPU touch at import time.
    code = (
        "import pkgutil, importlib, kernelab\n"
        "for m in pkgutil.walk_packages(kernelab.__path__, 'kernelab.'):\n"
        "    importlib.import_module(m.name)\n"
        "import sys\n"
        "assert 'torch' not in sys.modules or not __import__('torch').cuda.is_initialized()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_child_process_main_ends_a_kernelab_error_in_one_line_and_status_2(capsys):
    from kernelab.errors import KernelabError, one_line_failures

    @one_line_failures
    def main(argv):
        if argv:
            raise KernelabError(f"bad {argv[0]}")
        return 0

    assert main([]) == 0
    assert main(["size"]) == 2
    assert capsys.readouterr().err == "kernelab: bad size\n"
