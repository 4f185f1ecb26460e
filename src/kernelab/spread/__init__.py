"""Past one GPU: evaluation suites, benchmark sweeps and ladders spread over every GPU of a
machine or of a Ray cluster (the optional extra kernelab[ray]; docs/spread.md).

plan.py      the pure rules: tasks, which GPU takes which, retries, the task records
engine.py    Ray: connect, one worker (actor) per GPU, deadlines, retries, Ctrl-C
progress.py  the live view: the run's bar and, per GPU, done / failed / running
suites.py    `kernelab eval --suite DIR --gpus N`: a task per (problem, solution)
sweeps.py    `kernelab bench KERNEL --sizes ... --gpus N`: a task per shape, records per card
ladders.py   `kernelab ladder NAME --sizes ... --gpus N`: a task per size, records per card

Nothing here imports Ray at import time; one GPU without --ray-address never touches it.
"""
