/* Hot loops of the OneSpeech runtime, compiled once per instruction set.
 *
 * The same source is built as _kernels_generic (no ISA flags: one float per
 * "vector", the scalar reference), _kernels_avx2 (-mavx2 -mfma: 8 lanes) and
 * _kernels_avx512 (-mavx512f -mavx512bw: 16 lanes); OS_LANES follows from the
 * compiler's predefined macros. GCC/Clang vector extensions give explicit SIMD
 * whose summation order is fixed by this code, so no -ffast-math is needed and
 * results differ between variants only by float32 rounding.
 *
 * Every function works on a range of rows so the Cython callers can split the
 * work over OpenMP threads; none allocates or touches Python objects.
 */
#ifndef ONESPEECH_KERNELS_IMPL_H
#define ONESPEECH_KERNELS_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stddef.h>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define OS_LANES 16
#define OS_VARIANT "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define OS_LANES 8
#define OS_VARIANT "avx2"
#else
#define OS_LANES 1
#define OS_VARIANT "generic"
#endif

#ifdef _OPENMP
#define OS_OPENMP 1
#else
#define OS_OPENMP 0
#endif

typedef ptrdiff_t os_idx;

#if OS_LANES == 1
typedef float vf;
typedef uint32_t vu;
typedef uint16_t vh;
#define OS_U16_TO_U32(h) ((uint32_t)(h))
static inline float os_hsum(vf v) { return v; }
static inline vf os_splat(float a) { return a; }
#else
typedef float vf __attribute__((vector_size(4 * OS_LANES)));
typedef uint32_t vu __attribute__((vector_size(4 * OS_LANES)));
typedef uint16_t vh __attribute__((vector_size(2 * OS_LANES)));
#define OS_U16_TO_U32(h) __builtin_convertvector((h), vu)
/* pairwise halving (lane i += lane i + half, repeatedly): a fixed order, the
 * same on every call, spelled out so that -O2 builds need no loop */
static inline float os_hsum(vf v) {
#if OS_LANES == 16
    float t0 = (v[0] + v[8]) + (v[4] + v[12]), t1 = (v[1] + v[9]) + (v[5] + v[13]);
    float t2 = (v[2] + v[10]) + (v[6] + v[14]), t3 = (v[3] + v[11]) + (v[7] + v[15]);
    return (t0 + t2) + (t1 + t3);
#elif OS_LANES == 8
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
#else
    float t[OS_LANES];
    memcpy(t, &v, sizeof t);
    for (int w = OS_LANES / 2; w > 0; w /= 2)
        for (int i = 0; i < w; i++) t[i] += t[i + w];
    return t[0];
#endif
}
static inline vf os_splat(float a) { return (vf){0} + a; }
#endif

