/* Batched decode GEMV: several activation rows (one per sequence decoded
 * together) against one weight matrix, each output summed exactly as the
 * one-row decode GEMV sums it.
 *
 * Why not the small-batch GEMM (os_dot_*_rows with M > 1) or BLAS: they sum
 * each output in another order (four accumulators over one vector chain, or
 * BLAS's blocking), so a sequence decoded beside others would get other bits
 * than decoded alone. Here every output y[b, n] is the one-row kernel's
 * arithmetic on (x[b], w[n]):
 *   float32 weights, rows below N - N % 4 (os_gemv_f32_rows): one vector
 *     chain a += x * w over k in steps of OS_LANES, os_hsum, the scalar tail
 *     in k order (OS_TAIL_MADD), then + bias (+ 0.0f without one, as there);
 *   float32 weights, the last N % 4 rows (os_dot_f32_1 via os_dot_f32_rows):
 *     that function itself, per activation row;
 *   bf16 weights (os_gemv_bf16_rows, pair-permuted x): an even and an odd
 *     chain per row, os_hsum(e + o), the tail, then + bias.
 * Which rows run together, and how the rows are split over threads, changes
 * no output: the chains of one output never meet another's. What the batch
 * changes is only the order in which outputs are computed: a tile of weight
 * rows is read from memory once and used for every activation row while it
 * is in cache (the one-row kernel reads every weight once per token).
 *
 * Tiles: float32 4 weight rows x up to OS_BGEMV_ROWS activation rows (5 where
 * vectors have 16 lanes and there are 32 registers, else 2) in one pass over
 * the weights; bf16 4 x 2 (else 2 x 2), a batch in passes of two rows. The
 * weight rows are taken from the four quarters of the range, as the one-row
 * kernels read them (four far-apart DRAM streams). A batch of one row calls
 * the one-row kernels (the Cython caller).
 */
#ifndef ONESPEECH_BATCH_GEMV_IMPL_H
#define ONESPEECH_BATCH_GEMV_IMPL_H

#include "_kernels_impl.h"

/* Float32 tiles: the four quarter rows against up to OS_BGEMV_ROWS activation
 * rows in one pass, so that each weight vector is loaded once for all of
 * them and the DRAM streams are read once, front to back. Each output's
 * chain is os_dot_f32_r4p's: a += x * w over k in steps of OS_LANES, os_hsum,
 * the tail in k order. The weights OS_PREFETCH_AHEAD bytes ahead are asked for
 * into L2 (not L1: they would evict the activation rows): many FMAs wait on
 * each weight load here, and without the request the FP scheduler fills with
 * them and too few lines are in flight: the tiles then read the weights
 * markedly slower than the one-row kernel (docs/benchmarks.md, decode). */
