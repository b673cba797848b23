// castack CUDA kernels: every operation of the `Device` trait (device/mod.rs) for one rank's
// vectors, compiled by NVRTC for compute_90 with --fmad=false (device/cuda.rs).
//
// Bits. Every elementwise formula is written in the expression order of the CPU device
// (device/cpu.rs), and with FMA contraction off each operation rounds once, as on the CPU:
// elementwise results are the CPU's bits.
// Weighted norm terms are formed as (v w) v, as on the CPU (a tiny scaled residual entry
// with a huge weight: v v alone underflows).
//
// Determinism. Every reduction runs on a FIXED grid chosen by the host (RED_BLOCKS blocks
// of RED_THREADS threads, grid-stride loops), so thread t of block b always visits the same
// indices in the same order; a block combines its threads with a fixed tree (`block_sums`:
// a shuffle tree per warp, then the warp sums in warp order) and writes one partial per
// result; `finish_sums` (one block per result) adds the partials of a result with a fixed
// tree and writes the result into the caller's results vector. Results depend on the data
// and the lengths only, never on scheduling.
//
// Layout of the partials: partial[k * nblocks + b] for result k and reduction block b.

#define RED_THREADS 256
#define NWARPS (RED_THREADS / 32)
#define FULL_MASK 0xffffffffu
// Vectors per side of a Gram tile (GRAM_TILE x GRAM_TILE pairs per block).
#define GRAM_TILE 4
// Destinations per block of the block linear combination.
#define LINCOMB_DSTS 8

typedef unsigned long long u64;

// The K block sums of the K values every thread holds, in a fixed order: a shuffle tree
// within each warp, then the NWARPS warp sums added in warp order. Thread k (k < K) returns
// sum k; the other threads return an unspecified value. Every thread of the block must
// call it (it synchronises the block once); its shared memory is used once per kernel.
template <int K>
__device__ __forceinline__ double block_sums(const double (&v)[K]) {
    __shared__ double sh[K * NWARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        double t = v[k];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) t += __shfl_down_sync(FULL_MASK, t, off);
        if (lane == 0) sh[k * NWARPS + warp] = t;
    }
    __syncthreads();
    double s = 0.0;
    if ((int)threadIdx.x < K) {
        s = sh[threadIdx.x * NWARPS];
#pragma unroll
        for (int w = 1; w < NWARPS; ++w) s += sh[threadIdx.x * NWARPS + w];
    }
    return s;
}

// Grid-stride loop over 0..n with the launch's 1-D grid.
#define FOR_EACH(i, n)                                                                       \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (long long)gridDim.x * blockDim.x)

// Write the K per-thread sums of a reduction kernel as block partials.
template <int K>
__device__ __forceinline__ void write_partials(const double (&v)[K], double *partial) {
    const double s = block_sums<K>(v);
    if ((int)threadIdx.x < K) partial[(long long)threadIdx.x * gridDim.x + blockIdx.x] = s;
}

