/* INT8 products: int8 weights with one float32 scale per output row, float32
 * activations quantized per row (per token) at run time, int32 accumulation,
 * float32 results.
 *
 * Every build gives the same bits, because every float32 step is written once
 * (scalar, in this order) and the integer dot products are exact:
 *
 * - quantize a row x of K values: amax = the largest |x_k|, taken as the
 *   largest of the bit patterns with the sign cleared (exact, in any order;
 *   a NaN is larger than every number). If amax is inf or NaN the row's scale
 *   is NaN and its codes 0 (its outputs are NaN). inv = 127 / amax in float32;
 *   if inv is not finite (amax is 0, or below about 3.7e-37 so that 127 / amax
 *   overflows) the scale is 0 and the codes 0 (its outputs are exactly the
 *   bias). Otherwise scale = amax / 127 and q_k = rint(x_k * inv), each step
 *   one float32 operation rounded to nearest even, the code clamped to
 *   [-127, 127] (|x_k * inv| <= 127 * (1 + 2^-23) rounds to at most 127, so the
 *   clamp never changes a code; it is part of the definition all the same);
 * - acc[m, n] = sum_k q[m, k] w[n, k] in int32: exact, whatever the order,
 *   for any int8 weights (-128 included) while K <= OS_I8_MAX_K
 *   (K * 127 * 128 < 2^31);
 * - y[m, n] = (float)acc * (sx[m] * sw[n]), then + bias[n]: the conversion
 *   rounds to nearest even, then two float32 products and one sum, each
 *   rounded; the product is kept out of the sum's reach (OS_NC) so that
 *   no build contracts the two into one fused multiply-add.
 *
 * The dot products, by build:
 * - generic: plain int32 multiply-adds;
 * - AVX2: per 32 weights, a = |w| (VPABSB: -128 gives 0x80, i.e. 128 read as
 *   unsigned) and b = x * sign(w) (VPSIGNB; x in [-127, 127] negates without
 *   overflow, and where w = 0 the product is 0 whatever b is), then VPMADDUBSW
 *   (unsigned a x signed b, adjacent pairs summed to int16) and VPMADDWD with
 *   ones (pairs summed to int32). |a b| <= 128 * 127 = 16256 and a pair is at
 *   most 32512 < 32767, so the int16 saturation of VPMADDUBSW never happens:
 *   the sums are exact. (Putting x on the unsigned side instead, offset by 128,
 *   can reach 2 * 255 * 128 and saturates.)
 * - AVX-512BW: the same on 64 weights, the sign applied by a masked subtract
 *   (AVX-512 has no VPSIGNB);
 * - AVX-512 VNNI: a and b as above into VPDPBUSD (four u8 x s8 products summed
 *   into int32 lanes, no intermediate saturation); with many activation rows,
 *   packed weight panels and unsigned codes x + 128 instead (os_i8_gemm_panels).
 * Tails shorter than a vector are summed in scalar code; integer sums are
 * exact, so nothing else depends on the build.
 */
#ifndef ONESPEECH_INT8_IMPL_H
#define ONESPEECH_INT8_IMPL_H

#include <float.h>

#include "_kernels_impl.h"

#if defined(__AVX2__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define OS_I8_PATH "avx512vnni"
#elif defined(__AVX512BW__)
#define OS_I8_PATH "avx512bw"
#elif defined(__AVX2__)
#define OS_I8_PATH "avx2"
#else
#define OS_I8_PATH "scalar"
#endif

/* largest K for which int32 accumulation cannot overflow: 131072 * 127 * 128 < 2^31 */
#define OS_I8_MAX_K 131072

/* q = the codes of one row x of K values, returns its scale (rule above) */
static float os_i8_quantize_row(const float *x, os_idx K, int8_t *q) {
    uint32_t amax_bits = 0;
    for (os_idx k = 0; k < K; k++) {
        uint32_t b;
        memcpy(&b, x + k, sizeof b);
        b &= 0x7fffffffu;
        amax_bits = b > amax_bits ? b : amax_bits;
    }
    if (amax_bits >= 0x7f800000u) { /* inf or NaN */
        memset(q, 0, (size_t)K);
        return NAN;
    }
    float amax;
    memcpy(&amax, &amax_bits, sizeof amax);
    float inv = 127.0f / amax;
    if (!(inv <= FLT_MAX)) { /* amax 0, or 127 / amax overflowed */
        memset(q, 0, (size_t)K);
        return 0.0f;
    }
    for (os_idx k = 0; k < K; k++) {
        float v = rintf(x[k] * inv);
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        q[k] = (int8_t)v;
    }
    return amax / 127.0f;
}

