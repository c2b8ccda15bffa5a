/* float32 GEMM y = x @ w.T (+ bias) without packing, for the encoder and
 * prefill (many activation rows against one memory-mapped weight matrix).
 *
 * Rows of x and rows of w are both contiguous along K, so each output is a
 * dot product of two contiguous rows (tinyBLAS / llamafile style): a register
 * tile of OS_GM_MR x rows by OS_GM_NR w rows keeps MR * NR vector accumulators
 * along k, and each step loads MR + NR vectors for MR * NR FMAs. BLAS instead
 * packs all of w on every call, which costs when there are only ~100-400 rows.
 *
 * Blocking: K in blocks of kc floats, so the x tile (MR x kc) stays in L1
 * while a band of w rows (nb x kc) is read from L2 by every x tile; a task is
 * (block of x rows, band of w rows), and the Cython caller spreads tasks over
 * threads.
 *
 * Determinism: every output element is summed in the same order whatever the
 * tile it falls in or the task that computes it: one vector accumulator per
 * element over a K block, os_hsum, blocks added in k order, then the scalar
 * K % OS_LANES tail, then the bias. kc is a multiple of OS_LANES fixed by the
 * caller independently of the thread count, so results are bit-identical for
 * any split.
 */
#ifndef ONESPEECH_GEMM_IMPL_H
#define ONESPEECH_GEMM_IMPL_H

#include "_kernels_impl.h"

/* 4 x 3: the fewest loads per FMA that fit 16 registers (AVX2); 3x4, 6x2, 2x6
 * and 5x2 measured 5-35 % slower (2 threads, K 896 / 1024). AVX-512 has 32
 * registers: 6 x 4 (24 accumulators, two os_hsum16 per tile) took ours /
 * OpenBLAS from 0.68-0.79 (4 x 4) to 0.72-1.07 (two runs) at the shapes
 * routed here */
#ifndef OS_GM_MR
#if OS_LANES == 16
#define OS_GM_MR 6
#else
#define OS_GM_MR 4
#endif
#endif
#ifndef OS_GM_NR
#if OS_LANES == 16
#define OS_GM_NR 4
#else
#define OS_GM_NR 3
#endif
#endif

/* y[i, j] = (first ? 0 : y[i, j]) + os_hsum(acc[i][j]) for the rm x rn tile.
 * Indices are compile-time constants after inlining, so acc stays in
 * registers (a copy into a temporary array made GCC spill every vector). */
static inline __attribute__((always_inline)) void
os_gm_store(vf acc[6][6], const int rm, const int rn, float *y, os_idx N, int first) {
#if OS_LANES == 8
#define OS_GM_ACC(t) ((t) < rm * rn ? acc[(t) / rn][(t) % rn] : os_splat(0))
    for (int t = 0; t < rm * rn; t += 8) {
        /* lane l of r holds the sum of accumulator t + slot[l] */
        const int slot[8] = {0, 2, 4, 6, 1, 3, 5, 7};
        vf r = os_hsum8(OS_GM_ACC(t), OS_GM_ACC(t + 1), OS_GM_ACC(t + 2), OS_GM_ACC(t + 3),
                           OS_GM_ACC(t + 4), OS_GM_ACC(t + 5), OS_GM_ACC(t + 6), OS_GM_ACC(t + 7));
        for (int l = 0; l < 8; l++) {
            int u = t + slot[l];
            if (u < rm * rn) {
                float *p = y + (u / rn) * N + u % rn;
                *p = first ? r[l] : *p + r[l];
            }
        }
    }
#undef OS_GM_ACC
#elif OS_LANES == 16
    for (int t = 0; t < rm * rn; t += 16) {
        vf v[16];
        float r[16]; /* r[u]: the sum of accumulator t + u */
        for (int u = 0; u < 16; u++) v[u] = t + u < rm * rn ? acc[(t + u) / rn][(t + u) % rn] : os_splat(0);
        os_hsum_batch(v, r);
        for (int u = 0; u < 16 && t + u < rm * rn; u++) {
            float *p = y + ((t + u) / rn) * N + (t + u) % rn;
            *p = first ? r[u] : *p + r[u];
        }
    }
#else
    for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++) {
            float s = os_hsum(acc[i][j]);
            y[i * N + j] = first ? s : y[i * N + j] + s;
        }
#endif
}

/* y[m, n] = (y[m, n] + sum over k < kt of x[m, k] * w[n - n0, k]) + bias[n]: the
 * scalar K % OS_LANES tail and the bias. One compiled body serves every GEMM here,
 * so float32 and widened bf16 weights round these sums alike (two copies of the
 * loop were contracted into FMAs differently by the compiler). */