// out[blockIdx.x] = the sum of partial[blockIdx.x * nblocks + b] over b: thread t adds the
// partials t, t + RED_THREADS, ... in order, then the block tree. One block per result;
// `out` points at the first result's slot.
extern "C" __global__ void finish_sums(int nblocks, const double *__restrict__ partial,
                                       double *__restrict__ out) {
    const double *p = partial + (long long)blockIdx.x * nblocks;
    double acc[1] = {0.0};
    for (int b = threadIdx.x; b < nblocks; b += RED_THREADS) acc[0] += p[b];
    const double s = block_sums<1>(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// ---------------------------------------------------------------------------------------
// SpMV.

// Roundings beyond a row's entries covered by the bound on a computed residual row, and the
// unit roundoff 2^-53: RESIDUAL_BOUND_EXTRA and UNIT_ROUNDOFF of device/mod.rs.
#define RESIDUAL_BOUND_EXTRA 6
#define UNIT_ROUNDOFF 1.1102230246251565e-16

// The bound on the rounding error of a computed residual row b - sum_j a_j x_j of m entries
// whose |a_j x_j| add up to `abs` (residual_row_bound in device/mod.rs, the same expression).
__device__ __forceinline__ double residual_row_bound(long long m, double b, double abs) {
    return ((double)(m + RESIDUAL_BOUND_EXTRA) * UNIT_ROUNDOFF) * (fabs(b) + abs);
}

// Vector CSR (Bell and Garland, SC 2009): T lanes per row (T in {1, 2, 4, 8, 16, 32}),
// consecutive lanes of a warp forming segments of T; the lanes stride over the row, then a
// shuffle tree of width T adds them. T = 1 sums each row in CSR order: the CPU's bits.
// Rows are visited grid-stride; the loop condition is the first row of the warp, so every
// lane of a warp runs the same iterations and reaches every shuffle. With DOT, lane 0 of
// each row also accumulates x[row] * y[row], and the block partials of that dot product are
// written to `partial` (a fixed grid: the host launches RED_BLOCKS blocks). With BOUND
// (the true residual's error bound, Device::residual_bound), the lanes also sum
// |a_ij x_j| beside the row (the same tree), and lane 0 accumulates w[row] e e of the row's
// bound e = residual_row_bound(entries, b[row], that sum) instead; y = A x keeps its bits.
template <int T, bool DOT, bool BOUND>
__device__ __forceinline__ void spmv_csr(long long rows, const u64 *__restrict__ indptr,
                                         const unsigned *__restrict__ cols,
                                         const double *__restrict__ vals,
                                         const double *__restrict__ x, double *__restrict__ y,
                                         const double *__restrict__ b,
                                         const double *__restrict__ w,
                                         double *__restrict__ partial) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long segs = (long long)gridDim.x * blockDim.x / T;
    const long long seg = tid / T;
    const long long warp_seg = (tid & ~31LL) / T;
    const int lane = (int)(threadIdx.x % T);
    double dot[1] = {0.0};
    for (long long base = 0; warp_seg + base < rows; base += segs) {
        const long long row = seg + base;
        double acc = 0.0, abs = 0.0;
        long long lo = 0, hi = 0;
        if (row < rows) {
            lo = (long long)indptr[row];
            hi = (long long)indptr[row + 1];
            for (long long k = lo + lane; k < hi; k += T) {
                const double p = vals[k] * __ldg(&x[cols[k]]);
                acc += p;
                if (BOUND) abs += fabs(p);
            }
        }
        if (T > 1) {
#pragma unroll
            for (int off = T / 2; off > 0; off >>= 1) {
                acc += __shfl_down_sync(FULL_MASK, acc, off, T);
                if (BOUND) abs += __shfl_down_sync(FULL_MASK, abs, off, T);
            }
        }
        if (row < rows && lane == 0) {
            y[row] = acc;
            if (DOT) dot[0] += x[row] * acc;
            if (BOUND) {
                const double e = residual_row_bound(hi - lo, b[row], abs);
                dot[0] += e * w[row] * e;
            }
        }
    }
    if (DOT || BOUND) write_partials<1>(dot, partial);
}

#define SPMV_CSR_KERNELS(T)                                                                  \
    extern "C" __global__ void spmv_csr_t##T(long long rows, const u64 *indptr,              \
                                             const unsigned *cols, const double *vals,       \
                                             const double *x, double *y) {                   \
        spmv_csr<T, false, false>(rows, indptr, cols, vals, x, y, nullptr, nullptr,          \
                                  nullptr);                                                  \
    }                                                                                        \
    extern "C" __global__ void spmv_dot_csr_t##T(long long rows, const u64 *indptr,          \
                                                 const unsigned *cols, const double *vals,   \
                                                 const double *x, double *y,                 \
                                                 double *partial) {                          \
        spmv_csr<T, true, false>(rows, indptr, cols, vals, x, y, nullptr, nullptr, partial); \
    }                                                                                        \
    extern "C" __global__ void spmv_bound_csr_t##T(                                          \
        long long rows, const u64 *indptr, const unsigned *cols, const double *vals,         \
        const double *x, double *y, const double *b, const double *w, double *partial) {     \
        spmv_csr<T, false, true>(rows, indptr, cols, vals, x, y, b, w, partial);             \
    }
