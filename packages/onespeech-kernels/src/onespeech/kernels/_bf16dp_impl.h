/* bfloat16 x bfloat16 GEMM with float32 accumulation in VDPBF16PS's arithmetic.
 *
 * y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) where x and w hold bfloat16
 * values. This is what AVX512_BF16's VDPBF16PS computes, and its order is the
 * definition here, so that the instruction (os_gemm_bf16dp with
 * OS_BF16DP_NATIVE) and the portable code (every other build) give the same
 * bits:
 *
 * - K is read in steps of 32 values, zero-padded at the end; lane l (0..15)
 *   of 16 float32 accumulators, starting at +0, takes the pair (2l, 2l + 1) of
 *   every step: acc += x[2l+1] w[2l+1], then acc += x[2l] w[2l], each a
 *   float32 multiply-add rounded to nearest even (the product of two bf16
 *   values is exact, so multiply-add and FMA agree), with denormal inputs read
 *   as zero and denormal results flushed to zero;
 * - the 16 lanes are then added in os_hsum's order for 16 lanes (pairwise
 *   halving), and the bias last, those adds with the same flushing.
 *
 * Flushing: on x86 the MXCSR's DAZ and FTZ bits are set for the duration of a
 * call (and restored), so the plain float arithmetic below flushes exactly as
 * the instruction does; elsewhere it is done in software (a result is flushed
 * when it rounds to a magnitude below FLT_MIN).
 */
#ifndef ONESPEECH_BF16DP_IMPL_H
#define ONESPEECH_BF16DP_IMPL_H

#include <float.h>

#include "_kernels_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define OS_DP_MXCSR 1
#else
#define OS_DP_MXCSR 0
#endif

#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define OS_BF16DP_NATIVE 1
#else
#define OS_BF16DP_NATIVE 0
#endif

#define OS_DP_PAIRS 16
#define OS_DP_STEP 32

static inline unsigned os_dp_enter(void) {
#if OS_DP_MXCSR
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u); /* FTZ (bit 15) and DAZ (bit 6) */
    return old;
#else
    return 0;
#endif
}

static inline void os_dp_leave(unsigned old) {
#if OS_DP_MXCSR
    _mm_setcsr(old);
#else
    (void)old;
#endif
}

/* what the hardware does by itself under DAZ / FTZ */
static inline float os_dp_flush(float v) {
#if OS_DP_MXCSR
    return v;
#else
    return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
#endif
}

/* os_hsum's 16-lane order, on an array (both kernels end here) */
static inline float os_dp_hsum(const float *a) {
    float t0 = os_dp_flush(os_dp_flush(a[0] + a[8]) + os_dp_flush(a[4] + a[12]));
    float t1 = os_dp_flush(os_dp_flush(a[1] + a[9]) + os_dp_flush(a[5] + a[13]));
    float t2 = os_dp_flush(os_dp_flush(a[2] + a[10]) + os_dp_flush(a[6] + a[14]));
    float t3 = os_dp_flush(os_dp_flush(a[3] + a[11]) + os_dp_flush(a[7] + a[15]));
    return os_dp_flush(os_dp_flush(t0 + t2) + os_dp_flush(t1 + t3));
}

static inline float os_dp_finish(const float *a, const float *bias, os_idx n) {
    float s = os_dp_hsum(a);
    return bias ? os_dp_flush(s + bias[n]) : s;
}

/* element k of a bf16 row of length K, zero past the end, denormals as zero */
static inline float os_dp_value(const uint16_t *row, os_idx K, os_idx k) {
    return k < K ? os_dp_flush(os_bf16_scalar(row[k])) : 0.0f;
}

/* The definition, one output at a time. x: (M, ldx) bf16 rows (first K used),
 * w: (N, K) bf16, y: (M, N); outputs m in [m0, m1), n in [n0, n1). */
static void os_gemm_bf16dp_portable(const uint16_t *x, os_idx ldx, const uint16_t *w, const float *bias,
                                    float *y, os_idx N, os_idx K, os_idx m0, os_idx m1, os_idx n0,
                                    os_idx n1) {
    unsigned csr = os_dp_enter();
    for (os_idx m = m0; m < m1; m++)
        for (os_idx n = n0; n < n1; n++) {
            const uint16_t *xr = x + m * ldx, *wr = w + n * K;
            float a[OS_DP_PAIRS];
            for (int l = 0; l < OS_DP_PAIRS; l++) a[l] = 0.0f;
            for (os_idx k0 = 0; k0 < K; k0 += OS_DP_STEP)
                for (int l = 0; l < OS_DP_PAIRS; l++) {
                    os_idx k = k0 + 2 * l;
                    a[l] = os_dp_flush(fmaf(os_dp_value(xr, K, k + 1), os_dp_value(wr, K, k + 1), a[l]));
                    a[l] = os_dp_flush(fmaf(os_dp_value(xr, K, k), os_dp_value(wr, K, k), a[l]));
                }
            y[m * N + n] = os_dp_finish(a, bias, n);
        }
    os_dp_leave(csr);
}