/* rows [m0, m1) of x (M, K) quantized: codes into q (M, K), scales into scale (M) */
void os_i8_quantize_rows(const float *x, os_idx K, os_idx m0, os_idx m1, int8_t *q, float *scale) {
    for (os_idx m = m0; m < m1; m++) scale[m] = os_i8_quantize_row(x + m * K, K, q + m * K);
}

#if defined(__AVX2__)
static inline __attribute__((always_inline)) __m256i os_i8_step256(__m256i acc, __m256i xv, __m256i wv) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
}
static inline int32_t os_i8_hsum256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}
#endif

#if defined(__AVX512BW__)
/* acc + the products of a = |w| (unsigned) and b = x * sign(w), four adjacent ones summed per int32 lane */
static inline __attribute__((always_inline)) __m512i os_i8_acc512(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(acc, a, b);
#else
    __m512i p = _mm512_maddubs_epi16(a, b);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
#endif
}
static inline __attribute__((always_inline)) __m512i os_i8_step512(__m512i acc, __m512i xv, __m512i wv) {
    __m512i b = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), _mm512_setzero_si512(), xv);
    return os_i8_acc512(acc, _mm512_abs_epi8(wv), b);
}
#endif

/* acc[r] = x . w_r for the R = 4 rows w_r (x loaded once per step), K values each;
 * with prefetch_ahead, each row's codes that many bytes ahead asked for into L2 */
static inline __attribute__((always_inline)) void os_i8_dot4(const int8_t *x, const int8_t *w0, const int8_t *w1,
                                                              const int8_t *w2, const int8_t *w3, os_idx K,
                                                              int32_t acc[4], os_idx prefetch_ahead) {
    os_idx k = 0;
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#if defined(__AVX512BW__)
    {
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        for (; k + 64 <= K; k += 64) {
            if (prefetch_ahead) {
                os_prefetch_l2(w0 + k, prefetch_ahead, 1);
                os_prefetch_l2(w1 + k, prefetch_ahead, 1);
                os_prefetch_l2(w2 + k, prefetch_ahead, 1);
                os_prefetch_l2(w3 + k, prefetch_ahead, 1);
            }
            __m512i xv = _mm512_loadu_si512((const void *)(x + k));
            a0 = os_i8_step512(a0, xv, _mm512_loadu_si512((const void *)(w0 + k)));
            a1 = os_i8_step512(a1, xv, _mm512_loadu_si512((const void *)(w1 + k)));
            a2 = os_i8_step512(a2, xv, _mm512_loadu_si512((const void *)(w2 + k)));
            a3 = os_i8_step512(a3, xv, _mm512_loadu_si512((const void *)(w3 + k)));
        }
        s0 = _mm512_reduce_add_epi32(a0);
        s1 = _mm512_reduce_add_epi32(a1);
        s2 = _mm512_reduce_add_epi32(a2);
        s3 = _mm512_reduce_add_epi32(a3);
    }
#endif
#if defined(__AVX2__)
    {
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (; k + 32 <= K; k += 32) {
            if (prefetch_ahead && k % 64 == 0) {
                os_prefetch_l2(w0 + k, prefetch_ahead, 1);
                os_prefetch_l2(w1 + k, prefetch_ahead, 1);
                os_prefetch_l2(w2 + k, prefetch_ahead, 1);
                os_prefetch_l2(w3 + k, prefetch_ahead, 1);
            }
            __m256i xv = _mm256_loadu_si256((const __m256i *)(x + k));
            a0 = os_i8_step256(a0, xv, _mm256_loadu_si256((const __m256i *)(w0 + k)));
            a1 = os_i8_step256(a1, xv, _mm256_loadu_si256((const __m256i *)(w1 + k)));
            a2 = os_i8_step256(a2, xv, _mm256_loadu_si256((const __m256i *)(w2 + k)));
            a3 = os_i8_step256(a3, xv, _mm256_loadu_si256((const __m256i *)(w3 + k)));
        }
        s0 += os_i8_hsum256(a0);
        s1 += os_i8_hsum256(a1);
        s2 += os_i8_hsum256(a2);
        s3 += os_i8_hsum256(a3);
    }
#endif
    for (; k < K; k++) {
        int32_t xk = x[k];
        s0 += xk * w0[k];
        s1 += xk * w1[k];
        s2 += xk * w2[k];
        s3 += xk * w3[k];
    }
    acc[0] = s0;
    acc[1] = s1;
    acc[2] = s2;
    acc[3] = s3;
}