SPMV_CSR_KERNELS(1)
SPMV_CSR_KERNELS(2)
SPMV_CSR_KERNELS(4)
SPMV_CSR_KERNELS(8)
SPMV_CSR_KERNELS(16)
SPMV_CSR_KERNELS(32)

// SELL-C-sigma (Kreutzer et al., SIAM J. Sci. Comput. 2014; layout: device/sell.rs): one
// thread per sorted position p of the `npos` rows, slices of c rows stored column-major;
// each row loops over its own entries only, in CSR order (the CPU's bits), and writes its
// original row perm[p]; positions whose original row is >= `rows` (a prefix) are skipped.
// With DOT or BOUND, as the CSR kernels (all rows).
template <bool DOT, bool BOUND>
__device__ __forceinline__ void spmv_sell_rows(long long npos, long long rows, int c,
                                               const u64 *__restrict__ slice_ptr,
                                               const unsigned *__restrict__ row_len,
                                               const unsigned *__restrict__ perm,
                                               const unsigned *__restrict__ cols,
                                               const double *__restrict__ vals,
                                               const double *__restrict__ x,
                                               double *__restrict__ y,
                                               const double *__restrict__ b,
                                               const double *__restrict__ w,
                                               double *__restrict__ partial) {
    double dot[1] = {0.0};
    FOR_EACH(p, npos) {
        const long long r = perm[p];
        if (r >= rows) continue;
        const u64 base = slice_ptr[p / c] + (u64)(p % c);
        const unsigned len = row_len[p];
        double acc = 0.0, abs = 0.0;
        for (unsigned j = 0; j < len; ++j) {
            const u64 k = base + (u64)j * (u64)c;
            const double v = vals[k] * __ldg(&x[cols[k]]);
            acc += v;
            if (BOUND) abs += fabs(v);
        }
        y[r] = acc;
        if (DOT) dot[0] += x[r] * acc;
        if (BOUND) {
            const double e = residual_row_bound((long long)len, b[r], abs);
            dot[0] += e * w[r] * e;
        }
    }
    if (DOT || BOUND) write_partials<1>(dot, partial);
}

extern "C" __global__ void spmv_sell(long long npos, long long rows, int c, const u64 *slice_ptr,
                                     const unsigned *row_len, const unsigned *perm,
                                     const unsigned *cols, const double *vals, const double *x,
                                     double *y) {
    spmv_sell_rows<false, false>(npos, rows, c, slice_ptr, row_len, perm, cols, vals, x, y,
                                 nullptr, nullptr, nullptr);
}

extern "C" __global__ void spmv_dot_sell(long long npos, int c, const u64 *slice_ptr,
                                         const unsigned *row_len, const unsigned *perm,
                                         const unsigned *cols, const double *vals,
                                         const double *x, double *y, double *partial) {
    spmv_sell_rows<true, false>(npos, npos, c, slice_ptr, row_len, perm, cols, vals, x, y,
                                nullptr, nullptr, partial);
}

extern "C" __global__ void spmv_bound_sell(long long npos, int c, const u64 *slice_ptr,
                                           const unsigned *row_len, const unsigned *perm,
                                           const unsigned *cols, const double *vals,
                                           const double *x, double *y, const double *b,
                                           const double *w, double *partial) {
    spmv_sell_rows<false, true>(npos, npos, c, slice_ptr, row_len, perm, cols, vals, x, y, b,
                                w, partial);
}

// ---------------------------------------------------------------------------------------
// Copies and halo packing.

// out[i] = value.
extern "C" __global__ void fill(long long n, double value, double *__restrict__ out) {
    FOR_EACH(i, n) out[i] = value;
}

// out[i] = src[idx[i]] (the host checked every index against src's length).
extern "C" __global__ void gather(long long m, const double *__restrict__ src,
                                  const unsigned *__restrict__ idx, double *__restrict__ out) {
    FOR_EACH(i, m) out[i] = src[idx[i]];
}

// out[idx[i]] = src[i] (indices distinct, checked against out's length by the host).
extern "C" __global__ void scatter(long long m, const double *__restrict__ src,
                                   const unsigned *__restrict__ idx, double *__restrict__ out) {
    FOR_EACH(i, m) out[idx[i]] = src[i];
}

