"""Nsight Compute profiling: run ncu, read its reports, and diagnose each kernel.

  ncu.py       build and run the ncu command line (never changing the card's clocks)
  report.py    .ncu-rep and CSV pages -> KernelProfile (metrics in base units)
  metrics.py   the metric names kernelab asks for and reads; FLOP counting
  diagnose.py  pure rules: metrics -> bottleneck, unit, evidence, advice
  summary.py   the per-kernel report: throughputs, occupancy, stalls, roofline, diagnosis
  runner.py    the small program profiled under ncu for a registered implementation
  session.py   profile a registered implementation or any command, end to end

Nothing here imports torch or touches a GPU until a profile is actually run.
"""