static inline int32_t os_i8_dot1(const int8_t *x, const int8_t *w, os_idx K) {
    os_idx k = 0;
    int32_t s = 0;
#if defined(__AVX512BW__)
    {
        __m512i a = _mm512_setzero_si512();
        for (; k + 64 <= K; k += 64)
            a = os_i8_step512(a, _mm512_loadu_si512((const void *)(x + k)), _mm512_loadu_si512((const void *)(w + k)));
        s = _mm512_reduce_add_epi32(a);
    }
#endif
#if defined(__AVX2__)
    {
        __m256i a = _mm256_setzero_si256();
        for (; k + 32 <= K; k += 32)
            a = os_i8_step256(a, _mm256_loadu_si256((const __m256i *)(x + k)),
                              _mm256_loadu_si256((const __m256i *)(w + k)));
        s += os_i8_hsum256(a);
    }
#endif
    for (; k < K; k++) s += (int32_t)x[k] * w[k];
    return s;
}

/* acc[i][r] = x_i . w_r for two activation rows and four weight rows: each
 * weight vector is loaded and made unsigned (|w|, and its sign mask on
 * AVX-512) once for both rows */
static inline __attribute__((always_inline)) void os_i8_dot2x4(const int8_t *x0, const int8_t *x1,
                                                                const int8_t *const w[4], os_idx K, int32_t acc[2][4],
                                                                os_idx prefetch_ahead) {
    os_idx k = 0;
    int32_t s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#if defined(__AVX512BW__)
    {
        const __m512i zero = _mm512_setzero_si512();
        __m512i a00 = zero, a01 = zero, a02 = zero, a03 = zero, a10 = zero, a11 = zero, a12 = zero, a13 = zero;
#define OS_I8_STEP2_512(r, A0, A1)                                                       \
    do {                                                                                 \
        __m512i wv = _mm512_loadu_si512((const void *)(w[r] + k)), wa = _mm512_abs_epi8(wv); \
        __mmask64 neg = _mm512_movepi8_mask(wv);                                         \
        A0 = os_i8_acc512(A0, wa, _mm512_mask_sub_epi8(xv0, neg, zero, xv0));           \
        A1 = os_i8_acc512(A1, wa, _mm512_mask_sub_epi8(xv1, neg, zero, xv1));           \
    } while (0)
        for (; k + 64 <= K; k += 64) {
            if (prefetch_ahead)
                for (int r = 0; r < 4; r++) os_prefetch_l2(w[r] + k, prefetch_ahead, 1);
            __m512i xv0 = _mm512_loadu_si512((const void *)(x0 + k));
            __m512i xv1 = _mm512_loadu_si512((const void *)(x1 + k));
            OS_I8_STEP2_512(0, a00, a10);
            OS_I8_STEP2_512(1, a01, a11);
            OS_I8_STEP2_512(2, a02, a12);
            OS_I8_STEP2_512(3, a03, a13);
        }
#undef OS_I8_STEP2_512
        s[0][0] = _mm512_reduce_add_epi32(a00);
        s[0][1] = _mm512_reduce_add_epi32(a01);
        s[0][2] = _mm512_reduce_add_epi32(a02);
        s[0][3] = _mm512_reduce_add_epi32(a03);
        s[1][0] = _mm512_reduce_add_epi32(a10);
        s[1][1] = _mm512_reduce_add_epi32(a11);
        s[1][2] = _mm512_reduce_add_epi32(a12);
        s[1][3] = _mm512_reduce_add_epi32(a13);
    }
#endif
#if defined(__AVX2__)
    {
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i a00 = _mm256_setzero_si256(), a01 = a00, a02 = a00, a03 = a00;
        __m256i a10 = a00, a11 = a00, a12 = a00, a13 = a00;
#define OS_I8_STEP2(r, A0, A1)                                                                              \
    do {                                                                                                    \
        __m256i wv = _mm256_loadu_si256((const __m256i *)(w[r] + k)), wa = _mm256_abs_epi8(wv);           \
        A0 = _mm256_add_epi32(A0, _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv0, wv)), ones)); \
        A1 = _mm256_add_epi32(A1, _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv1, wv)), ones)); \
    } while (0)
        for (; k + 32 <= K; k += 32) {
            if (prefetch_ahead && k % 64 == 0)
                for (int r = 0; r < 4; r++) os_prefetch_l2(w[r] + k, prefetch_ahead, 1);
            __m256i xv0 = _mm256_loadu_si256((const __m256i *)(x0 + k));
            __m256i xv1 = _mm256_loadu_si256((const __m256i *)(x1 + k));
            OS_I8_STEP2(0, a00, a10);
            OS_I8_STEP2(1, a01, a11);
            OS_I8_STEP2(2, a02, a12);
            OS_I8_STEP2(3, a03, a13);
        }
