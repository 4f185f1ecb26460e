"""`kernelab eval`: a user's kernel judged against a reference, in the community's formats.

formats.py     one Problem shape for both formats; detection, scaling
kernelbench.py KernelBench problems (Model, get_inputs, get_init_inputs) and ModelNew
gpumode.py     GPU MODE problems (reference.py, task.py, task.yml) and custom_kernel
trees.py       nested problem data: copy, move, upcast, which leaves changed
recognise.py   the op a reference computes, for the roofline
verdict.py     correctness, hardening, timing, placement: the Verdict
sandbox.py     each problem in its own worker process, with a time limit
suite.py       every problem in a directory
"""