#if OS_BF16DP_NATIVE
/* 5 x rows by 4 w rows: 20 accumulators, 4 w vectors and an x vector in the 32
 * registers; one load per 2.2 instructions instead of 2 for 4 x 4, 7-19 % faster
 * at K = 3072-4320 on a Zen 4 core and the same at K = 896-1024 */
#define OS_DP_MR 5
#define OS_DP_NR 4

/* an rm x rn tile over all of K; x rows are padded to whole steps (zeros),
 * the last step of w is read with a mask (zeros past K). wn, if not NULL: the
 * next tile's OS_DP_NR w rows, fetched into L2 step by step meanwhile */
static inline __attribute__((always_inline)) void
os_dp_tile(const uint16_t *x, os_idx ldx, const uint16_t *w, const uint16_t *wn, os_idx K, const float *bias,
           float *y, os_idx N, os_idx n, const int rm, const int rn) {
    __m512 acc[OS_DP_MR][OS_DP_NR];
    for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++) acc[i][j] = _mm512_setzero_ps();
    os_idx kf = K - K % OS_DP_STEP;
    for (os_idx k = 0; k < kf; k += OS_DP_STEP) {
        __m512i wv[OS_DP_NR];
        for (int j = 0; j < rn; j++) wv[j] = _mm512_loadu_si512((const void *)(w + j * K + k));
        if (wn)
            for (int j = 0; j < OS_DP_NR; j++) _mm_prefetch((const char *)(wn + j * K + k), _MM_HINT_T1);
        for (int i = 0; i < rm; i++) {
            __m512i xv = _mm512_loadu_si512((const void *)(x + i * ldx + k));
            for (int j = 0; j < rn; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
        }
    }
    if (kf < K) {
        __mmask32 mask = (__mmask32)((1ull << (K - kf)) - 1);
        __m512i wv[OS_DP_NR];
        for (int j = 0; j < rn; j++) wv[j] = _mm512_maskz_loadu_epi16(mask, (const void *)(w + j * K + kf));
        for (int i = 0; i < rm; i++) {
            __m512i xv = _mm512_loadu_si512((const void *)(x + i * ldx + kf));
            for (int j = 0; j < rn; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
        }
    }
    /* os_dp_hsum's order (os_hsum's), sixteen accumulators at a time; MXCSR flushes as the instruction does */
    for (int u0 = 0; u0 < rm * rn; u0 += 16) {
        vf v[16];
        for (int u = 0; u < 16; u++) v[u] = u0 + u < rm * rn ? (vf)acc[(u0 + u) / rn][(u0 + u) % rn] : os_splat(0);
        vf r = os_hsum16(v);
        if (rn == OS_DP_NR) {
            /* lanes 4g..4g+3 are one row's four outputs: the bias added to all
             * sixteen at once and each row stored whole (the same adds as one by
             * one; scalar extracts and stores took 5-12 % of the products at K = 896) */
            if (bias) r += (vf)_mm512_broadcast_f32x4(_mm_loadu_ps(bias + n));
            float t[16] __attribute__((aligned(64)));
            memcpy(t, &r, sizeof t);
            for (int g = 0; g < 4 && u0 + 4 * g < rm * rn; g++) memcpy(y + ((u0 + 4 * g) / 4) * N + n, t + 4 * g, 16);
            continue;
        }
        for (int u = u0; u < rm * rn && u < u0 + 16; u++) {
            float s = r[u - u0];
            y[(u / rn) * N + n + u % rn] = bias ? s + bias[n + u % rn] : s;
        }
    }
}

#define OS_DP_TILE_FN(RM, RN)                                                                          \
    static void os_dp_tile_##RM##x##RN(const uint16_t *x, os_idx ldx, const uint16_t *w,             \
                                       const uint16_t *wn, os_idx K, const float *bias, float *y,     \
                                       os_idx N, os_idx n) {                                          \
        os_dp_tile(x, ldx, w, wn, K, bias, y, N, n, RM, RN);                                          \
    }