#undef OS_I8_STEP2
        s[0][0] += os_i8_hsum256(a00);
        s[0][1] += os_i8_hsum256(a01);
        s[0][2] += os_i8_hsum256(a02);
        s[0][3] += os_i8_hsum256(a03);
        s[1][0] += os_i8_hsum256(a10);
        s[1][1] += os_i8_hsum256(a11);
        s[1][2] += os_i8_hsum256(a12);
        s[1][3] += os_i8_hsum256(a13);
    }
#endif
    for (; k < K; k++)
        for (int r = 0; r < 4; r++) {
            s[0][r] += (int32_t)x0[k] * w[r][k];
            s[1][r] += (int32_t)x1[k] * w[r][k];
        }
    memcpy(acc, s, sizeof s);
}

static inline float os_i8_dequant(int32_t acc, float sx, float sw, const float *bias, os_idx n) {
    float y = OS_NC((float)acc * (sx * sw));
    return bias ? y + bias[n] : y;
}

/* y[0, n] for n in [n0, n1), one activation row (decode): the range is read as
 * four far-apart streams, a row of each at a time (one load of the codes serves
 * four rows). The DRAM prefetcher works within 4 KiB pages; an int8 row of the
 * 0.6B decoder is 1 KiB, so four neighbouring rows would be one stream. */
void os_i8_gemv_rows(const int8_t *q, float sx, const int8_t *w, const float *sw, os_idx K, const float *bias,
                     float *y, os_idx n0, os_idx n1) {
    os_idx L = (n1 - n0) / 4;
    int32_t acc[4];
    for (os_idx i = 0; i < L; i++) {
        os_idx r[4] = {n0 + i, n0 + L + i, n0 + 2 * L + i, n0 + 3 * L + i};
        os_i8_dot4(q, w + r[0] * K, w + r[1] * K, w + r[2] * K, w + r[3] * K, K, acc, OS_PREFETCH_AHEAD);
        for (int j = 0; j < 4; j++) y[r[j]] = os_i8_dequant(acc[j], sx, sw[r[j]], bias, r[j]);
    }
    for (os_idx n = n0 + 4 * L; n < n1; n++) y[n] = os_i8_dequant(os_i8_dot1(q, w + n * K, K), sx, sw[n], bias, n);
}

/* y[m, n] for m in [m0, m1), n in [n0, n1): the codes q (M, K) with row scales sx
 * times w (N, K) int8 with row scales sw, plus bias (N) or NULL; y is (M, N).
 * Weight rows four at a time (a 4 KiB group at K = 1024 stays in L1 while the
 * activation rows pass), two activation rows at a time (each weight vector
 * made unsigned, and on AVX-512 its sign mask taken, once for both). */