#if OS_LANES >= 16
#define OS_BGEMV_ROWS 5 /* 20 accumulators, 4 weight vectors and 1 activation of 32 registers */
#else
#define OS_BGEMV_ROWS 2 /* 8 + 4 + 1 of AVX2's 16 */
#endif
#define OS_DEFINE_BDOT_F32(R)                                                                              \
    static inline __attribute__((always_inline)) void os_bdot_f32_r4x##R(                                  \
        const float *x, os_idx ldx, const float *w0, const float *w1, const float *w2, const float *w3,    \
        os_idx K, float s[][4]) {                                                                          \
        vf a[R][4];                                                                                        \
        for (int r = 0; r < R; r++)                                                                        \
            for (int j = 0; j < 4; j++) a[r][j] = os_splat(0);                                             \
        os_idx k = 0;                                                                                      \
        for (; k + OS_LANES <= K; k += OS_LANES) {                                                         \
            os_prefetch_l2(w0 + k, OS_PREFETCH_AHEAD, 1);                                                  \
            os_prefetch_l2(w1 + k, OS_PREFETCH_AHEAD, 1);                                                  \
            os_prefetch_l2(w2 + k, OS_PREFETCH_AHEAD, 1);                                                  \
            os_prefetch_l2(w3 + k, OS_PREFETCH_AHEAD, 1);                                                  \
            vf v0 = os_load_f32(w0 + k), v1 = os_load_f32(w1 + k);                                         \
            vf v2 = os_load_f32(w2 + k), v3 = os_load_f32(w3 + k);                                         \
            for (int r = 0; r < R; r++) {                                                                  \
                vf xv = os_load_f32(x + r * ldx + k);                                                      \
                a[r][0] += xv * v0;                                                                        \
                a[r][1] += xv * v1;                                                                        \
                a[r][2] += xv * v2;                                                                        \
                a[r][3] += xv * v3;                                                                        \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < R; r++)                                                                        \
            for (int j = 0; j < 4; j++) s[r][j] = os_hsum(a[r][j]);                                        \
        for (; k < K; k++)                                                                                 \
            for (int r = 0; r < R; r++) {                                                                  \
                const float xk = x[r * ldx + k];                                                           \
                OS_TAIL_MADD(s[r][0], xk, w0[k]); OS_TAIL_MADD(s[r][1], xk, w1[k]);                        \
                OS_TAIL_MADD(s[r][2], xk, w2[k]); OS_TAIL_MADD(s[r][3], xk, w3[k]);                        \
            }                                                                                              \
    }
OS_DEFINE_BDOT_F32(1)
OS_DEFINE_BDOT_F32(2)
#if OS_BGEMV_ROWS > 2
OS_DEFINE_BDOT_F32(3)
OS_DEFINE_BDOT_F32(4)
OS_DEFINE_BDOT_F32(5)
#endif

/* y[b * ldy + n] = x[b * ldx :] . W[n] (+ bias[n]) for b < B and n in [n0, n1),
 * all rows below N - N % 4: os_gemv_f32_rows for every activation row */
static void os_bgemv_f32_rows(const float *x, os_idx ldx, os_idx B, const float *W, os_idx K,
                              const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1) {
    const os_idx q = (n1 - n0) / 4;
    float s[OS_BGEMV_ROWS][4];
    for (os_idx n = n0; n < n0 + q; n++) {
        const float *w0 = W + n * K, *w1 = w0 + q * K, *w2 = w1 + q * K, *w3 = w2 + q * K;
        for (os_idx b = 0; b < B;) {
            const os_idx r = B - b < OS_BGEMV_ROWS ? B - b : OS_BGEMV_ROWS;
            const float *xb = x + b * ldx;
            switch (r) {
            case 1: os_bdot_f32_r4x1(xb, ldx, w0, w1, w2, w3, K, s); break;
#if OS_BGEMV_ROWS > 2
            case 2: os_bdot_f32_r4x2(xb, ldx, w0, w1, w2, w3, K, s); break;
            case 3: os_bdot_f32_r4x3(xb, ldx, w0, w1, w2, w3, K, s); break;
            case 4: os_bdot_f32_r4x4(xb, ldx, w0, w1, w2, w3, K, s); break;
            default: os_bdot_f32_r4x5(xb, ldx, w0, w1, w2, w3, K, s); break;
#else
            default: os_bdot_f32_r4x2(xb, ldx, w0, w1, w2, w3, K, s); break;
#endif
            }
            for (os_idx i = 0; i < r; i++)
                for (int j = 0; j < 4; j++)
                    y[(b + i) * ldy + n + j * q] = s[i][j] + (bias ? bias[n + j * q] : 0.0f);
            b += r;
        }
    }
    for (os_idx n = n0 + 4 * q; n < n1; n++) {
        const float *w = W + n * K;
        for (os_idx b = 0; b < B; b++) {
            os_dot_f32_r4p(x + b * ldx, w, w, w, w, K, s[0]);
            y[b * ldy + n] = s[0][0] + (bias ? bias[n] : 0.0f);
        }
    }
}

/* the last rows [n0, n1) at or past N - N % 4, as os_dot_f32_rows sums them for one row */
static void os_bgemv_f32_tail(const float *x, os_idx ldx, os_idx B, const float *W, os_idx K,
                              const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1) {
    for (os_idx n = n0; n < n1; n++)
        for (os_idx b = 0; b < B; b++)
            os_dot_f32_rows(x + b * ldx, 1, W, K, bias, y + b * ldy, ldy, n, n + 1);
}

/* bf16 tiles, each output's e and o chains as in os_gemv_bf16_rows, the weights
 * ahead asked for into L2 as in the float32 tiles. With 32 registers: the four
 * quarter rows against two activation rows (16 accumulators, 8 widened weight
 * vectors, 4 activation vectors), each activation vector loaded once for four
 * weight rows; a batch takes passes of two rows, the weights found in cache
 * after the first. (Two weight rows against four activation rows loaded each
 * activation vector once per weight row: 20 loads per step of two weight
 * lines, and the step of five sequences was bound by loads.) With 16 registers:
 * two weight rows against two activation rows. */
#define OS_DEFINE_BDOT_BF16(W, R)                                                                          \
    static inline __attribute__((always_inline)) void os_bdot_bf16_r##W##x##R(                             \
        const float *x, const float *xp, os_idx ldx, const uint16_t *const *w, const os_idx *m, os_idx K,  \
        const float *bias, float *y, os_idx ldy) {                                                         \
        const vu hi = (vu){0} + 0xFFFF0000u;                                                               \
        const os_idx kk = K - K % OS_PAIR;                                                                 \
        vf ae[R][W], ao[R][W];                                                                             \
        for (int r = 0; r < R; r++)                                                                        \
            for (int j = 0; j < W; j++) ae[r][j] = ao[r][j] = os_splat(0);                                 \
        for (os_idx k = 0; k < kk; k += OS_PAIR) {                                                         \
            vf fe[W], fo[W];                                                                               \
            for (int j = 0; j < W; j++) {                                                                  \
                vu u;                                                                                      \
                os_prefetch_l2(w[j] + k, OS_PREFETCH_AHEAD, 1);                                            \
                memcpy(&u, w[j] + k, sizeof u);                                                            \
                fe[j] = os_bits_to_f32(u << 16);                                                           \
                fo[j] = os_bits_to_f32(u & hi);                                                            \
            }                                                                                              \
            for (int r = 0; r < R; r++) {                                                                  \
                vf e = os_load_f32(xp + r * ldx + k), o = os_load_f32(xp + r * ldx + k + OS_LANES);        \
                for (int j = 0; j < W; j++) {                                                              \
                    ae[r][j] += e * fe[j];                                                                 \
                    ao[r][j] += o * fo[j];                                                                 \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < R; r++)                                                                        \
            for (int j = 0; j < W; j++)                                                                    \
                y[r * ldy + m[j]] = os_pair_finish(ae[r][j], ao[r][j], x + r * ldx, w[j], kk, K, bias, m[j]); \
    }
#if OS_LANES >= 16
#define OS_BF16_TILE_W 4
OS_DEFINE_BDOT_BF16(4, 1)
OS_DEFINE_BDOT_BF16(4, 2)
#else
#define OS_BF16_TILE_W 2
OS_DEFINE_BDOT_BF16(2, 1)
OS_DEFINE_BDOT_BF16(2, 2)
#endif

/* one bf16 weight row against one activation row: os_gemv_bf16_rows's arithmetic */
static inline float os_bdot_bf16_1(const float *x, const float *xp, const uint16_t *a, os_idx K,
                                   const float *bias, os_idx n) {
    const vu hi = (vu){0} + 0xFFFF0000u;
    const os_idx kk = K - K % OS_PAIR;
    vf ae = os_splat(0), ao = ae;
    for (os_idx k = 0; k < kk; k += OS_PAIR) OS_PAIR_STEP(ae, ao, xp, a, k, hi);
    return os_pair_finish(ae, ao, x, a, kk, K, bias, n);
}

/* y[b * ldy + n] = x[b * ldx :] . bf16(W[n]) (+ bias[n]) for b < B and n in [n0, n1);
 * xp holds every activation row pair-permuted (os_pair_permute), ldx apart */
static void os_bgemv_bf16_rows(const float *x, const float *xp, os_idx ldx, os_idx B, const uint16_t *W,
                               os_idx K, const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1) {
    const os_idx q = (n1 - n0) / 4;
    for (os_idx n = n0; n < n0 + q; n++)
        for (int first = 0; first < 4; first += OS_BF16_TILE_W) { /* the quarters OS_BF16_TILE_W at a time */
            os_idx m[OS_BF16_TILE_W];
            const uint16_t *w[OS_BF16_TILE_W];
            for (int j = 0; j < OS_BF16_TILE_W; j++) {
                m[j] = n + (first + j) * q;
                w[j] = W + m[j] * K;
            }
            os_idx b = 0;
            for (; b + 2 <= B; b += 2)
#if OS_LANES >= 16
                os_bdot_bf16_r4x2(x + b * ldx, xp + b * ldx, ldx, w, m, K, bias, y + b * ldy, ldy);
            if (b < B)
                os_bdot_bf16_r4x1(x + b * ldx, xp + b * ldx, ldx, w, m, K, bias, y + b * ldy, ldy);
#else
                os_bdot_bf16_r2x2(x + b * ldx, xp + b * ldx, ldx, w, m, K, bias, y + b * ldy, ldy);
            if (b < B)
                os_bdot_bf16_r2x1(x + b * ldx, xp + b * ldx, ldx, w, m, K, bias, y + b * ldy, ldy);
#endif
        }
    for (os_idx n = n0 + 4 * q; n < n1; n++)
        for (os_idx b = 0; b < B; b++)
            y[b * ldy + n] = os_bdot_bf16_1(x + b * ldx, xp + b * ldx, W + n * K, K, bias, n);
}

#endif
