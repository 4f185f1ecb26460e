"""CUDA C++ kernels: nvcc builds (build.py), their ptxas and SASS reports (ptxas.py, sass.py),
cuda.core launches (launch.py) and the fp32 SGEMM ladder (sgemm/)."""