void os_i8_gemm_rows(const int8_t *q, const float *sx, const int8_t *w, const float *sw, os_idx K,
                     const float *bias, float *y, os_idx N, os_idx m0, os_idx m1, os_idx n0, os_idx n1) {
    os_idx n = n0;
    int32_t acc[4];
    for (; n + 4 <= n1; n += 4) {
        const int8_t *const wr[4] = {w + n * K, w + (n + 1) * K, w + (n + 2) * K, w + (n + 3) * K};
        os_idx m = m0;
        int32_t acc2[2][4];
        for (; m + 2 <= m1; m += 2) {
            os_i8_dot2x4(q + m * K, q + (m + 1) * K, wr, K, acc2, 0);
            for (int i = 0; i < 2; i++)
                for (int r = 0; r < 4; r++)
                    y[(m + i) * N + n + r] = os_i8_dequant(acc2[i][r], sx[m + i], sw[n + r], bias, n + r);
        }
        for (; m < m1; m++) {
            os_i8_dot4(q + m * K, wr[0], wr[1], wr[2], wr[3], K, acc, 0);
            for (int r = 0; r < 4; r++) y[m * N + n + r] = os_i8_dequant(acc[r], sx[m], sw[n + r], bias, n + r);
        }
    }
    for (; n < n1; n++)
        for (os_idx m = m0; m < m1; m++)
            y[m * N + n] = os_i8_dequant(os_i8_dot1(q + m * K, w + n * K, K), sx[m], sw[n], bias, n);
}

/* y[b * ldy + n] for b < B and n in [n0, n1): a few activation rows (sequences
 * decoded together), the outputs os_i8_gemm_rows gives. Weight rows as the
 * decode GEMV reads them, four far-apart streams a row at a time, each group
 * summed for every activation pair while it is in cache; the codes 4 KiB ahead
 * are asked for into L2 a line per step, as in the float32 tiles. */
void os_i8_bgemv_rows(const int8_t *q, const float *sx, os_idx B, const int8_t *w, const float *sw, os_idx K,
                      const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1) {
    const os_idx L = (n1 - n0) / 4;
    int32_t acc[4], acc2[2][4];
    for (os_idx i = 0; i < L; i++) {
        const os_idx r[4] = {n0 + i, n0 + L + i, n0 + 2 * L + i, n0 + 3 * L + i};
        const int8_t *const wr[4] = {w + r[0] * K, w + r[1] * K, w + r[2] * K, w + r[3] * K};
        os_idx b = 0;
        for (; b + 2 <= B; b += 2) {
            os_i8_dot2x4(q + b * K, q + (b + 1) * K, wr, K, acc2, OS_PREFETCH_AHEAD);
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 4; j++)
                    y[(b + h) * ldy + r[j]] = os_i8_dequant(acc2[h][j], sx[b + h], sw[r[j]], bias, r[j]);
        }
        if (b < B) {
            os_i8_dot4(q + b * K, wr[0], wr[1], wr[2], wr[3], K, acc, OS_PREFETCH_AHEAD);
            for (int j = 0; j < 4; j++) y[b * ldy + r[j]] = os_i8_dequant(acc[j], sx[b], sw[r[j]], bias, r[j]);
        }
    }
    for (os_idx n = n0 + 4 * L; n < n1; n++)
        for (os_idx b = 0; b < B; b++)
            y[b * ldy + n] = os_i8_dequant(os_i8_dot1(q + b * K, w + n * K, K), sx[b], sw[n], bias, n);
}

/* ---- many activation rows on AVX-512 VNNI: packed weight panels --------------
 * The row kernels above sum each output along k in vector lanes and reduce it
 * at the end, so every activation row costs a load and a reduction per weight
 * row. With many activation rows a broadcast is cheaper: one VPDPBUSD
 * multiplies a group of four codes x + 128 (unsigned, 1..255) of one row with
 * four k of 16 weight rows (signed, as stored), adding to 16 outputs, and
 *   sum_k x_k w_k = sum_k (x_k + 128) w_k - 128 sum_k w_k
 * with the column sums taken while the panel is packed. Both sums are taken
 * modulo 2^32 (VPDPBUSD wraps, the correction is unsigned arithmetic); the true
 * sum fits int32 (K <= OS_I8_MAX_K), so the difference is that sum, exactly:
 * the same acc, hence the same bits, as the row kernels.
 *
 * A panel holds OS_I8_NR weight rows for every k: group g of four k (the last
 * one padded with zero weights) is OS_I8_NR x 4 bytes, row-major in the rows.
 * Activation codes are offset once per call (os_i8_offset_rows), Kp = K rounded
 * up to 4 bytes per row, the padding 0x80 (code 0). */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define OS_I8_PANEL 1
#else
#define OS_I8_PANEL 0
#endif
/* weight rows per panel (three vectors of 16) and activation rows per tile:
 * 24 accumulators, 3 panel vectors and a broadcast fit the 32 registers */
