"""`kernelab eval`: a user's kernel judged against a reference, in the community's formats.

problem.py     one Problem shape for both formats; scaling, importing a file
formats.py     detection and loading of either format into a Problem
kernelbench.py KernelBench problems (Model, get_inputs, get_init_inputs) and ModelNew
gpumode.py     GPU MODE problems (reference.py, task.py, task.yml) and custom_kernel
trees.py       nested problem data: copy, move, upcast, which leaves changed
recognise.py   the op a reference computes, for the roofline
verdict.py     the judge: correctness, hardening, timing, placement: the Verdict
judge.py       run_problem: one problem, every solution in a worker of its own
sandbox.py     the judge's side of a solution's worker process
wall.py        the worker's launcher: namespaces, read-only mounts, own uid, rlimits
worker.py      the solution's process: the only one that imports it
channel.py     judge <-> worker messages: tensors over pipes
timed_calls.py the timed loop: rotating inputs, device-wide fence, outputs fingerprinted
arena.py       a CPU call's inputs in pages the judge shares and reads back itself
observed.py    the judge's wall-clock floor under a worker's reported times
suite.py       every problem in a directory
"""
