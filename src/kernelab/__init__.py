"""kernelab: a GPU kernel lab for inference engineers.

Three questions, answered with numbers: is this kernel memory- or compute-bound, where does
its data live, and are the tensor cores busy. Importing kernelab never touches a GPU.
"""

__version__ = "0.1.0"