#define OS_I8_NR 48
#define OS_I8_MR 8

static inline os_idx os_i8_kp(os_idx K) { return (K + 3) / 4 * 4; }

/* rows [m0, m1) of the codes q (M, K) as x + 128 into xu (M, Kp), padding 0x80 */
void os_i8_offset_rows(const int8_t *q, os_idx K, os_idx m0, os_idx m1, uint8_t *xu) {
    const os_idx Kp = os_i8_kp(K);
    for (os_idx m = m0; m < m1; m++) {
        for (os_idx k = 0; k < K; k++) xu[m * Kp + k] = (uint8_t)(q[m * K + k] ^ 0x80);
        for (os_idx k = K; k < Kp; k++) xu[m * Kp + k] = 0x80;
    }
}

/* bytes of one packed panel at K */
static inline os_idx os_i8_panel_bytes(os_idx K) { return os_i8_kp(K) * OS_I8_NR; }

#if OS_I8_PANEL
/* weight rows [n0, n0 + nc) of w (N, K), nc <= OS_I8_NR, packed into panel (rows
 * past nc and k past K are zero); colsum[c] = sum_k w[n0 + c, k] */
static void os_i8_pack_panel(const int8_t *w, os_idx K, os_idx n0, os_idx nc, int8_t *panel, int32_t *colsum) {
    const os_idx G = os_i8_kp(K) / 4;
    memset(panel, 0, (size_t)(G * OS_I8_NR * 4));
    for (os_idx c = 0; c < OS_I8_NR; c++) colsum[c] = 0;
    for (os_idx c = 0; c < nc; c++) {
        const int8_t *row = w + (n0 + c) * K;
        int32_t s = 0;
        for (os_idx k = 0; k < K; k++) s += row[k];
        colsum[c] = s;
        os_idx g = 0;
        for (; 4 * g + 4 <= K; g++) memcpy(panel + (g * OS_I8_NR + c) * 4, row + 4 * g, 4);
        for (os_idx k = 4 * g; k < K; k++) panel[(g * OS_I8_NR + c) * 4 + k - 4 * g] = row[k];
    }
}

/* acc[i][c] += sum over the panel's k of xu[row i] * panel[c], for OS_I8_MR
 * activation rows rows[i] (each Kp bytes) and the panel's OS_I8_NR weight rows */
static inline __attribute__((always_inline)) void os_i8_panel_tile(const uint8_t *const *rows, os_idx G,
                                                                   const int8_t *panel,
                                                                   int32_t acc[OS_I8_MR][OS_I8_NR]) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    __m512i c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    __m512i c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
    __m512i c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
    const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
    const uint8_t *r4 = rows[4], *r5 = rows[5], *r6 = rows[6], *r7 = rows[7];
#define OS_I8_ROW(r, C0, C1, C2)                                 \
    do {                                                         \
        int32_t x4_;                                             \
        memcpy(&x4_, (r) + 4 * g, sizeof x4_);                   \
        __m512i a_ = _mm512_set1_epi32(x4_);                     \
        C0 = _mm512_dpbusd_epi32(C0, a_, b0);                    \
        C1 = _mm512_dpbusd_epi32(C1, a_, b1);                    \
        C2 = _mm512_dpbusd_epi32(C2, a_, b2);                    \
    } while (0)
    for (os_idx g = 0; g < G; g++) {
        const int8_t *p = panel + g * OS_I8_NR * 4;
        __m512i b0 = _mm512_loadu_si512((const void *)p);
        __m512i b1 = _mm512_loadu_si512((const void *)(p + 64));
        __m512i b2 = _mm512_loadu_si512((const void *)(p + 128));
        OS_I8_ROW(r0, c00, c01, c02);
        OS_I8_ROW(r1, c10, c11, c12);
        OS_I8_ROW(r2, c20, c21, c22);
        OS_I8_ROW(r3, c30, c31, c32);
        OS_I8_ROW(r4, c40, c41, c42);
        OS_I8_ROW(r5, c50, c51, c52);
        OS_I8_ROW(r6, c60, c61, c62);
        OS_I8_ROW(r7, c70, c71, c72);
    }
