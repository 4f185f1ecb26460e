"""The harness: is a kernel correct (check), how fast is it (timing), against which ceilings.

Submodules import torch lazily; importing kernelab.harness touches no GPU.
"""