OS_DP_TILE_FN(1, 1) OS_DP_TILE_FN(1, 2) OS_DP_TILE_FN(1, 3) OS_DP_TILE_FN(1, 4)
OS_DP_TILE_FN(2, 1) OS_DP_TILE_FN(2, 2) OS_DP_TILE_FN(2, 3) OS_DP_TILE_FN(2, 4)
OS_DP_TILE_FN(3, 1) OS_DP_TILE_FN(3, 2) OS_DP_TILE_FN(3, 3) OS_DP_TILE_FN(3, 4)
OS_DP_TILE_FN(4, 1) OS_DP_TILE_FN(4, 2) OS_DP_TILE_FN(4, 3) OS_DP_TILE_FN(4, 4)
OS_DP_TILE_FN(5, 1) OS_DP_TILE_FN(5, 2) OS_DP_TILE_FN(5, 3) OS_DP_TILE_FN(5, 4)
typedef void (*os_dp_tile_fn)(const uint16_t *, os_idx, const uint16_t *, const uint16_t *, os_idx,
                              const float *, float *, os_idx, os_idx);
static os_dp_tile_fn const os_dp_tiles[OS_DP_MR][OS_DP_NR] = {
    {os_dp_tile_1x1, os_dp_tile_1x2, os_dp_tile_1x3, os_dp_tile_1x4},
    {os_dp_tile_2x1, os_dp_tile_2x2, os_dp_tile_2x3, os_dp_tile_2x4},
    {os_dp_tile_3x1, os_dp_tile_3x2, os_dp_tile_3x3, os_dp_tile_3x4},
    {os_dp_tile_4x1, os_dp_tile_4x2, os_dp_tile_4x3, os_dp_tile_4x4},
    {os_dp_tile_5x1, os_dp_tile_5x2, os_dp_tile_5x3, os_dp_tile_5x4},
};
#endif

/* The rows im2col_3x3s2 would form for output row i of one image x[H][W][C]
 * (Wo rows of 9 * C values, (kh, kw, c) order, zeros in the padding), as
 * bfloat16 bits in rows of ldx values, zeros from 9 * C on: the patches go
 * straight to the products' packed x, without the float32 copy (four times the
 * bytes). Returns 1 if some value is not a bfloat16 value (low half not zero). */
static int os_dp_pack_conv_row(const float *x, os_idx H, os_idx W, os_idx C, os_idx i, os_idx Wo,
                               uint16_t *xp, os_idx ldx) {
    uint32_t inexact = 0;
    for (os_idx j = 0; j < Wo; j++) {
        uint16_t *out = xp + j * ldx;
        for (os_idx a = 0; a < 3; a++) {
            os_idx r = 2 * i + a - 1;
            for (os_idx b = 0; b < 3; b++, out += C) {
                os_idx c = 2 * j + b - 1;
                if (r < 0 || r >= H || c < 0 || c >= W) {
                    memset(out, 0, (size_t)C * sizeof(uint16_t));
                    continue;
                }
                const float *src = x + (r * W + c) * C;
                for (os_idx k = 0; k < C; k++) {
                    uint32_t bits;
                    memcpy(&bits, src + k, sizeof bits);
                    inexact |= bits & 0xFFFFu;
                    out[k] = (uint16_t)(bits >> 16);
                }
            }
        }
        memset(xp + j * ldx + 9 * C, 0, (size_t)(ldx - 9 * C) * sizeof(uint16_t));
    }
    return inexact != 0;
}

/* The GEMM of this build: VDPBF16PS where compiled for it, else the
 * definition. x rows must hold ldx >= K values, zero from K up to a whole
 * step (the caller packs them so). */
static void os_gemm_bf16dp(const uint16_t *x, os_idx ldx, const uint16_t *w, const float *bias, float *y,
                           os_idx N, os_idx K, os_idx m0, os_idx m1, os_idx n0, os_idx n1) {
#if OS_BF16DP_NATIVE
    unsigned csr = os_dp_enter(); /* the final adds flush as the portable code's do */
    for (os_idx m = m0; m < m1; m += OS_DP_MR) {
        int rm = m1 - m < OS_DP_MR ? (int)(m1 - m) : OS_DP_MR;
        os_idx n = n0;
        for (; n + OS_DP_NR <= n1; n += OS_DP_NR) {
            /* the first x rows meet each w row first, from memory or L3 (the later ones
             * find it in L2): fetching the next tile's rows meanwhile made the K = 896
             * products of the encoder 7 % faster on a Zen 4 core, the same bits */
            const uint16_t *wn = m == m0 && n + 2 * OS_DP_NR <= n1 ? w + (n + OS_DP_NR) * K : NULL;
            os_dp_tiles[rm - 1][OS_DP_NR - 1](x + m * ldx, ldx, w + n * K, wn, K, bias, y + m * N, N, n);
        }
        if (n < n1)
            os_dp_tiles[rm - 1][n1 - n - 1](x + m * ldx, ldx, w + n * K, NULL, K, bias, y + m * N, N, n);
    }
    os_dp_leave(csr);
#else
    os_gemm_bf16dp_portable(x, ldx, w, bias, y, N, K, m0, m1, n0, n1);
#endif
}

#endif