#undef OS_I8_ROW
#define OS_I8_STORE(i, C0, C1, C2)                                   \
    do {                                                             \
        _mm512_storeu_si512((void *)(acc[i]), C0);                   \
        _mm512_storeu_si512((void *)(acc[i] + 16), C1);              \
        _mm512_storeu_si512((void *)(acc[i] + 32), C2);              \
    } while (0)
    OS_I8_STORE(0, c00, c01, c02);
    OS_I8_STORE(1, c10, c11, c12);
    OS_I8_STORE(2, c20, c21, c22);
    OS_I8_STORE(3, c30, c31, c32);
    OS_I8_STORE(4, c40, c41, c42);
    OS_I8_STORE(5, c50, c51, c52);
    OS_I8_STORE(6, c60, c61, c62);
    OS_I8_STORE(7, c70, c71, c72);
#undef OS_I8_STORE
}

/* os_i8_dequant of a whole tile, 16 outputs per vector: the same operations in
 * the same order (the product kept from fusing with the bias add) */
static inline void os_i8_panel_dequant(int32_t acc[OS_I8_MR][OS_I8_NR], os_idx mr, const int32_t *colsum,
                                       const float *sx, const float *sw, const float *bias, float *y, os_idx ldy) {
    for (int j = 0; j < OS_I8_NR / 16; j++) {
        const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(colsum + 16 * j)), 7);
        const __m512 swv = _mm512_loadu_ps(sw + 16 * j);
        for (os_idx i = 0; i < mr; i++) {
            __m512i a = _mm512_sub_epi32(_mm512_loadu_si512((const void *)(acc[i] + 16 * j)), corr);
            __m512 p = OS_NC(_mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(_mm512_set1_ps(sx[i]), swv)));
            if (bias) p = _mm512_add_ps(p, _mm512_loadu_ps(bias + 16 * j));
            _mm512_storeu_ps(y + i * ldy + 16 * j, p);
        }
    }
}
#endif

/* y[m, n] for every m < M and n in the panels [p0, p1) (panel p: weight rows
 * [p * OS_I8_NR, ...) of N), as os_i8_gemm_rows gives them; xu from
 * os_i8_offset_rows, panel scratch of os_i8_panel_bytes(K). Builds without
 * VNNI never call it (OS_I8_PANEL is 0 there). */
void os_i8_gemm_panels(const uint8_t *xu, const float *sx, os_idx M, const int8_t *w, const float *sw,
                       os_idx K, const float *bias, float *y, os_idx N, os_idx p0, os_idx p1, int8_t *panel) {
#if OS_I8_PANEL
    const os_idx Kp = os_i8_kp(K), G = Kp / 4;
    int32_t colsum[OS_I8_NR];
    int32_t acc[OS_I8_MR][OS_I8_NR] __attribute__((aligned(64)));
    for (os_idx p = p0; p < p1; p++) {
        const os_idx n0 = p * OS_I8_NR, nc = N - n0 < OS_I8_NR ? N - n0 : OS_I8_NR;
        os_i8_pack_panel(w, K, n0, nc, panel, colsum);
        for (os_idx m = 0; m < M; m += OS_I8_MR) {
            const os_idx mr = M - m < OS_I8_MR ? M - m : OS_I8_MR;
            const uint8_t *rows[OS_I8_MR];
            for (os_idx i = 0; i < OS_I8_MR; i++) rows[i] = xu + (m + (i < mr ? i : 0)) * Kp;
            os_i8_panel_tile(rows, G, panel, acc);
            if (nc == OS_I8_NR) {
                os_i8_panel_dequant(acc, mr, colsum, sx + m, sw + n0, bias ? bias + n0 : NULL, y + m * N + n0, N);
                continue;
            }
            for (os_idx i = 0; i < mr; i++)
                for (os_idx c = 0; c < nc; c++) {
                    int32_t a = (int32_t)((uint32_t)acc[i][c] - 128u * (uint32_t)colsum[c]);
                    y[(m + i) * N + n0 + c] = os_i8_dequant(a, sx[m + i], sw[n0 + c], bias, n0 + c);
                }
        }
    }
#else
    (void)xu, (void)sx, (void)M, (void)w, (void)sw, (void)K, (void)bias, (void)y, (void)N, (void)p0, (void)p1,
        (void)panel;
#endif
}

#endif /* ONESPEECH_INT8_IMPL_H */
