"""The solution's process: `python -m kernelab.evaluate.worker READ_FD WRITE_FD [ARENA_FD]`.

It is the only process that imports the solution, and it starts behind the wall
(kernelab.evaluate.wall). It loads the problem (a KernelBench ModelNew is built from the
problem's init inputs and gets the reference's weights; a GPU MODE submission imports the
problem's modules), announces itself, then answers the judge's requests, one reply each,
until told to stop:

    {"kind": "solution", "path"}                    import it   -> {"ok"} or {"failed"}
    {"kind": "call", "data" | "layout"}             one call    -> {"out", "snapshot"[, "given"]}
    {"kind": "timing"}                              allocations no longer poisoned, for good
    {"kind": "pool", "label", "pool", "buffers"}    keep the input sets of a timing case
    {"kind": "calls", "label", "calls", "mode"[, "stream"]}
                                                    timed calls -> {"samples_ms", "fingerprints"}
      with "stream", before each call:    {"need": i, "print"} -> {"seed"}
    {"kind": "outputs", "indices"}                  the outputs of those calls the judge names
    {"kind": "stop"}

Timed calls with "stream" each get a new input set, made here by the problem's generator from
a seed the worker asks the judge for when the call comes, sending the fingerprint of the
previous call's output with the request (kernelab.evaluate.timed_calls.Streamed); without,
they rotate through the pool.

With an arena (ARENA_FD, on a CPU) a call's inputs are views of pages the judge shares
(kernelab.evaluate.arena): the judge reads what the call left there itself. Without one they
travel in the request, and the reply carries them back as the call left them ("given").

Torch's allocator is poisoned (new tensors hold NaN) from the start until the judge's
"timing": every call before it is checked, and from it on the process-wide state no longer
changes, so that nothing tells a checked timed call from an unchecked one. The outputs of a
batch travel in a reply of their own, after the judge has chosen which to see, so that the
judge's clock around the timed calls (kernelab.evaluate.observed) does not hold the time to
send them.

It knows nothing of the verdict: it is handed inputs and sends back what the solution made of
them, as tensors. Its stdout and stderr (the solution's prints, faulthandler's report of a
segfault) go to a pipe the judge reads and caps.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
from pathlib import Path

# None of these imports torch: faulthandler is on before torch loads (with the problem).
from kernelab.evaluate import trees
from kernelab.evaluate.arena import Arena
from kernelab.evaluate.channel import ChannelClosed, receive, send
from kernelab.evaluate.footprint import release_cached
from kernelab.evaluate.formats import describe_exception, load_problem
from kernelab.evaluate.timed_calls import Rotation, Streamed, run_calls
from kernelab.harness.check import poisoned_allocations


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


def _snapshot_of(tensor):
    """A copy of an output as it stands (layout and padding included); an output the judge
    refuses as it is (sparse, meta, a subclass) is passed on uncopied, since it has no
    storage to copy and the judge's refusal, with its reason, is the verdict."""
    import torch

    if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.is_meta:
        return tensor
    return trees.copy_with_layout(tensor)


def _call(run, data, device, *, report_inputs: bool) -> dict:
    _synchronize(device)
    out = run(data)
    # Taken on the caller's stream before any synchronisation: work left on a stream it
    # never waits for is not in this copy.
    snapshot = trees.map_tensors(_snapshot_of, out) if device.type == "cuda" else None
    _synchronize(device)
    answer = {"out": _plain(out), "snapshot": _plain(snapshot)}
    if report_inputs:
        answer["given"] = data
    return answer


def serve(read_fd: int, write_fd: int, arena_fd: int | None = None) -> int:
    faulthandler.enable()

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
    arena = Arena(os.fstat(arena_fd).st_size, fd=arena_fd) if arena_fd is not None else None
    poisoned = contextlib.ExitStack()
    poisoned.enter_context(poisoned_allocations())
    send(write_fd, {"ready": True})
    run, pools, outputs = None, {}, []

    def ask_seed(index: int, printed) -> int:
        send(write_fd, {"need": index, "print": printed})
        return int(receive(read_fd, trusted=True)["seed"])

    cases = {case.label: case for case in problem.timing_cases()}
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
            # a checked call comes after the judge has fetched what it checks of the last
            # batch: its outputs are not held beside the call (the memory plan,
            # footprint.need_bytes with no pool)
            outputs = []
            release_cached(problem.device)
            try:
                if "layout" in request:
                    data = arena.view(request["layout"])
                    answer = _call(run, data, problem.device, report_inputs=False)
                else:
                    answer = _call(run, request["data"], problem.device, report_inputs=True)
            except Exception as exc:
                answer = {"raised": describe_exception(exc)}
            reply(answer)
        elif kind == "timing":
            poisoned.close()
            reply({"ok": True})
        elif kind == "calls":
            pool, buffers = pools[request["label"]]
            outputs = []  # the last batch's outputs are not held while this one runs
            try:
                if request.get("stream"):
                    case = cases[request["label"]]
                    sets = Streamed(lambda seed, case=case: problem.generate(case, seed), ask_seed)
                else:
                    sets = Rotation(pool)
                samples, outputs, prints = run_calls(
                    run, sets, buffers=buffers, calls=request["calls"], mode=request["mode"]
                )
                answer = {"samples_ms": samples, "fingerprints": prints}
            except Exception as exc:
                outputs, answer = [], {"raised": describe_exception(exc)}
            # the batch's call tree and scratch back to the device: while the judge checks
            # the sampled outputs, only the kept outputs are the worker's
            release_cached(problem.device)
            reply(answer)
        elif kind == "outputs":
            chosen = [i for i in request["indices"] if 0 <= i < len(outputs)]
            reply({"outputs": {i: _plain(outputs[i]) for i in chosen}})


if __name__ == "__main__":
    sys.exit(serve(*(int(fd) for fd in sys.argv[1:4])))
