"""The ladders: numbered CUDA C++ steps, one idea each, climbed against cuBLAS (sgemm/ in
fp32, hgemm/ in bf16 on Hopper), with their verification and timing engines."""