static __attribute__((noinline)) void
os_gm_tail(const float *x, os_idx ldx, const float *w, os_idx ldw, os_idx kt, const float *bias, float *y,
           os_idx N, os_idx m0, os_idx m1, os_idx n0, os_idx n1) {
    for (os_idx m = m0; m < m1; m++)
        for (os_idx n = n0; n < n1; n++) {
            const float *xr = x + m * ldx;
            const float *wr = w + (n - n0) * ldw;
            float s = y[m * N + n];
            for (os_idx k = 0; k < kt; k++) s += xr[k] * wr[k];
            y[m * N + n] = bias ? s + bias[n] : s;
        }
}

#define OS_DEFINE_GEMM(NAME, WT, LOADW)                                             \
    /* y[i, j] (= or +=) sum over one K block of x[i, k] * w[j, k] for an rm x rn tile;     \
     * kn is a multiple of OS_LANES. Always inlined with constant rm, rn so the              \
     * accumulators live in registers. */                                                    \
    static inline __attribute__((always_inline)) void                                       \
    NAME##_tile(const float *x, os_idx ldx, const WT *w, os_idx ldw, os_idx kn, float *y,    \
                os_idx N, const int rm, const int rn, int first) {                           \
        vf acc[6][6];                                                                        \
        for (int i = 0; i < rm; i++)                                                         \
            for (int j = 0; j < rn; j++) acc[i][j] = os_splat(0);                            \
        for (os_idx k = 0; k < kn; k += OS_LANES) {                                          \
            vf wv[6];                                                                        \
            for (int j = 0; j < rn; j++) wv[j] = LOADW(w + j * ldw + k);                     \
            for (int i = 0; i < rm; i++) {                                                   \
                vf xv = os_load_f32(x + i * ldx + k);                                        \
                for (int j = 0; j < rn; j++) acc[i][j] += xv * wv[j];                        \
            }                                                                                \
        }                                                                                    \
        os_gm_store(acc, rm, rn, y, N, first);                                               \
    }                                                                                        \
    /* one non-inlined function per tile shape keeps the dispatch small */                   \
    OS_GM_TILES(NAME, WT)                                                                    \
    /* y[m, n] = x[m, :] . w[n, :] (+ bias[n]) for m in [m0, m1), n in [n0, n1).             \
     * x: (M, K), w: (N, K), y: (M, N), all row-major; kc: K block, a positive               \
     * multiple of OS_LANES. */                                                              \
    static void NAME(const float *x, const WT *w, const float *bias, float *y, os_idx N,     \
                     os_idx K, os_idx m0, os_idx m1, os_idx n0, os_idx n1, os_idx kc) {      \
        os_idx kv = K - K % OS_LANES;                                                        \
        for (os_idx k0 = 0; k0 == 0 || k0 < kv; k0 += kc) {                                  \
            os_idx kn = kv - k0 < kc ? kv - k0 : kc;                                         \
            for (os_idx m = m0; m < m1; m += OS_GM_MR) {                                     \
                int rm = m1 - m < OS_GM_MR ? (int)(m1 - m) : OS_GM_MR;                       \
                const float *xm = x + m * K + k0;                                            \
                float *ym = y + m * N;                                                       \
                os_idx n = n0;                                                               \
                NAME##_tile_fn full = NAME##_tiles[rm - 1][OS_GM_NR - 1];                    \
                for (; n + OS_GM_NR <= n1; n += OS_GM_NR)                                    \
                    full(xm, K, w + n * K + k0, K, kn, ym + n, N, k0 == 0);                  \
                if (n < n1)                                                                  \
                    NAME##_tiles[rm - 1][n1 - n - 1](xm, K, w + n * K + k0, K, kn, ym + n,   \
                                                      N, k0 == 0);                           \
            }                                                                                \
        }                                                                                    \
        if (kv < K || bias != NULL)                                                          \
            os_gm_tail(x + kv, K, w + n0 * K + kv, K, K - kv, bias, y, N, m0, m1, n0, n1);   \
    }

#define OS_GM_TILE_FN(NAME, WT, RM, RN)                                                      \
    static void NAME##_tile_##RM##x##RN(const float *x, os_idx ldx, const WT *w, os_idx ldw, \
                                        os_idx kn, float *y, os_idx N, int first) {          \
        NAME##_tile(x, ldx, w, ldw, kn, y, N, RM, RN, first);                                \
    }
