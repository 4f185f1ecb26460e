"""CUDA C++ from Python: nvcc builds (build.py), their ptxas and SASS reports (ptxas.py,
sass.py), cuda.core launches (launch.py) and prepared argument arrays (prepared.py)."""