// ---------------------------------------------------------------------------------------
// Elementwise updates, in the CPU's expression order.

// y += alpha x
extern "C" __global__ void axpy(long long n, double alpha, const double *__restrict__ x,
                                double *__restrict__ y) {
    FOR_EACH(i, n) y[i] = y[i] + alpha * x[i];
}

// y = x + beta y
extern "C" __global__ void xpay(long long n, const double *__restrict__ x, double beta,
                                double *__restrict__ y) {
    FOR_EACH(i, n) y[i] = x[i] + beta * y[i];
}

// y = x alpha
extern "C" __global__ void scale(long long n, double alpha, const double *__restrict__ x,
                                 double *__restrict__ y) {
    FOR_EACH(i, n) y[i] = x[i] * alpha;
}

// out = a b
extern "C" __global__ void mul(long long n, const double *__restrict__ a,
                               const double *__restrict__ b, double *__restrict__ out) {
    FOR_EACH(i, n) out[i] = a[i] * b[i];
}

// The iterate as the caller receives it (device/mod.rs `representable_value`): an entry
// whose x s or (x s) / scale is not a normal number while x != 0 becomes ((x s / scale)
// scale) / s; every other entry is left untouched.
__device__ __forceinline__ bool is_normal(double v) {
    const double a = fabs(v);
    return a >= 2.2250738585072014e-308 && a <= 1.7976931348623157e308;
}

extern "C" __global__ void representable(long long n, const double *__restrict__ s,
                                         double scale, double *__restrict__ x) {
    FOR_EACH(i, n) {
        const double xi = x[i];
        const double y = xi * s[i];
        const double u = y / scale;
        if (xi != 0.0 && !(is_normal(y) && is_normal(u))) x[i] = (u * scale) / s[i];
    }
}

// out = a / b
extern "C" __global__ void divide(long long n, const double *__restrict__ a,
                                  const double *__restrict__ b, double *__restrict__ out) {
    FOR_EACH(i, n) out[i] = a[i] / b[i];
}

// x += alpha p (the old p), then p = r + beta p.
extern "C" __global__ void cg_update(long long n, double alpha, double beta,
                                     const double *__restrict__ r, double *__restrict__ p,
                                     double *__restrict__ x) {
    FOR_EACH(i, n) {
        const double pi = p[i];
        x[i] = x[i] + alpha * pi;
        p[i] = r[i] + beta * pi;
    }
}

// p = r + beta p; ap = ar + beta ap; x += a p; r += (-a) ap (the new p and ap); partials
// of r.r and, with K = 2, sum r^2 w (w is not read with K = 1).
template <int K>
__device__ void ccg_update_body(long long n, double a, double beta,
                                const double *__restrict__ ar, double *__restrict__ r,
                                double *__restrict__ p, double *__restrict__ ap,
                                double *__restrict__ x, const double *__restrict__ w,
                                double *__restrict__ partial) {
    double sums[K];
    for (int k = 0; k < K; ++k) sums[k] = 0.0;
    FOR_EACH(i, n) {
        const double pi = r[i] + beta * p[i];
        const double api = ar[i] + beta * ap[i];
        const double rn = r[i] + (-a) * api;
        p[i] = pi;
        ap[i] = api;
        x[i] = x[i] + a * pi;
        r[i] = rn;
        sums[0] += rn * rn;
        if (K == 2) sums[K - 1] += rn * w[i] * rn;
    }
    write_partials<K>(sums, partial);
}

extern "C" __global__ void ccg_update(long long n, double a, double beta,
                                      const double *__restrict__ ar, double *__restrict__ r,
                                      double *__restrict__ p, double *__restrict__ ap,
                                      double *__restrict__ x, const double *__restrict__ w,
                                      double *__restrict__ partial) {
    ccg_update_body<2>(n, a, beta, ar, r, p, ap, x, w, partial);
}