#define OS_GM_TILE_ROW(NAME, WT, RM)                                                         \
    OS_GM_TILE_FN(NAME, WT, RM, 1) OS_GM_TILE_FN(NAME, WT, RM, 2) OS_GM_TILE_FN(NAME, WT, RM, 3) \
    OS_GM_TILE_FN(NAME, WT, RM, 4) OS_GM_TILE_FN(NAME, WT, RM, 5) OS_GM_TILE_FN(NAME, WT, RM, 6)
#define OS_GM_TILE_PTRS(NAME, RM)                                                            \
    {NAME##_tile_##RM##x1, NAME##_tile_##RM##x2, NAME##_tile_##RM##x3,                       \
     NAME##_tile_##RM##x4, NAME##_tile_##RM##x5, NAME##_tile_##RM##x6}
#define OS_GM_TILES(NAME, WT)                                                                \
    OS_GM_TILE_ROW(NAME, WT, 1) OS_GM_TILE_ROW(NAME, WT, 2) OS_GM_TILE_ROW(NAME, WT, 3)      \
    OS_GM_TILE_ROW(NAME, WT, 4) OS_GM_TILE_ROW(NAME, WT, 5) OS_GM_TILE_ROW(NAME, WT, 6)      \
    typedef void (*NAME##_tile_fn)(const float *, os_idx, const WT *, os_idx, os_idx, float *, os_idx, int); \
    static NAME##_tile_fn const NAME##_tiles[6][6] = {                                       \
        OS_GM_TILE_PTRS(NAME, 1), OS_GM_TILE_PTRS(NAME, 2), OS_GM_TILE_PTRS(NAME, 3),        \
        OS_GM_TILE_PTRS(NAME, 4), OS_GM_TILE_PTRS(NAME, 5), OS_GM_TILE_PTRS(NAME, 6),        \
    };

/* (a bfloat16 instance, os_load_bf16 / os_bf16_scalar, measured 0.6-0.9x of
 * expanding weight blocks for BLAS, so ops keeps that path and it is not built;
 * os_gemm_bf16w_nt below widens per band instead) */
OS_DEFINE_GEMM(os_gemm_f32_nt, float, os_load_f32)

/* os_gemm_f32_nt with bfloat16 weights, widened one band at a time: for each K
 * block the task's w rows [n0, n1) are widened into buf ((n1 - n0) x kc floats,
 * sized to stay in L2) and the float32 tiles run on buf. bf16 values widen
 * exactly and each output is summed in the same order as os_gemm_f32_nt, so
 * y is bit-identical to os_gemm_f32_nt on the widened matrix; the weights
 * are read once from memory at 2 bytes each and no widened copy of the whole
 * matrix is ever written. */
static void os_gemm_bf16w_nt(const float *x, const uint16_t *w, const float *bias, float *y, os_idx N,
                             os_idx K, os_idx m0, os_idx m1, os_idx n0, os_idx n1, os_idx kc, float *buf) {
    os_idx kv = K - K % OS_LANES;
    for (os_idx k0 = 0; k0 == 0 || k0 < kv; k0 += kc) {
        os_idx kn = kv - k0 < kc ? kv - k0 : kc;
        for (os_idx n = n0; n < n1; n++) os_bf16_to_f32(w + n * K + k0, buf + (n - n0) * kc, kn);
        for (os_idx m = m0; m < m1; m += OS_GM_MR) {
            int rm = m1 - m < OS_GM_MR ? (int)(m1 - m) : OS_GM_MR;
            const float *xm = x + m * K + k0;
            float *ym = y + m * N;
            os_idx n = n0;
            os_gemm_f32_nt_tile_fn full = os_gemm_f32_nt_tiles[rm - 1][OS_GM_NR - 1];
            for (; n + OS_GM_NR <= n1; n += OS_GM_NR)
                full(xm, K, buf + (n - n0) * kc, kc, kn, ym + n, N, k0 == 0);
            if (n < n1)
                os_gemm_f32_nt_tiles[rm - 1][n1 - n - 1](xm, K, buf + (n - n0) * kc, kc, kn, ym + n, N,
                                                         k0 == 0);
        }
    }
    if (kv == K && bias == NULL) return;
    for (os_idx n = n0; n < n1; n++) os_bf16_to_f32(w + n * K + kv, buf + (n - n0) * OS_LANES, K - kv);
    os_gm_tail(x + kv, K, buf, OS_LANES, K - kv, bias, y, N, m0, m1, n0, n1);
}

#endif
