// castack CUDA kernels (compiled by NVRTC for compute_90 with --fmad=false, so elementwise
// results are bit-identical to the CPU kernels; see device/cuda.rs).
//
// Determinism: every reduction runs on a FIXED grid (gridDim.x blocks of RED_THREADS
// threads, chosen by the host independently of the GPU): thread t of block b always visits
// the same indices in the same order, the block combines its threads with a fixed tree, and
// `sum_partials` adds the block partials in index order. The result does not depend on
// scheduling, and only on the vector length and the grid.

#define RED_THREADS 256
#define GRAM_MAXY 8

typedef unsigned long long u64;

// Fixed-order tree reduction of one value per thread within a block; result in s[0].
__device__ __forceinline__ void block_tree(double *s) {
    for (int w = RED_THREADS / 2; w > 0; w >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    }
    __syncthreads();
}

// ---------------------------------------------------------------------------------------
// CSR SpMV, vector kernel: T lanes per row (T in {1, 2, 4, 8, 16, 32}), lanes stride over
// the row, then a fixed shuffle tree combines them. T = 1 is the scalar kernel (one thread
// per row, same summation order as the CPU kernel, hence the same bits).
template <int T>
__device__ __forceinline__ void spmv_vector(int rows, const u64 *__restrict__ indptr,
                                            const unsigned *__restrict__ cols,
                                            const double *__restrict__ vals,
                                            const double *__restrict__ x,
                                            double *__restrict__ y) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = tid / T;
    const int lane = (int)(tid % T);
    // Rows past the end keep their lanes in the shuffle (no early return before it).
    double acc = 0.0;
    if (row < rows) {
        const u64 lo = indptr[row], hi = indptr[row + 1];
        for (u64 k = lo + lane; k < hi; k += T) acc += vals[k] * __ldg(&x[cols[k]]);
    }
    if (T > 1) {
        // Width-T segments of the warp; the mask covers the whole warp (all lanes arrive).
        for (int off = T / 2; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off, T);
    }
    if (row < rows && lane == 0) y[row] = acc;
}

#define SPMV_KERNEL(T)                                                                     \
    extern "C" __global__ void spmv_csr_t##T(int rows, const u64 *indptr,                  \
                                             const unsigned *cols, const double *vals,    \
                                             const double *x, double *y) {                \
        spmv_vector<T>(rows, indptr, cols, vals, x, y);                                   \
    }
SPMV_KERNEL(1)
SPMV_KERNEL(2)
SPMV_KERNEL(4)
SPMV_KERNEL(8)
SPMV_KERNEL(16)
SPMV_KERNEL(32)

// ---------------------------------------------------------------------------------------
// Elementwise updates (one thread per element, grid-stride).

// y += a x
extern "C" __global__ void axpy(long long n, double a, const double *__restrict__ x,
                                double *__restrict__ y) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] += a * x[i];
}

// y = x + b y
extern "C" __global__ void xpay(long long n, const double *__restrict__ x, double b,
                                double *__restrict__ y) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i] + b * y[i];
}

// y += sum_j c[j] v_j for m vectors (pointer table `v`, coefficients `c` on the device),
// accumulated left to right in j as on the CPU.
extern "C" __global__ void lincomb(long long n, int m, const u64 *__restrict__ v,
                                   const double *__restrict__ c, double *__restrict__ y) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        double acc = y[i];
        for (int j = 0; j < m; ++j) acc += c[j] * ((const double *)v[j])[i];
        y[i] = acc;
    }
}

// Chebyshev three-term step: out = eta a - zeta s (first step, prev == 0) or
// out = 2 (eta a - zeta s) - prev.
extern "C" __global__ void chebyshev_step(long long n, double eta, double zeta,
                                          const double *__restrict__ a,
                                          const double *__restrict__ s,
                                          const double *__restrict__ prev,
                                          double *__restrict__ out) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double t = eta * a[i] - zeta * s[i];
        out[i] = prev ? 2.0 * t - prev[i] : t;
    }
}

// ---------------------------------------------------------------------------------------
// Reductions: each writes gridDim.x partials per result; `sum_partials` finishes them.

