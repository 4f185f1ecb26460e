"""The errors kernelab reports to a person in one line.

Anything raised as a KernelabError reaches the command line as `kernelab: <message>` on
stderr and exit code 2, never as a traceback. Raise it for bad input and for a missing
capability (no GPU, no nvcc, no ncu); let real bugs raise what they raise.
"""


class KernelabError(Exception):
    """A problem the user can fix; its message is one line that says how."""


class UnknownNameError(KernelabError):
    """An unknown GPU, op, dtype, kernel or implementation name."""


class NoGPUError(KernelabError):
    """The command needs a CUDA GPU and this machine has none."""


class MissingToolError(KernelabError):
    """An external tool (nvcc, ncu) or optional package is not installed."""


def closest(name: str, choices, n: int = 3) -> list[str]:
    """The choices most like `name`, for 'did you mean' hints."""
    import difflib

    choices = list(choices)
    hits = difflib.get_close_matches(name.lower(), choices, n=n, cutoff=0.3)
    if not hits:
        hits = [c for c in choices if name.lower() in c or c in name.lower()][:n]
    return hits


def unknown(kind: str, name: str, choices) -> UnknownNameError:
    """An UnknownNameError whose message suggests the closest known names."""
    hints = closest(name, choices)
    hint = f"; did you mean {', '.join(hints)}?" if hints else ""
    return UnknownNameError(f"unknown {kind} '{name}'{hint} (known: {', '.join(sorted(choices))})")
