"""The specification: each op's definition and float64 torch reference (reference.py), the
math modes a reference fixes (math_modes.py), and the registry that maps an implementation's
name to the code that builds it (registry.py). Every floor above may read it; it reads none."""
