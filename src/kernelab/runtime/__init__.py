"""Launch machinery that wraps an op's plain launch from outside: launch plans and their
direct and compiled replay, tensor maps, the tuner's final round, and the CUDA build and
launch path (cuda/). Nothing here imports an op."""