// Fused multi-dot: blockIdx.y = pair p, partial[p * gridDim.x + blockIdx.x].
extern "C" __global__ void multidot(long long n, const u64 *__restrict__ xs,
                                    const u64 *__restrict__ ys, double *__restrict__ partial) {
    __shared__ double s[RED_THREADS];
    const double *x = (const double *)xs[blockIdx.y];
    const double *y = (const double *)ys[blockIdx.y];
    double acc = 0.0;
    for (long long i = (long long)blockIdx.x * RED_THREADS + threadIdx.x; i < n;
         i += (long long)gridDim.x * RED_THREADS)
        acc += x[i] * y[i];
    s[threadIdx.x] = acc;
    block_tree(s);
    if (threadIdx.x == 0) partial[(long long)blockIdx.y * gridDim.x + blockIdx.x] = s[0];
}

// Gram block X^T Y for nx vectors X (blockIdx.y = i) and ny <= GRAM_MAXY vectors Y, read
// once per X vector: partial[(i * ldy + j0 + j) * gridDim.x + blockIdx.x].
extern "C" __global__ void gram(long long n, const u64 *__restrict__ xs, int ny,
                                const u64 *__restrict__ ys, int j0, int ldy,
                                double *__restrict__ partial) {
    __shared__ double s[RED_THREADS];
    const double *x = (const double *)xs[blockIdx.y];
    double acc[GRAM_MAXY];
#pragma unroll
    for (int j = 0; j < GRAM_MAXY; ++j) acc[j] = 0.0;
    for (long long i = (long long)blockIdx.x * RED_THREADS + threadIdx.x; i < n;
         i += (long long)gridDim.x * RED_THREADS) {
        const double xi = x[i];
#pragma unroll
        for (int j = 0; j < GRAM_MAXY; ++j)
            if (j < ny) acc[j] += xi * ((const double *)ys[j])[i];
    }
#pragma unroll
    for (int j = 0; j < GRAM_MAXY; ++j) {
        if (j < ny) {
            s[threadIdx.x] = acc[j];
            block_tree(s);
            if (threadIdx.x == 0)
                partial[((long long)blockIdx.y * ldy + j0 + j) * gridDim.x + blockIdx.x] = s[0];
        }
    }
}

// Fused CG residual update: y += a x, and the partials of y.y and (y.w.y) as results 0, 1.
extern "C" __global__ void axpy_dots(long long n, double a, const double *__restrict__ x,
                                     double *__restrict__ y, const double *__restrict__ w,
                                     double *__restrict__ partial) {
    __shared__ double s[RED_THREADS];
    double yy = 0.0, ywy = 0.0;
    for (long long i = (long long)blockIdx.x * RED_THREADS + threadIdx.x; i < n;
         i += (long long)gridDim.x * RED_THREADS) {
        const double v = y[i] + a * x[i];
        y[i] = v;
        yy += v * v;
        ywy += v * v * w[i];
    }
    s[threadIdx.x] = yy;
    block_tree(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
    s[threadIdx.x] = ywy;
    block_tree(s);
    if (threadIdx.x == 0) partial[gridDim.x + blockIdx.x] = s[0];
}

// out[r] = sum of partial[r * nblocks + b] for b = 0, 1, ..., in index order (one thread per
// result: the partials are few, and a fixed order is the point).
extern "C" __global__ void sum_partials(int results, int nblocks,
                                        const double *__restrict__ partial,
                                        double *__restrict__ out) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= results) return;
    double acc = 0.0;
    for (int b = 0; b < nblocks; ++b) acc += partial[(long long)r * nblocks + b];
    out[r] = acc;
}

// ---------------------------------------------------------------------------------------
// SELL-C-sigma SpMV (layout: device/sell.rs): one thread per sorted row p, slices of c
// rows stored column-major; each row loops over its own entries only, in CSR order (the
// CPU's summation order, hence its bits), and writes its original row perm[p].
extern "C" __global__ void spmv_sell(int rows, int c, const u64 *__restrict__ slice_ptr,
                                     const unsigned *__restrict__ row_len,
                                     const unsigned *__restrict__ perm,
                                     const unsigned *__restrict__ cols,
                                     const double *__restrict__ vals,
                                     const double *__restrict__ x, double *__restrict__ y) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= rows) return;
    const u64 base = slice_ptr[p / c] + (u64)(p % c);
    const unsigned len = row_len[p];
    double acc = 0.0;
    for (unsigned j = 0; j < len; ++j) {
        const u64 k = base + (u64)j * (u64)c;
        acc += vals[k] * __ldg(&x[cols[k]]);
    }
    y[perm[p]] = acc;
}
