// QKV_HD marks a function that runs on the host and, where nvcc compiles it
// (a CUDA build's .cu files), on the GPU too. Elsewhere it is plain C++.
#pragma once

#if defined(__CUDACC__)
#define QKV_HD __host__ __device__
#else
#define QKV_HD
#endif
