"""Kernels: the torch references (the specification of each op) and the implementations."""
