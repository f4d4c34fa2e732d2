// QKV_HD marks a function that runs on the host and, where nvcc compiles it
// (a CUDA build's .cu files), on the GPU too. Elsewhere it is plain C++.
#pragma once

#if defined(__CUDACC__)
#define QKV_HD __host__ __device__
#else
#define QKV_HD
#endif

// QKV_UNROLL before a loop of a constant count asks nvcc to unroll it, so
// that the arrays it indexes stay in registers (not local memory).
#if defined(__CUDACC__)
#define QKV_UNROLL _Pragma("unroll")
#else
#define QKV_UNROLL
#endif
