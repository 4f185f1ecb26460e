"""The solution's process: `python -m kernelab.evaluate.worker READ_FD WRITE_FD`.

It is the only process that imports the solution. It loads the problem (a KernelBench
ModelNew is built from the problem's init inputs and gets the reference's weights; a GPU MODE
submission imports the problem's modules), announces itself, then answers the judge's
requests, one reply each, until told to stop:

    {"kind": "solution", "path"}                    import it   -> {"ok"} or {"failed"}
    {"kind": "call", "data"}                        one call    -> {"out", "given", "snapshot"}
    {"kind": "pool", "label", "pool", "buffers"}    keep the input sets of a timing case
    {"kind": "calls", "label", "calls", "sampled", "mode"}
                                                    timed calls -> {"samples_ms"}
    {"kind": "outputs"}                             the sampled outputs of those calls
    {"kind": "stop"}

The sampled outputs travel in a reply of their own, so that the judge's clock around the
timed calls (kernelab.evaluate.observed) does not hold the time to send them.

It knows nothing of the verdict: it is handed inputs and sends back what the solution made of
them, as tensors. Its stdout and stderr (the solution's prints, faulthandler's report of a
segfault) go to a pipe the judge reads and caps.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _plain(tree):
    """Namedtuples as tuples: the judge reads replies without unpickling custom classes."""
    if isinstance(tree, tuple):
        return tuple(_plain(item) for item in tree)
    if isinstance(tree, list):
        return [_plain(item) for item in tree]
    if isinstance(tree, dict):
        return {key: _plain(value) for key, value in tree.items()}
    return tree


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _call(run, data, device) -> dict:
    from kernelab.evaluate import trees
    from kernelab.harness.check import poisoned_allocations

    _synchronize(device)
    with poisoned_allocations():
        out = run(data)
        # Taken on the caller's stream before any synchronisation: work left on a stream it
        # never waits for is not in this copy.
        snapshot = trees.clone(out) if device.type == "cuda" else None
    _synchronize(device)
    return {"out": _plain(out), "given": data, "snapshot": _plain(snapshot)}


def serve(read_fd: int, write_fd: int) -> int:
    import faulthandler

    faulthandler.enable()
    from kernelab.evaluate.channel import ChannelClosed, receive, send
    from kernelab.evaluate.formats import describe_exception, load_problem
    from kernelab.evaluate.timed_calls import run_calls

    def reply(message: dict) -> None:
        try:
            send(write_fd, message)
        except OSError:
            raise
        except Exception as exc:  # an output pickle refuses (a lambda, a generator)
            send(write_fd, {"raised": f"its output cannot be sent back: {describe_exception(exc)}"})

    setup = receive(read_fd, trusted=True)
    try:
        problem = load_problem(setup["problem"], device=setup["device"], scale=setup["scale"])
    except Exception as exc:
        send(
            write_fd,
            {"failed": f"the worker could not load the problem: {describe_exception(exc)}"},
        )
        return 0
    send(write_fd, {"ready": True})
    run, pools, outputs = None, {}, {}
    while True:
        try:
            request = receive(read_fd, trusted=True)
        except ChannelClosed:
            return 0
        kind = request["kind"]
        if kind == "stop":
            return 0
        if kind == "solution":
            try:
                run = problem.load_solution(Path(request["path"]))
            except Exception as exc:
                reply({"failed": describe_exception(exc)})
                continue
            reply({"ok": True})
        elif kind == "pool":
            pools[request["label"]] = (request["pool"], set(request["buffers"]))
            reply({"ok": True})
        elif kind == "call":
            try:
                answer = _call(run, request["data"], problem.device)
            except Exception as exc:
                answer = {"raised": describe_exception(exc)}
            reply(answer)
        elif kind == "calls":
            pool, buffers = pools[request["label"]]
            try:
                samples, outputs = run_calls(
                    run, pool, buffers=buffers, calls=request["calls"],
                    sampled=set(request["sampled"]), mode=request["mode"],
                )  # fmt: skip
                answer = {"samples_ms": samples}
            except Exception as exc:
                outputs, answer = {}, {"raised": describe_exception(exc)}
            reply(answer)
        elif kind == "outputs":
            reply({"outputs": _plain(outputs)})


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