// ccg_update without the weighted sum: partials of r.r only (the same bits as
// ccg_update's first sum).
extern "C" __global__ void ccg_update_dot(long long n, double a, double beta,
                                          const double *__restrict__ ar, double *__restrict__ r,
                                          double *__restrict__ p, double *__restrict__ ap,
                                          double *__restrict__ x, double *__restrict__ partial) {
    ccg_update_body<1>(n, a, beta, ar, r, p, ap, x, nullptr, partial);
}

// One s-step basis column: mode 0 out = a; 1 out = a - p1 s (Newton, p1 = theta);
// 2 out = p1 a - p2 s (first Chebyshev column, p1 = eta, p2 = zeta);
// 3 out = 2 (p1 a - p2 s) - prev.
extern "C" __global__ void basis_step(long long n, int mode, double p1, double p2,
                                      const double *__restrict__ a,
                                      const double *__restrict__ s,
                                      const double *__restrict__ prev,
                                      double *__restrict__ out) {
    FOR_EACH(i, n) {
        double v;
        if (mode == 0) {
            v = a[i];
        } else if (mode == 1) {
            v = a[i] - p1 * s[i];
        } else if (mode == 2) {
            v = p1 * a[i] - p2 * s[i];
        } else {
            v = 2.0 * (p1 * a[i] - p2 * s[i]) - prev[i];
        }
        out[i] = v;
    }
}

// s += eta (r - s); y += eta (x - y).
extern "C" __global__ void smooth_update(long long n, double eta, const double *__restrict__ r,
                                         const double *__restrict__ x, double *__restrict__ s,
                                         double *__restrict__ y) {
    FOR_EACH(i, n) {
        const double si = s[i], yi = y[i];
        s[i] = si + eta * (r[i] - si);
        y[i] = yi + eta * (x[i] - yi);
    }
}

// s = s g; y = g y + (1 - g) x0.
extern "C" __global__ void smooth_rescale(long long n, double g, const double *__restrict__ x0,
                                          double *__restrict__ s, double *__restrict__ y) {
    FOR_EACH(i, n) {
        s[i] = s[i] * g;
        y[i] = g * y[i] + (1.0 - g) * x0[i];
    }
}

// acc + sum_j c[j] v_j[i] over the j < m with c[j] != 0, in increasing j (the CPU's order
// when acc = y[i]). `vs` is a table of m device addresses.
__device__ __forceinline__ double lincomb_at(long long i, int m, const u64 *__restrict__ vs,
                                             const double *__restrict__ c, double acc) {
    for (int j = 0; j < m; ++j) {
        const double cj = c[j];
        if (cj != 0.0) acc = acc + cj * ((const double *)vs[j])[i];
    }
    return acc;
}

// y += sum_j c[j] v_j over the j < m with c[j] != 0, in increasing j, starting from y (the
// CPU's order). `vs` is a table of m device addresses.
extern "C" __global__ void lincomb(long long n, int m, const u64 *__restrict__ vs,
                                   const double *__restrict__ c, double *__restrict__ y) {
    FOR_EACH(i, n) { y[i] = lincomb_at(i, m, vs, c, y[i]); }
}

