"""`kernelab eval`: a user's kernel judged against a reference, in the community's formats.

formats.py     one Problem shape for both formats; detection, scaling
kernelbench.py KernelBench problems (Model, get_inputs, get_init_inputs) and ModelNew
gpumode.py     GPU MODE problems (reference.py, task.py, task.yml) and custom_kernel
trees.py       nested problem data: copy, move, upcast, which leaves changed
recognise.py   the op a reference computes, for the roofline
verdict.py     the judge: correctness, hardening, timing, placement: the Verdict
sandbox.py     the judge's side of a solution's worker process; run_problem
worker.py      the solution's process: the only one that imports it
channel.py     judge <-> worker messages: tensors over pipes
timed_calls.py the timed loop: rotating inputs, device-wide fence, sampled outputs
observed.py    the judge's wall-clock floor under a worker's reported times
suite.py       every problem in a directory
"""