static inline float os_bf16_scalar(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline vf os_load_f32(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void os_store_f32(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* bfloat16 bits -> float32: the bits become the high half (exact) */
static inline vf os_load_bf16(const uint16_t *p) {
    vh h;
    memcpy(&h, p, sizeof h);
    vu u = OS_U16_TO_U32(h) << 16;
    vf f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t os_f32_to_bf16_scalar(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (f != f) return 0x7FC0; /* NaN, as c10::BFloat16 */
    return (uint16_t)((u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16);
}

/* ---- element-wise conversions ------------------------------------------ */

static void os_bf16_to_f32(const uint16_t *in, float *out, os_idx n) {
    os_idx i = 0;
    for (; i + OS_LANES <= n; i += OS_LANES) os_store_f32(out + i, os_load_bf16(in + i));
    for (; i < n; i++) out[i] = os_bf16_scalar(in[i]);
}

static void os_f32_to_bf16(const float *in, uint16_t *out, os_idx n) {
    for (os_idx i = 0; i < n; i++) out[i] = os_f32_to_bf16_scalar(in[i]);
}

static void os_round_bf16(const float *in, float *out, os_idx n) {
    for (os_idx i = 0; i < n; i++) out[i] = os_bf16_scalar(os_f32_to_bf16_scalar(in[i]));
}

/* ---- dot products: one weight row against 1 or 4 activation rows --------- */

#define OS_DEFINE_DOT(NAME, WT, LOADW, SCALARW)                                 \
    /* sum_k x[k] * w[k], four independent accumulators to hide FMA latency */ \
    static inline float NAME##_1(const float *x, const WT *w, os_idx K) {       \
        vf a0 = os_splat(0), a1 = a0, a2 = a0, a3 = a0;                         \
        os_idx k = 0;                                                           \
        for (; k + 4 * OS_LANES <= K; k += 4 * OS_LANES) {                      \
            a0 += os_load_f32(x + k) * LOADW(w + k);                            \
            a1 += os_load_f32(x + k + OS_LANES) * LOADW(w + k + OS_LANES);      \
            a2 += os_load_f32(x + k + 2 * OS_LANES) * LOADW(w + k + 2 * OS_LANES); \
            a3 += os_load_f32(x + k + 3 * OS_LANES) * LOADW(w + k + 3 * OS_LANES); \
        }                                                                       \
        for (; k + OS_LANES <= K; k += OS_LANES)                                \
            a0 += os_load_f32(x + k) * LOADW(w + k);                            \
        float s = os_hsum((a0 + a1) + (a2 + a3));                               \
        for (; k < K; k++) s += x[k] * SCALARW(w[k]);                           \
        return s;                                                               \
    }                                                                           \
    /* four activation rows share each weight load (small-batch GEMM) */       \
    static inline void NAME##_4(const float *x0, const float *x1, const float *x2, \
                                const float *x3, const WT *w, os_idx K, float *s) { \
        vf a0 = os_splat(0), a1 = a0, a2 = a0, a3 = a0;                         \
        os_idx k = 0;                                                           \
        for (; k + OS_LANES <= K; k += OS_LANES) {                              \
            vf wv = LOADW(w + k);                                               \
            a0 += os_load_f32(x0 + k) * wv;                                     \
            a1 += os_load_f32(x1 + k) * wv;                                     \
            a2 += os_load_f32(x2 + k) * wv;                                     \
            a3 += os_load_f32(x3 + k) * wv;                                     \
        }                                                                       \
        s[0] = os_hsum(a0); s[1] = os_hsum(a1); s[2] = os_hsum(a2); s[3] = os_hsum(a3); \
        for (; k < K; k++) {                                                    \
            float wk = SCALARW(w[k]);                                           \
            s[0] += x0[k] * wk; s[1] += x1[k] * wk; s[2] += x2[k] * wk; s[3] += x3[k] * wk; \
        }                                                                       \
    }                                                                           \
    /* four consecutive weight rows against one activation row: four DRAM    \
     * streams in flight and one x load per four FMAs (decode GEMV) */         \
    static inline void NAME##_r4(const float *x, const WT *w, os_idx K, float *s) { \
        vf a0 = os_splat(0), a1 = a0, a2 = a0, a3 = a0;                         \
        os_idx k = 0;                                                           \
        for (; k + OS_LANES <= K; k += OS_LANES) {                              \
            vf xv = os_load_f32(x + k);                                         \
            a0 += xv * LOADW(w + k);                                            \
            a1 += xv * LOADW(w + K + k);                                        \
            a2 += xv * LOADW(w + 2 * K + k);                                    \
            a3 += xv * LOADW(w + 3 * K + k);                                    \
        }                                                                       \
        s[0] = os_hsum(a0); s[1] = os_hsum(a1); s[2] = os_hsum(a2); s[3] = os_hsum(a3); \
        for (; k < K; k++) {                                                    \
            s[0] += x[k] * SCALARW(w[k]); s[1] += x[k] * SCALARW(w[K + k]);     \
            s[2] += x[k] * SCALARW(w[2 * K + k]); s[3] += x[k] * SCALARW(w[3 * K + k]); \
        }                                                                       \
    }                                                                           \
    /* y[m, n] = x[m, :] . w[n, :] (+ bias[n]) for rows n in [n0, n1); n0 must \
     * be a multiple of 4 so row grouping never depends on the thread split */ \
    static void NAME##_rows(const float *x, os_idx M, const WT *W, os_idx K,   \
                            const float *bias, float *y, os_idx N, os_idx n0,  \
                            os_idx n1) {                                        \
        os_idx n = n0;                                                          \
        if (M == 1) {                                                           \
            for (; n + 4 <= n1; n += 4) {                                       \
                float s[4];                                                     \
                NAME##_r4(x, W + n * K, K, s);                                  \
                for (int j = 0; j < 4; j++) y[n + j] = s[j] + (bias ? bias[n + j] : 0.0f); \
            }                                                                   \
        }                                                                       \
        for (; n < n1; n++) {                                                   \
            const WT *w = W + n * K;                                            \
            float b = bias ? bias[n] : 0.0f;                                    \
            os_idx m = 0;                                                       \
            if (M == 1) {                                                       \
                y[n] = NAME##_1(x, w, K) + b;                                   \
                continue;                                                       \
            }                                                                   \
            for (; m + 4 <= M; m += 4) {                                        \
                float s[4];                                                     \
                NAME##_4(x + m * K, x + (m + 1) * K, x + (m + 2) * K,           \
                         x + (m + 3) * K, w, K, s);                             \
                for (int j = 0; j < 4; j++) y[(m + j) * N + n] = s[j] + b;      \
            }                                                                   \
            for (; m < M; m++) y[m * N + n] = NAME##_1(x + m * K, w, K) + b;    \
        }                                                                       \
    }