// The block linear combination dst_j += sum_l coef[l * nd + j] src_l (coef row-major
// ns x nd), over the l with a nonzero coefficient in increasing l for each destination (the
// CPU's order). blockIdx.x picks a group of LINCOMB_DSTS destinations, whose values stay in
// registers while every source is read once; blockIdx.y strides over the values.
extern "C" __global__ void lincomb_block(long long n, int ns, int nd,
                                         const u64 *__restrict__ srcs,
                                         const double *__restrict__ coef,
                                         const u64 *__restrict__ dsts) {
    const int j0 = blockIdx.x * LINCOMB_DSTS;
    const int dn = min(LINCOMB_DSTS, nd - j0);
    double *d[LINCOMB_DSTS];
#pragma unroll
    for (int j = 0; j < LINCOMB_DSTS; ++j) d[j] = (double *)dsts[j0 + min(j, dn - 1)];
    for (long long i = (long long)blockIdx.y * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.y * blockDim.x) {
        double acc[LINCOMB_DSTS];
#pragma unroll
        for (int j = 0; j < LINCOMB_DSTS; ++j) acc[j] = j < dn ? d[j][i] : 0.0;
        for (int l = 0; l < ns; ++l) {
            const double *cl = coef + (long long)l * nd + j0;
            bool used = false;
#pragma unroll
            for (int j = 0; j < LINCOMB_DSTS; ++j) used |= j < dn && cl[j] != 0.0;
            if (!used) continue;
            const double v = ((const double *)srcs[l])[i];
#pragma unroll
            for (int j = 0; j < LINCOMB_DSTS; ++j) {
                if (j < dn) {
                    const double cj = cl[j];
                    if (cj != 0.0) acc[j] = acc[j] + cj * v;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < LINCOMB_DSTS; ++j)
            if (j < dn) d[j][i] = acc[j];
    }
}

// ---------------------------------------------------------------------------------------
// Reductions (fixed grid; block partials, finished by `finish_sums`).

// Pipelined CG: z = q + beta z, s = w + beta s, p = r + beta p, x += a p, r -= a s,
// w -= a z; partials of r.r, sum r^2 wt, w.r and the gap estimate's x.x, p.p, s.s, z.z,
// w.w of the new vectors (PIPECG_SUMS = 8).
extern "C" __global__ void pipecg_update(long long n, double a, double beta,
                                         const double *__restrict__ q, double *__restrict__ w,
                                         double *__restrict__ r, double *__restrict__ z,
                                         double *__restrict__ s, double *__restrict__ p,
                                         double *__restrict__ x, const double *__restrict__ wt,
                                         double *__restrict__ partial) {
    double sums[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    FOR_EACH(i, n) {
        const double wi = w[i], ri = r[i];
        const double zi = q[i] + beta * z[i];
        const double si = wi + beta * s[i];
        const double pi = ri + beta * p[i];
        const double xi = x[i] + a * pi;
        const double rn = ri - a * si;
        const double wn = wi - a * zi;
        z[i] = zi;
        s[i] = si;
        p[i] = pi;
        x[i] = xi;
        r[i] = rn;
        w[i] = wn;
        sums[0] += rn * rn;
        sums[1] += rn * wt[i] * rn;
        sums[2] += wn * rn;
        sums[3] += xi * xi;
        sums[4] += pi * pi;
        sums[5] += si * si;
        sums[6] += zi * zi;
        sums[7] += wn * wn;
    }
    write_partials<8>(sums, partial);
}

// y += alpha x; partials of y.y (the bits of axpy_norms' first sum).
extern "C" __global__ void axpy_dot(long long n, double alpha, const double *__restrict__ x,
                                    double *__restrict__ y, double *__restrict__ partial) {
    double sums[1] = {0.0};
    FOR_EACH(i, n) {
        const double v = y[i] + alpha * x[i];
        y[i] = v;
        sums[0] += v * v;
    }
    write_partials<1>(sums, partial);
}

// y += alpha x; partials of y.y and sum y^2 w.
extern "C" __global__ void axpy_norms(long long n, double alpha, const double *__restrict__ x,
                                      double *__restrict__ y, const double *__restrict__ w,
                                      double *__restrict__ partial) {
    double sums[2] = {0.0, 0.0};
    FOR_EACH(i, n) {
        const double v = y[i] + alpha * x[i];
        y[i] = v;
        sums[0] += v * v;
        sums[1] += v * w[i] * v;
    }
    write_partials<2>(sums, partial);
}

// y = b - y; partials of y.y and sum y^2 w.
extern "C" __global__ void residual_norms(long long n, const double *__restrict__ b,
                                          double *__restrict__ y, const double *__restrict__ w,
                                          double *__restrict__ partial) {
    double sums[2] = {0.0, 0.0};
    FOR_EACH(i, n) {
        const double v = b[i] - y[i];
        y[i] = v;
        sums[0] += v * v;
        sums[1] += v * w[i] * v;
    }
    write_partials<2>(sums, partial);
}

// Partials of sum r^2 w.
extern "C" __global__ void wnorm(long long n, const double *__restrict__ r,
                                 const double *__restrict__ w, double *__restrict__ partial) {
    double sums[1] = {0.0};
    FOR_EACH(i, n) {
        const double v = r[i];
        sums[0] += v * w[i] * v;
    }
    write_partials<1>(sums, partial);
}

// lincomb, then partials of y.y and sum y^2 w of the result.
extern "C" __global__ void lincomb_norms(long long n, int m, const u64 *__restrict__ vs,
                                         const double *__restrict__ c, double *__restrict__ y,
                                         const double *__restrict__ w,
                                         double *__restrict__ partial) {
    double sums[2] = {0.0, 0.0};
    FOR_EACH(i, n) {
        const double acc = lincomb_at(i, m, vs, c, y[i]);
        y[i] = acc;
        sums[0] += acc * acc;
        sums[1] += acc * w[i] * acc;
    }
    write_partials<2>(sums, partial);
}

// Gram block of nx vectors `xs` and ny vectors `ys` (tables of device addresses): the
// pairs x_i . y_j, weighted sum_k (x_ik w_k) y_jk when `weighted`. blockIdx.x is a tile of
// GRAM_TILE x GRAM_TILE pairs (Full: row-major over the tile grid; Upper: the tiles on and
// above the diagonal, row by row, keeping the pairs j >= i), blockIdx.y the reduction block
// (gridDim.y = RED_BLOCKS): the tiles of one stretch of values run side by side, so the
// vectors they share come from L2. Result index of (i, j): Full i * ny + j; Upper
// i * nx - i (i - 1) / 2 + (j - i); its partials at [index * gridDim.y + blockIdx.y].
extern "C" __global__ void gram(long long n, int nx, int ny, int upper,
                                const u64 *__restrict__ xs, const u64 *__restrict__ ys,
                                int weighted, const double *__restrict__ w,
                                double *__restrict__ partial) {
    const int gy = (ny + GRAM_TILE - 1) / GRAM_TILE;
    int xg, yg;
    if (upper) {
        int t = blockIdx.x;
        xg = 0;
        while (t >= gy - xg) {
            t -= gy - xg;
            ++xg;
        }
        yg = xg + t;
    } else {
        xg = blockIdx.x / gy;
        yg = blockIdx.x % gy;
    }
    const int i0 = xg * GRAM_TILE, j0 = yg * GRAM_TILE;
    const int tx = min(GRAM_TILE, nx - i0), ty = min(GRAM_TILE, ny - j0);
    const double *xp[GRAM_TILE];
    const double *yp[GRAM_TILE];
#pragma unroll
    for (int a = 0; a < GRAM_TILE; ++a) {
        xp[a] = (const double *)xs[i0 + min(a, tx - 1)];
        yp[a] = (const double *)ys[j0 + min(a, ty - 1)];
    }
    double acc[GRAM_TILE * GRAM_TILE];
#pragma unroll
    for (int k = 0; k < GRAM_TILE * GRAM_TILE; ++k) acc[k] = 0.0;
    for (long long i = (long long)blockIdx.y * RED_THREADS + threadIdx.x; i < n;
         i += (long long)gridDim.y * RED_THREADS) {
        double xv[GRAM_TILE], yv[GRAM_TILE];
        const double wi = weighted ? w[i] : 0.0;
#pragma unroll
        for (int a = 0; a < GRAM_TILE; ++a) {
            xv[a] = a < tx ? xp[a][i] : 0.0;
            if (weighted) xv[a] = xv[a] * wi;
            yv[a] = a < ty ? yp[a][i] : 0.0;
        }
#pragma unroll
        for (int a = 0; a < GRAM_TILE; ++a)
#pragma unroll
            for (int b = 0; b < GRAM_TILE; ++b) acc[a * GRAM_TILE + b] += xv[a] * yv[b];
    }
    const double s = block_sums<GRAM_TILE * GRAM_TILE>(acc);
    const int k = threadIdx.x;
    if (k < GRAM_TILE * GRAM_TILE) {
        const int a = k / GRAM_TILE, b = k % GRAM_TILE;
        const int i = i0 + a, j = j0 + b;
        if (a < tx && b < ty && (!upper || j >= i)) {
            const long long r = upper ? (long long)i * nx - (long long)i * (i - 1) / 2 + (j - i)
                                      : (long long)i * ny + j;
            partial[r * gridDim.y + blockIdx.y] = s;
        }
    }
}