#define OS_ID(v) (v)
OS_DEFINE_DOT(os_dot_bf16, uint16_t, os_load_bf16, os_bf16_scalar)
OS_DEFINE_DOT(os_dot_f32, float, os_load_f32, OS_ID)

/* ---- bf16 decode GEMV on pairs ---------------------------------------------
 * Two bf16 weights share one 32-bit word: on a little-endian machine
 * (word << 16) is the even element as float32 and (word & 0xFFFF0000) the odd
 * one, two cheap lane-local operations instead of a widening shuffle. The
 * activation row is permuted once per call to match: per block of 2*LANES
 * values, the even ones then the odd ones (os_pair_permute). */

static inline vf os_bits_to_f32(vu u) {
    vf f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#define OS_PAIR (2 * OS_LANES)

static void os_pair_permute(const float *x, float *xp, os_idx K) {
    os_idx k = 0;
    for (; k + OS_PAIR <= K; k += OS_PAIR)
        for (os_idx j = 0; j < OS_LANES; j++) {
            xp[k + j] = x[k + 2 * j];
            xp[k + OS_LANES + j] = x[k + 2 * j + 1];
        }
    for (; k < K; k++) xp[k] = x[k];
}

/* y[n] = x . w[n] (+ bias[n]) for n in [n0, n1); x is given both as is (for
 * the tail) and pair-permuted (xp). One row at a time: consecutive rows are
 * contiguous, so each thread reads one long sequential stream (measured: four
 * interleaved 2 KiB row streams read DRAM slower). */
static void os_gemv_bf16_rows(const float *x, const float *xp, const uint16_t *W, os_idx K,
                              const float *bias, float *y, os_idx n0, os_idx n1) {
    const vu hi = (vu){0} + 0xFFFF0000u;
    os_idx kk = K - K % (2 * OS_PAIR);
    for (os_idx n = n0; n < n1; n++) {
        const uint16_t *w = W + n * K;
        vf e0 = os_splat(0), o0 = e0, e1 = e0, o1 = e0;
        os_idx k = 0;
        for (; k < kk; k += 2 * OS_PAIR) {
            vu u0, u1;
            memcpy(&u0, w + k, sizeof u0);
            memcpy(&u1, w + k + OS_PAIR, sizeof u1);
            e0 += os_load_f32(xp + k) * os_bits_to_f32(u0 << 16);
            o0 += os_load_f32(xp + k + OS_LANES) * os_bits_to_f32(u0 & hi);
            e1 += os_load_f32(xp + k + OS_PAIR) * os_bits_to_f32(u1 << 16);
            o1 += os_load_f32(xp + k + OS_PAIR + OS_LANES) * os_bits_to_f32(u1 & hi);
        }
        for (; k + OS_PAIR <= K; k += OS_PAIR) {
            vu u0;
            memcpy(&u0, w + k, sizeof u0);
            e0 += os_load_f32(xp + k) * os_bits_to_f32(u0 << 16);
            o0 += os_load_f32(xp + k + OS_LANES) * os_bits_to_f32(u0 & hi);
        }
        float s = os_hsum((e0 + o0) + (e1 + o1));
        for (; k < K; k++) s += x[k] * os_bf16_scalar(w[k]);
        y[n] = s + (bias ? bias[n] : 0.0f);
    }
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define OS_PAIR_GEMV 1
#else
#define OS_PAIR_GEMV 0
#endif

/* sum of n floats, four accumulators: a memory-read probe for benchmarks */
static float os_stream_sum(const float *a, os_idx n) {
    vf a0 = os_splat(0), a1 = a0, a2 = a0, a3 = a0;
    os_idx i = 0;
    for (; i + 4 * OS_LANES <= n; i += 4 * OS_LANES) {
        a0 += os_load_f32(a + i);
        a1 += os_load_f32(a + i + OS_LANES);
        a2 += os_load_f32(a + i + 2 * OS_LANES);
        a3 += os_load_f32(a + i + 3 * OS_LANES);
    }
    float s = os_hsum((a0 + a1) + (a2 + a3));
    for (; i < n; i++) s += a[i];
    return s;
}

/* ---- normalisation and activations -------------------------------------- */

/* y = w * (x * (1 / sqrt(mean(x^2) + eps))) for one row of D values */
static void os_rms_norm_row(const float *x, const float *w, float eps, float *y, os_idx D) {
    vf a = os_splat(0);
    os_idx i = 0;
    for (; i + OS_LANES <= D; i += OS_LANES) {
        vf v = os_load_f32(x + i);
        a += v * v;
    }
    float ss = os_hsum(a);
    for (; i < D; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    vf iv = os_splat(inv);
    for (i = 0; i + OS_LANES <= D; i += OS_LANES)
        os_store_f32(y + i, os_load_f32(w + i) * (os_load_f32(x + i) * iv));
    for (; i < D; i++) y[i] = w[i] * (x[i] * inv);
}

/* rotate_half RoPE for the n_heads heads of one token */
static void os_rope_token(const float *x, const float *c, const float *s, float *y,
                          os_idx n_heads, os_idx hd) {
    os_idx half = hd / 2;
    for (os_idx h = 0; h < n_heads; h++) {
        const float *xh = x + h * hd;
        float *yh = y + h * hd;
        for (os_idx i = 0; i < half; i++) {
            yh[i] = xh[i] * c[i] - xh[i + half] * s[i];
            yh[i + half] = xh[i + half] * c[i + half] + xh[i] * s[i + half];
        }
    }
}

/* exp for a vector: libm's expf in the scalar generic build; in SIMD builds
 * Cephes' expf (range reduction by ln 2, degree-6 polynomial, 2^n through the
 * exponent bits), within 2 ulp over the clamped range [-87.3, 88.7] */
#if OS_LANES == 1
static inline vf os_exp(vf x) { return expf(x); }
#else
typedef int32_t vi __attribute__((vector_size(4 * OS_LANES)));
static inline vf os_select(vi mask, vf a, vf b) { /* mask ? a : b, lane-wise */
    return (vf)(((vi)a & mask) | ((vi)b & ~mask));
}
static inline vf os_exp(vf x) {
    x = os_select(x > os_splat(88.72283f), os_splat(88.72283f), x);
    x = os_select(x < os_splat(-87.33654f), os_splat(-87.33654f), x);
    vf fx = x * 1.44269504088896341f + 0.5f;
    vi n = __builtin_convertvector(fx, vi); /* truncation; fix up to floor */
    vf nf = __builtin_convertvector(n, vf);
    vi over = nf > fx;
    n += over;                               /* mask is -1 where trunc > floor */
    nf = __builtin_convertvector(n, vf);
    vf r = x - nf * 0.693359375f - nf * -2.12194440e-4f;
    vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    vi e = (n + 127) << 23;
    return p * (vf)e;
}
#endif

static inline vf os_silu_v(vf g) { return g / (1.0f + os_exp(-g)); }

static void os_swiglu(const float *g, const float *u, float *y, os_idx n) {
    os_idx i = 0;
    for (; i + OS_LANES <= n; i += OS_LANES)
        os_store_f32(y + i, os_silu_v(os_load_f32(g + i)) * os_load_f32(u + i));
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void os_silu(const float *x, float *y, os_idx n) {
    os_idx i = 0;
    for (; i + OS_LANES <= n; i += OS_LANES) os_store_f32(y + i, os_silu_v(os_load_f32(x + i)));
    for (; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

/* erf GELU with ATen's vectorised erf (Abramowitz & Stegun 7.1.26):
 * x * 0.5 * (1 + sign(z) * (1 - t * r(t) * exp(-z^2))), z = x / sqrt(2) */
static inline float os_gelu_1(float x) {
    float z = x * 0.70710678118654752440f;
    float a = fabsf(z);
    float t = 1.0f / (0.3275911f * a + 1.0f);
    float r = (((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f;
    float e = 1.0f + (-expf(-(z * z)) * t) * r;
    return x * 0.5f * (1.0f + copysignf(e, z));
}

static void os_gelu(const float *x, float *y, os_idx n) {
    os_idx i = 0;
#if OS_LANES > 1
    const vi sign = (vi){0} + (int32_t)0x80000000;
    for (; i + OS_LANES <= n; i += OS_LANES) {
        vf xv = os_load_f32(x + i);
        vf z = xv * 0.70710678118654752440f;
        vf a = (vf)((vi)z & ~sign);
        vf t = 1.0f / (0.3275911f * a + 1.0f);
        vf r = (((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f;
        vf e = 1.0f + (-os_exp(-(z * z)) * t) * r;
        e = (vf)((vi)e | ((vi)z & sign)); /* e >= 0, so OR-ing the sign is copysign */
        os_store_f32(y + i, xv * 0.5f * (1.0f + e));
    }
#endif
    for (; i < n; i++) y[i] = os_gelu_1(x[i]);
}

/* s[j] *= scale over n values; returns their maximum (NaN never wins a
 * comparison, in the lanes as in the scalar loop, so the result is the same) */
static inline float os_scale_max(float *s, os_idx n, float scale) {
    float mx = -INFINITY;
    os_idx j = 0;
#if OS_LANES > 1
    vf m = os_splat(-INFINITY), sc = os_splat(scale);
    for (; j + OS_LANES <= n; j += OS_LANES) {
        vf v = os_load_f32(s + j) * sc;
        os_store_f32(s + j, v);
        m = os_select(v > m, v, m);
    }
    for (int l = 0; l < OS_LANES; l++)
        if (m[l] > mx) mx = m[l];
#endif
    for (; j < n; j++) {
        s[j] *= scale;
        if (s[j] > mx) mx = s[j];
    }
    return mx;
}

/* s[j] = exp(s[j] - mx) over n values; returns their sum */
static inline float os_exp_sum(float *s, os_idx n, float mx) {
    float sum = 0.0f;
    os_idx j = 0;
    for (; j + OS_LANES <= n; j += OS_LANES) {
        vf e = os_exp(os_load_f32(s + j) - mx);
        os_store_f32(s + j, e);
        sum += os_hsum(e);
    }
    for (; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    return sum;
}

/* s[j] /= sum: a division, as the reference does (not a reciprocal multiply) */
static inline void os_divide(float *s, os_idx n, float sum) {
    os_idx j = 0;
#if OS_LANES > 1
    vf d = os_splat(sum);
    for (; j + OS_LANES <= n; j += OS_LANES) os_store_f32(s + j, os_load_f32(s + j) / d);
#endif
    for (; j < n; j++) s[j] = s[j] / sum;
}

/* one row of attention scores in place: p = softmax(s * scale) over the first
 * n_vis keys, 0 for the masked keys after them (prefill: BLAS computes s) */
static void os_scaled_softmax_row(float *s, os_idx n_vis, os_idx n, float scale) {
    float mx = os_scale_max(s, n_vis, scale);
    os_divide(s, n_vis, os_exp_sum(s, n_vis, mx));
    for (os_idx j = n_vis; j < n; j++) s[j] = 0.0f;
}

/* ---- attention for one query row and one head ------------------------------
 * scores[j] = (q . k_j) * scale for the n_keys visible keys, softmax in float32,
 * out = sum_j p_j v_j. k and v rows are kv_stride floats apart (the KV cache
 * layout [n_kv, n_kv_heads, head_dim]). */
static void os_attention_row(const float *q, const float *k, const float *v, os_idx kv_stride,
                             os_idx n_keys, os_idx hd, float scale, float *scores, float *out) {
    for (os_idx j = 0; j < n_keys; j++) scores[j] = os_dot_f32_1(q, k + j * kv_stride, hd);
    float mx = os_scale_max(scores, n_keys, scale);
    os_divide(scores, n_keys, os_exp_sum(scores, n_keys, mx));
    for (os_idx d = 0; d < hd; d++) out[d] = 0.0f;
    for (os_idx j = 0; j < n_keys; j++) {
        const float *vj = v + j * kv_stride;
        vf p = os_splat(scores[j]);
        os_idx d = 0;
        for (; d + OS_LANES <= hd; d += OS_LANES)
            os_store_f32(out + d, os_load_f32(out + d) + p * os_load_f32(vj + d));
        for (; d < hd; d++) out[d] += scores[j] * vj[d];
    }
}

#endif
