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
#if defined(__AMX_BF16__)
#define OS_VARIANT "amx" /* avx512bf16 plus AMX tiles for the bf16 GEMM (_bf16amx_impl.h) */
#elif defined(__AVX512BF16__)
#define OS_VARIANT "avx512bf16" /* avx512 plus VDPBF16PS for the bf16 GEMM (_bf16dp_impl.h) */
#else
#define OS_VARIANT "avx512"
#endif
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

/* how far ahead the decode GEMVs' weight streams are asked for (bytes) */
#define OS_PREFETCH_AHEAD 4096

/* Ask for the cache lines of [p + offset, p + offset + bytes) into L2 (not L1,
 * where they would evict what the loop reads now). The address is computed as
 * an integer: it may lie past the array, and prefetches never fault. */
static inline void os_prefetch_l2(const void *p, os_idx offset, os_idx bytes) {
    for (os_idx l = 0; l < bytes; l += 64)
        __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)(offset + l)), 0, 1);
}

/* v unchanged, but opaque to the compiler: a product passed through here is
 * never contracted with the add that follows into one fused multiply-add (GCC
 * contracts by default where FMA exists, which changes the last bit), so an
 * operator written with it gives the same bits in every build, with FMA or
 * without, vector or scalar */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#if defined(__AVX512F__)
#define OS_NC(v) __extension__({ __typeof__(v) nc_ = (v); __asm__("" : "+v"(nc_)); nc_; })
#else
#define OS_NC(v) __extension__({ __typeof__(v) nc_ = (v); __asm__("" : "+x"(nc_)); nc_; })
#endif
#elif defined(__GNUC__) && defined(__aarch64__)
#define OS_NC(v) __extension__({ __typeof__(v) nc_ = (v); __asm__("" : "+w"(nc_)); nc_; })
#else /* other compilers build only the scalar variant: one float through a volatile */
static inline float os_nc_float(float v) {
    volatile float t = v;
    return t;
}
#define OS_NC(v) os_nc_float(v)
#endif

/* one scalar tail term of a dot product, s += x * w with the product rounded
 * first. Spelled with OS_NC because a plain `s += x * w` loop is compiled two
 * ways: scalar fused multiply-adds, or, where at least a vector's width is left,
 * vector products added in order (GCC's in-order reductions), which round
 * differently; kernels whose outputs must match bit for bit (the one-row and
 * the batched decode GEMV) write their tails with this instead. */
#define OS_TAIL_MADD(s, x, w) ((s) += OS_NC((x) * (w)))

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

#if OS_LANES == 16
typedef int32_t os_hsum16_vi __attribute__((vector_size(64)));
/* os_hsum of sixteen vectors at once, in os_hsum's exact order (lane l += lane
 * l + 8, then l + 4, l + 2, l + 1, each level merging two vectors' halves):
 * lane j of the result is os_hsum(v[j]); 15 adds and 30 two-source shuffles
 * instead of ~30 scalar operations per vector */
static inline __attribute__((always_inline)) vf os_hsum16_pair(vf a, vf b, os_hsum16_vi x, os_hsum16_vi y) {
    return __builtin_shuffle(a, b, x) + __builtin_shuffle(a, b, y);
}
static inline __attribute__((always_inline)) vf os_hsum16(const vf v[16]) {
    const os_hsum16_vi l1x = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const os_hsum16_vi l1y = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    const os_hsum16_vi l2x = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const os_hsum16_vi l2y = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
    const os_hsum16_vi l3x = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
    const os_hsum16_vi l3y = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
    const os_hsum16_vi l4x = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const os_hsum16_vi l4y = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    vf a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) a[i] = os_hsum16_pair(v[2 * i], v[2 * i + 1], l1x, l1y);
    for (int i = 0; i < 4; i++) b[i] = os_hsum16_pair(a[2 * i], a[2 * i + 1], l2x, l2y);
    for (int i = 0; i < 2; i++) c[i] = os_hsum16_pair(b[2 * i], b[2 * i + 1], l3x, l3y);
    return os_hsum16_pair(c[0], c[1], l4x, l4y);
}
#endif

#if OS_LANES == 8
typedef int32_t os_hsum8_vi __attribute__((vector_size(32)));
/* os_hsum of eight vectors at once, in os_hsum's exact order: halves added
 * ((v0+v4), (v1+v5), ...), then the even and odd pairs, then even + odd;
 * the result holds the sums of a, c, e, g, b, d, f, h (about 21 shuffles and
 * adds instead of ~8 per vector) */
static inline __attribute__((always_inline)) vf
os_hsum8(vf a, vf b, vf c, vf d, vf e, vf f, vf g, vf h) {
    const os_hsum8_vi lo = {0, 1, 2, 3, 8, 9, 10, 11}, hi = {4, 5, 6, 7, 12, 13, 14, 15};
    const os_hsum8_vi p0 = {0, 1, 8, 9, 4, 5, 12, 13}, p1 = {2, 3, 10, 11, 6, 7, 14, 15};
    const os_hsum8_vi q0 = {0, 2, 8, 10, 4, 6, 12, 14}, q1 = {1, 3, 9, 11, 5, 7, 13, 15};
    vf ab = __builtin_shuffle(a, b, lo) + __builtin_shuffle(a, b, hi);
    vf cd = __builtin_shuffle(c, d, lo) + __builtin_shuffle(c, d, hi);
    vf ef = __builtin_shuffle(e, f, lo) + __builtin_shuffle(e, f, hi);
    vf gh = __builtin_shuffle(g, h, lo) + __builtin_shuffle(g, h, hi);
    vf s1 = __builtin_shuffle(ab, cd, p0) + __builtin_shuffle(ab, cd, p1);
    vf s2 = __builtin_shuffle(ef, gh, p0) + __builtin_shuffle(ef, gh, p1);
    return __builtin_shuffle(s1, s2, q0) + __builtin_shuffle(s1, s2, q1);
}
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

#if OS_LANES > 1
/* os_f32_to_bf16_scalar for a vector, left in the high halves (low halves 0):
 * the same round-to-nearest-even carry, NaN lanes made 0x7FC0 */
static inline vu os_bf16_round_bits(vf x) {
    typedef int32_t vi_ __attribute__((vector_size(4 * OS_LANES)));
    vu u;
    memcpy(&u, &x, sizeof u);
    vu r = (u + (((u >> 16) & 1u) + 0x7FFFu)) & 0xFFFF0000u;
    vu nan = (vu)(vi_)(x != x);
    return (r & ~nan) | (nan & 0x7FC00000u);
}
#endif

static void os_f32_to_bf16(const float *in, uint16_t *out, os_idx n) {
    os_idx i = 0;
#if OS_LANES > 1
    for (; i + OS_LANES <= n; i += OS_LANES) {
        vh h = __builtin_convertvector(os_bf16_round_bits(os_load_f32(in + i)) >> 16, vh);
        memcpy(out + i, &h, sizeof h);
    }
#endif
    for (; i < n; i++) out[i] = os_f32_to_bf16_scalar(in[i]);
}

static void os_round_bf16(const float *in, float *out, os_idx n) {
    os_idx i = 0;
#if OS_LANES > 1
    for (; i + OS_LANES <= n; i += OS_LANES) {
        vu r = os_bf16_round_bits(os_load_f32(in + i));
        memcpy(out + i, &r, sizeof r);
    }
#endif
    for (; i < n; i++) out[i] = os_bf16_scalar(os_f32_to_bf16_scalar(in[i]));
}

/* ---- dot products: one weight row against 1 or 4 activation rows --------- */

#define OS_DEFINE_DOT(NAME, WT, LOADW, SCALARW)                                 \
    /* sum_k x[k] * w[k] over K - K % OS_LANES elements, four independent     \
     * accumulators to hide FMA latency, left as one vector for os_hsum */     \
    static inline vf NAME##_1v(const float *x, const WT *w, os_idx K) {         \
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
        return (a0 + a1) + (a2 + a3);                                           \
    }                                                                           \
    /* sum_k x[k] * w[k]: the vector part, its os_hsum, then the scalar tail */ \
    static inline float NAME##_1(const float *x, const WT *w, os_idx K) {       \
        float s = os_hsum(NAME##_1v(x, w, K));                                  \
        for (os_idx k = K - K % OS_LANES; k < K; k++) s += x[k] * SCALARW(w[k]); \
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
    /* four weight rows against one activation row: four DRAM streams in    \
     * flight and one x load per four FMAs (decode GEMV); each row's sum is   \
     * one vector chain, os_hsum, then the tail, whichever rows come along */ \
    static inline void NAME##_r4p(const float *x, const WT *w0, const WT *w1,  \
                                  const WT *w2, const WT *w3, os_idx K, float *s) { \
        vf a0 = os_splat(0), a1 = a0, a2 = a0, a3 = a0;                         \
        os_idx k = 0;                                                           \
        for (; k + OS_LANES <= K; k += OS_LANES) {                              \
            vf xv = os_load_f32(x + k);                                         \
            a0 += xv * LOADW(w0 + k);                                           \
            a1 += xv * LOADW(w1 + k);                                           \
            a2 += xv * LOADW(w2 + k);                                           \
            a3 += xv * LOADW(w3 + k);                                           \
        }                                                                       \
        s[0] = os_hsum(a0); s[1] = os_hsum(a1); s[2] = os_hsum(a2); s[3] = os_hsum(a3); \
        for (; k < K; k++) {                                                    \
            OS_TAIL_MADD(s[0], x[k], SCALARW(w0[k]));                           \
            OS_TAIL_MADD(s[1], x[k], SCALARW(w1[k]));                           \
            OS_TAIL_MADD(s[2], x[k], SCALARW(w2[k]));                           \
            OS_TAIL_MADD(s[3], x[k], SCALARW(w3[k]));                           \
        }                                                                       \
    }                                                                           \
    static inline void NAME##_r4(const float *x, const WT *w, os_idx K, float *s) { \
        NAME##_r4p(x, w, w + K, w + 2 * K, w + 3 * K, K, s);                    \
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

/* float32 decode GEMV over rows [n0, n1), which must lie below N - N % 4 (the
 * rows os_dot_f32_rows sums with os_dot_f32_r4): the same sums, read as four
 * far-apart streams, the i-th rows of the range's four quarters together (as
 * os_gemv_bf16_rows; four neighbouring rows share DRAM pages and streamed
 * slower); rows past the quarters take r4's arithmetic alone */
static void os_gemv_f32_rows(const float *x, const float *W, os_idx K, const float *bias, float *y,
                             os_idx n0, os_idx n1) {
    const os_idx q = (n1 - n0) / 4;
    float s[4];
    for (os_idx n = n0; n < n0 + q; n++) {
        os_dot_f32_r4p(x, W + n * K, W + (n + q) * K, W + (n + 2 * q) * K, W + (n + 3 * q) * K, K, s);
        for (int j = 0; j < 4; j++) y[n + j * q] = s[j] + (bias ? bias[n + j * q] : 0.0f);
    }
    for (os_idx n = n0 + 4 * q; n < n1; n++) {
        const float *w = W + n * K;
        os_dot_f32_r4p(x, w, w, w, w, K, s);
        y[n] = s[0] + (bias ? bias[n] : 0.0f);
    }
}

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

/* One weight row's pair terms, accumulated in e (even) and o (odd) lanes;
 * hi is the 0xFFFF0000 mask that keeps the odd element of each pair. */
#define OS_PAIR_STEP(e, o, xp, w, k, hi)                                      \
    do {                                                                      \
        vu u_;                                                                \
        memcpy(&u_, (w) + (k), sizeof u_);                                    \
        e += os_load_f32((xp) + (k)) * os_bits_to_f32(u_ << 16);              \
        o += os_load_f32((xp) + (k) + OS_LANES) * os_bits_to_f32(u_ & (hi));  \
    } while (0)

/* y[n] = x . w[n] (+ bias[n]) once the vector part (e + o, k < kk) is summed */
static inline float os_pair_finish(vf e, vf o, const float *x, const uint16_t *w, os_idx kk,
                                   os_idx K, const float *bias, os_idx n) {
    float s = os_hsum(e + o);
    for (os_idx k = kk; k < K; k++) s += x[k] * os_bf16_scalar(w[k]);
    return s + (bias ? bias[n] : 0.0f);
}

/* y[n] = x . w[n] (+ bias[n]) for n in [n0, n1); x is given both as is (for
 * the tail) and pair-permuted (xp). The range is read as four long sequential
 * streams, one per quarter, a row of each at a time: DRAM prefetch works per
 * 4 KiB page, so four far-apart streams keep more lines in flight than one
 * (measured on Zen 3 with the 0.6B head: 1 thread 11-12 -> 17 GB/s, 2 threads
 * 18-19 -> 21-23 GB/s), whereas interleaving neighbouring 2 KiB rows, which
 * share pages, read slower than one stream. Every row is summed the same way
 * (e/o accumulators, then the tail), whichever stream reads it, so results do
 * not depend on the range or the thread split.
 * Each stream also asks for its line OS_PREFETCH_AHEAD bytes ahead: the
 * hardware prefetchers alone left bf16 rows at 17-19 GB/s where float32 rows
 * stream at 23-26 (Intel Xeon, 2 threads; a request 2 KiB ahead into L1 made
 * a BF16 decode step of the 0.6B model 0.83-0.93 of its time), and 4 KiB ahead
 * into L2 made it 0.78-0.91 of that on Zen 4. Prefetches change no result and
 * never fault, past the matrix's end included. */

static void os_gemv_bf16_rows(const float *x, const float *xp, const uint16_t *W, os_idx K,
                              const float *bias, float *y, os_idx n0, os_idx n1) {
    const vu hi = (vu){0} + 0xFFFF0000u;
    const os_idx kk = K - K % OS_PAIR, q = (n1 - n0) / 4;
    for (os_idx n = n0; n < n0 + q; n++) {
        const uint16_t *a = W + n * K, *b = a + q * K, *c = b + q * K, *d = c + q * K;
        vf ae = os_splat(0), ao = ae, be = ae, bo = ae, ce = ae, co = ae, de = ae, dd = ae;
        for (os_idx k = 0; k < kk; k += OS_PAIR) {
            os_prefetch_l2(a + k, OS_PREFETCH_AHEAD, 1);
            os_prefetch_l2(b + k, OS_PREFETCH_AHEAD, 1);
            os_prefetch_l2(c + k, OS_PREFETCH_AHEAD, 1);
            os_prefetch_l2(d + k, OS_PREFETCH_AHEAD, 1);
            OS_PAIR_STEP(ae, ao, xp, a, k, hi);
            OS_PAIR_STEP(be, bo, xp, b, k, hi);
            OS_PAIR_STEP(ce, co, xp, c, k, hi);
            OS_PAIR_STEP(de, dd, xp, d, k, hi);
        }
        y[n] = os_pair_finish(ae, ao, x, a, kk, K, bias, n);
        y[n + q] = os_pair_finish(be, bo, x, b, kk, K, bias, n + q);
        y[n + 2 * q] = os_pair_finish(ce, co, x, c, kk, K, bias, n + 2 * q);
        y[n + 3 * q] = os_pair_finish(de, dd, x, d, kk, K, bias, n + 3 * q);
    }
    for (os_idx n = n0 + 4 * q; n < n1; n++) {
        const uint16_t *a = W + n * K;
        vf ae = os_splat(0), ao = ae;
        for (os_idx k = 0; k < kk; k += OS_PAIR) OS_PAIR_STEP(ae, ao, xp, a, k, hi);
        y[n] = os_pair_finish(ae, ao, x, a, kk, K, bias, n);
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

/* torch.nn.LayerNorm over one row of D values: mean and biased variance in
 * double (torch's float32 kernel sums with a compensated cascade; exactly
 * rounded moments are the closest a plain loop gets), then in float32
 * y = (x - mean) * rstd * w + b. Four accumulators keep the double adds from
 * waiting on each other. */
static void os_layer_norm_row(const float *x, const float *w, const float *b, float eps, float *y,
                              os_idx D) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    os_idx i = 0;
    for (; i + 4 <= D; i += 4) {
        s0 += x[i]; s1 += x[i + 1]; s2 += x[i + 2]; s3 += x[i + 3];
    }
    for (; i < D; i++) s0 += x[i];
    const double mean = ((s0 + s1) + (s2 + s3)) / (double)D;
    s0 = s1 = s2 = s3 = 0;
    for (i = 0; i + 4 <= D; i += 4) {
        double d0 = x[i] - mean, d1 = x[i + 1] - mean, d2 = x[i + 2] - mean, d3 = x[i + 3] - mean;
        s0 += d0 * d0; s1 += d1 * d1; s2 += d2 * d2; s3 += d3 * d3;
    }
    for (; i < D; i++) {
        double d = x[i] - mean;
        s0 += d * d;
    }
    const double var = ((s0 + s1) + (s2 + s3)) / (double)D;
    const float rstd = (float)(1.0 / sqrt(var + (double)eps)), m = (float)mean;
    vf mv = os_splat(m), rv = os_splat(rstd);
    for (i = 0; i + OS_LANES <= D; i += OS_LANES)
        os_store_f32(y + i, (os_load_f32(x + i) - mv) * rv * os_load_f32(w + i) + os_load_f32(b + i));
    for (; i < D; i++) y[i] = (x[i] - m) * rstd * w[i] + b[i];
}

/* im2col of a 3x3, stride-2, pad-1 convolution, channels-last: output row i
 * of one image x[H][W][C] becomes Wo rows of 9 * C values, ordered (kh, kw,
 * c) like the kernel re-laid out as [Co][kh][kw][Ci]; taps in the padding
 * are zeros. */
static void os_im2col_3x3s2_row(const float *x, os_idx H, os_idx W, os_idx C, os_idx i, os_idx Wo,
                                float *cols) {
    for (os_idx j = 0; j < Wo; j++) {
        float *out = cols + j * 9 * C;
        for (os_idx a = 0; a < 3; a++) {
            os_idx r = 2 * i + a - 1;
            for (os_idx b = 0; b < 3; b++, out += C) {
                os_idx c = 2 * j + b - 1;
                if (r < 0 || r >= H || c < 0 || c >= W)
                    memset(out, 0, (size_t)C * sizeof(float));
                else
                    memcpy(out, x + (r * W + c) * C, (size_t)C * sizeof(float));
            }
        }
    }
}

/* output row i of a 3x3, stride-2, pad-1 convolution of a one-channel image
 * x[H][W], computed directly: the first convolution's K = 9 is too short for
 * the products' kernels, and its im2col + product + bias passes wrote its large
 * output three times. Each output sums the nine taps (kh, kw) in order, padding
 * taps as zeros like im2col's, then adds the bias, no product fused into its
 * add: the same bits in every build (the INT8 encoder quantizes what follows). */
static void os_conv3x3s2_c1_row(const float *x, os_idx H, os_idx W, const float *wt, const float *bias, os_idx Co,
                                os_idx i, os_idx Wo, float *y, int to_bf16) {
    for (os_idx j = 0; j < Wo; j++) {
        float tap[9];
        for (os_idx a = 0; a < 3; a++)
            for (os_idx b = 0; b < 3; b++) {
                os_idx r = 2 * i + a - 1, c = 2 * j + b - 1;
                tap[3 * a + b] = (r < 0 || r >= H || c < 0 || c >= W) ? 0.0f : x[r * W + c];
            }
        float *out = y + j * Co;
        os_idx o = 0;
#if OS_LANES > 1
        for (; o + OS_LANES <= Co; o += OS_LANES) {
            vf acc = OS_NC(os_splat(tap[0]) * os_load_f32(wt + o));
            for (int t = 1; t < 9; t++) acc += OS_NC(os_splat(tap[t]) * os_load_f32(wt + t * Co + o));
            if (bias) acc += os_load_f32(bias + o);
            os_store_f32(out + o, acc);
        }
#endif
        for (; o < Co; o++) {
            float acc = OS_NC(tap[0] * wt[o]);
            for (int t = 1; t < 9; t++) acc += OS_NC(tap[t] * wt[t * Co + o]);
            out[o] = bias ? acc + bias[o] : acc;
        }
        if (to_bf16) os_round_bf16(out, out, Co);
    }
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
/* exp(x) = 2^n * exp(x - n ln 2) for n = nf (as float and int): the reduced
 * argument in two parts of ln 2, then Cephes' degree-6 polynomial */
static inline vf os_exp_reduced(vf x, vf nf, vi n) {
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
static inline vf os_exp(vf x) {
    x = os_select(x > os_splat(88.72283f), os_splat(88.72283f), x);
    x = os_select(x < os_splat(-87.33654f), os_splat(-87.33654f), x);
    vf fx = x * 1.44269504088896341f + 0.5f;
    vi n = __builtin_convertvector(fx, vi); /* truncation; fix up to floor */
    vf nf = __builtin_convertvector(n, vf);
    vi over = nf > fx;
    n += over;                               /* mask is -1 where trunc > floor */
    nf = __builtin_convertvector(n, vf);
    return os_exp_reduced(x, nf, n);
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

/* exp(x) for x <= 0 in GELU, the same bits in every build: Cephes' expf (as
 * os_at_exp_neg: n = round(x / ln 2) by the 1.5 * 2^23 trick, the reduced
 * argument in two parts of ln 2, the degree-6 polynomial, 2^n through the
 * exponent bits) with no product fused into its add. The scalar version serves
 * the generic build and the vector builds' tails; one float op for one. */
/* the steps the scalar and the vector GELU share, written once for both types:
 * Cephes' reduced argument r = x - n ln 2 (ln 2 in two parts) and p = exp(r),
 * and A & S 7.1.26's t = 1 / (1 + 0.3275911 |z|) and its polynomial r(t) */
#define OS_GELU_EXP_POLY(x, nf, r, p)                                          \
    do {                                                                       \
        r = ((x) - OS_NC((nf) * 0.693359375f)) - OS_NC((nf) * -2.12194440e-4f); \
        p = OS_NC(1.9875691500e-4f * r) + 1.3981999507e-3f;                    \
        p = OS_NC(p * r) + 8.3334519073e-3f;                                   \
        p = OS_NC(p * r) + 4.1665795894e-2f;                                   \
        p = OS_NC(p * r) + 1.6666665459e-1f;                                   \
        p = OS_NC(p * r) + 5.0000001201e-1f;                                   \
        p = (OS_NC(p * (r * r)) + r) + 1.0f;                                   \
    } while (0)
#define OS_GELU_ERF_POLY(a, t, r)                                              \
    do {                                                                       \
        t = 1.0f / (OS_NC(0.3275911f * (a)) + 1.0f);                           \
        r = OS_NC(1.061405429f * t) - 1.453152027f;                            \
        r = OS_NC(r * t) + 1.421413741f;                                       \
        r = OS_NC(r * t) - 0.284496736f;                                       \
        r = OS_NC(r * t) + 0.254829592f;                                       \
    } while (0)

static inline float os_gelu_exp_1(float x) {
    x = x < -87.33654f ? -87.33654f : x;
    const float magic = 12582912.0f;
    float t = OS_NC(x * 1.44269504088896341f) + magic;
    float nf = t - magic;
    uint32_t tb, mb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    float r, p;
    OS_GELU_EXP_POLY(x, nf, r, p);
    uint32_t e = (tb - mb + 127u) << 23; /* as the vector version's int32 lanes, wrapping */
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

/* erf GELU with ATen's vectorised erf (Abramowitz & Stegun 7.1.26):
 * x * 0.5 * (1 + sign(z) * (1 - t * r(t) * exp(-z^2))), z = x / sqrt(2);
 * the same bits in every build (no fused products, os_gelu_exp), so that the
 * int8 codes taken from its output (the INT8 encoder's convolutions) are the
 * same on every variant */
static inline float os_gelu_1(float x) {
    float z = x * 0.70710678118654752440f;
    float a = fabsf(z);
    float t, r;
    OS_GELU_ERF_POLY(a, t, r);
    float e = 1.0f + OS_NC((-os_gelu_exp_1(-(z * z)) * t) * r);
    return x * 0.5f * (1.0f + copysignf(e, z));
}

#if OS_LANES > 1
static inline vf os_gelu_exp(vf x) {
    x = os_select(x < os_splat(-87.33654f), os_splat(-87.33654f), x);
    const vf magic = os_splat(12582912.0f);
    vf t = OS_NC(x * 1.44269504088896341f) + magic;
    vf nf = t - magic;
    vi n = (vi)t - (vi)magic;
    vf r, p;
    OS_GELU_EXP_POLY(x, nf, r, p);
    vi e = (n + 127) << 23;
    return p * (vf)e;
}
#endif

static void os_gelu(const float *x, float *y, os_idx n) {
    os_idx i = 0;
#if OS_LANES > 1
    const vi sign = (vi){0} + (int32_t)0x80000000;
    for (; i + OS_LANES <= n; i += OS_LANES) {
        vf xv = os_load_f32(x + i);
        vf z = xv * 0.70710678118654752440f;
        vf a = (vf)((vi)z & ~sign);
        vf t, r;
        OS_GELU_ERF_POLY(a, t, r);
        vf e = 1.0f + OS_NC((-os_gelu_exp(-(z * z)) * t) * r);
        e = (vf)((vi)e | ((vi)z & sign)); /* e >= 0, so OR-ing the sign is copysign */
        os_store_f32(y + i, xv * 0.5f * (1.0f + e));
    }
#endif
    for (; i < n; i++) y[i] = os_gelu_1(x[i]);
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

#if OS_LANES > 1
/* exp(x) for x <= 0 (scores minus their row max): Cephes' expf as os_exp
 * (same clamp below, same polynomial) with n = round(x / ln 2) taken by the
 * 1.5 * 2^23 rounding trick instead of a floor with a fix-up, and no upper
 * clamp; r stays within [-ln2/2, ln2/2], so the error bound is os_exp's */
static inline vf os_at_exp_neg(vf x) {
    x = os_select(x < os_splat(-87.33654f), os_splat(-87.33654f), x);
    const vf magic = os_splat(12582912.0f);
    vf t = x * 1.44269504088896341f + magic;
    vf nf = t - magic;
    vi n = (vi)t - (vi)magic;
    return os_exp_reduced(x, nf, n);
}
#endif

/* one score row in place: p = softmax(s * scale) over the first n_vis keys
 * (max, exp(x - max), sum, division by the sum), 0 for keys [n_vis, n) */
static void os_attn_softmax_row(float *s, os_idx n_vis, os_idx n, float scale) {
    float mx = -INFINITY, sum = 0.0f;
    os_idx j = 0;
#if OS_LANES > 1
    vf m = os_splat(-INFINITY), sc = os_splat(scale), acc = os_splat(0);
    for (; j + OS_LANES <= n_vis; j += OS_LANES) {
        vf x = os_load_f32(s + j) * sc;
        m = os_select(x > m, x, m);
    }
    for (int l = 0; l < OS_LANES; l++)
        if (m[l] > mx) mx = m[l];
#endif
    for (; j < n_vis; j++)
        if (s[j] * scale > mx) mx = s[j] * scale;
    j = 0;
#if OS_LANES > 1
    vf mv = os_splat(mx);
    for (; j + OS_LANES <= n_vis; j += OS_LANES) {
        vf e = os_at_exp_neg(os_load_f32(s + j) * sc - mv);
        os_store_f32(s + j, e);
        acc += e;
    }
    sum = os_hsum(acc);
#endif
    for (; j < n_vis; j++) {
        s[j] = expf(s[j] * scale - mx);
        sum += s[j];
    }
    os_divide(s, n_vis, sum);
    for (j = n_vis; j < n; j++) s[j] = 0.0f;
}

/* Decode attention reads each key's (and value's) slice for the task's heads,
 * 512 bytes per head, 4 KiB apart: a pattern the hardware prefetchers follow
 * poorly, so the slices OS_ATT_AHEAD keys ahead are asked for into L2
 * (docs/benchmarks.md, decode). */
#define OS_ATT_AHEAD 16

#if OS_LANES == 8 || OS_LANES == 16
#define OS_HSUM_BATCH OS_LANES
/* out[u] = os_hsum(v[u]) for OS_HSUM_BATCH vectors at once, in os_hsum's exact
 * order (os_hsum8 / os_hsum16: far fewer shuffles than one os_hsum each) */
static inline __attribute__((always_inline)) void os_hsum_batch(const vf v[OS_HSUM_BATCH], float *out) {
#if OS_LANES == 8
    vf r = os_hsum8(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    /* lanes hold vectors 0, 2, 4, 6, 1, 3, 5, 7 */
    out[0] = r[0]; out[2] = r[1]; out[4] = r[2]; out[6] = r[3];
    out[1] = r[4]; out[3] = r[5]; out[5] = r[6]; out[7] = r[7];
#else
    vf r = os_hsum16(v);
    for (int u = 0; u < 16; u++) out[u] = r[u];
#endif
}

/* Scores of OS_HSUM_BATCH keys per head at once: each dot's vector part as
 * DOT##_1, then one os_hsum_batch for all of them (a scalar os_hsum per key
 * cost more than the key's dot product at 16 lanes). Only when hd has no
 * scalar tail. */
#define OS_ATT_SCORES_MANY(DOT, KVT, i)                                                      \
    if (hd % OS_LANES == 0)                                                              \
        for (; i + OS_HSUM_BATCH <= n_keys; i += OS_HSUM_BATCH)                          \
            for (os_idx h = 0; h < nh; h++) {                                             \
                const float *qh = q + (h0 + h) * hd;                                     \
                const KVT *ki = k + i * kv_stride + (h0 + h) / group * hd;               \
                if (h % group == 0) /* this kv head's slice of the keys a block ahead */ \
                    for (int u = 0; u < OS_HSUM_BATCH; u++)                              \
                        os_prefetch_l2(ki, (u + OS_ATT_AHEAD) * kv_stride * (os_idx)sizeof(KVT),   \
                                       hd * (os_idx)sizeof(KVT));                        \
                vf c[OS_HSUM_BATCH];                                                     \
                for (int u = 0; u < OS_HSUM_BATCH; u++)                                  \
                    c[u] = DOT##_1v(qh, ki + u * kv_stride, hd);                         \
                os_hsum_batch(c, scores + h * n_keys + i);                               \
            }
#else
#define OS_ATT_SCORES_MANY(DOT, KVT, i)
#endif

/* ---- decode attention: one query row, a range of kv heads --------------------
 * For query row q (n_heads x hd) and kv heads [g0, g1) with their `group`
 * query heads each: scores[h][j] = (q_h . k_j) * scale over the n_keys visible
 * keys, softmax in float32, out_h = sum_j p_hj v_j. k and v rows are kv_stride
 * values apart (the KV cache layout [n_kv, n_kv_heads, head_dim]).
 *
 * Keys are the outer loop, so each pass reads the range's slice of every key
 * row once, front to back: per head, the cache would be read in 512-byte
 * pieces 4 KiB apart, which all fall into the same few cache sets. Each out_h
 * lane still sums p_hj v_jd in key order, one FMA per key, so nothing depends
 * on the range or on the thread split. scores holds (g1 - g0) * group rows of
 * n_keys floats. */
#define OS_DEFINE_ATTENTION_HEADS(NAME, KVT, DOT, LOADKV, SCALARKV)                     \
    static void NAME(const float *q, const KVT *k, const KVT *v, os_idx kv_stride,       \
                     os_idx n_keys, os_idx hd, os_idx group, os_idx g0, os_idx g1,       \
                     float scale, float *scores, float *out) {                           \
        const os_idx h0 = g0 * group, nh = (g1 - g0) * group;                             \
        os_idx i = 0;                                                                    \
        OS_ATT_SCORES_MANY(DOT, KVT, i)                                                         \
        for (; i < n_keys; i++)                                                          \
            for (os_idx h = 0; h < nh; h++)                                               \
                scores[h * n_keys + i] =                                                 \
                    DOT##_1(q + (h0 + h) * hd, k + i * kv_stride + (h0 + h) / group * hd, hd); \
        for (os_idx h = 0; h < nh; h++)                                                   \
            os_attn_softmax_row(scores + h * n_keys, n_keys, n_keys, scale);             \
        for (os_idx d = 0; d < nh * hd; d++) out[h0 * hd + d] = 0.0f;                    \
        os_idx j = 0;                                                                    \
        /* four keys per pass: out is loaded and stored once per four FMAs, the      \
         * same FMAs in the same key order as one key per pass */                    \
        for (; j + 4 <= n_keys; j += 4)                                                  \
            for (os_idx h = 0; h < nh; h++) {                                             \
                const KVT *v0 = v + j * kv_stride + (h0 + h) / group * hd;               \
                const KVT *v1 = v0 + kv_stride, *v2 = v1 + kv_stride, *v3 = v2 + kv_stride; \
                if (h % group == 0)                                                      \
                    for (int u = 0; u < 4; u++)                                          \
                        os_prefetch_l2(v0, (u + OS_ATT_AHEAD) * kv_stride * (os_idx)sizeof(KVT),   \
                                       hd * (os_idx)sizeof(KVT));                        \
                float *o = out + (h0 + h) * hd;                                          \
                const float *ph = scores + h * n_keys + j;                               \
                vf p0 = os_splat(ph[0]), p1 = os_splat(ph[1]);                           \
                vf p2 = os_splat(ph[2]), p3 = os_splat(ph[3]);                           \
                os_idx d = 0;                                                            \
                for (; d + OS_LANES <= hd; d += OS_LANES) {                              \
                    vf acc = os_load_f32(o + d);                                         \
                    acc = acc + p0 * LOADKV(v0 + d);                                     \
                    acc = acc + p1 * LOADKV(v1 + d);                                     \
                    acc = acc + p2 * LOADKV(v2 + d);                                     \
                    acc = acc + p3 * LOADKV(v3 + d);                                     \
                    os_store_f32(o + d, acc);                                            \
                }                                                                        \
                for (; d < hd; d++) {                                                    \
                    o[d] += ph[0] * SCALARKV(v0[d]);                                     \
                    o[d] += ph[1] * SCALARKV(v1[d]);                                     \
                    o[d] += ph[2] * SCALARKV(v2[d]);                                     \
                    o[d] += ph[3] * SCALARKV(v3[d]);                                     \
                }                                                                        \
            }                                                                            \
        for (; j < n_keys; j++)                                                          \
            for (os_idx h = 0; h < nh; h++) {                                             \
                const KVT *vj = v + j * kv_stride + (h0 + h) / group * hd;               \
                float *o = out + (h0 + h) * hd;                                          \
                float pj = scores[h * n_keys + j];                                       \
                vf p = os_splat(pj);                                                     \
                os_idx d = 0;                                                            \
                for (; d + OS_LANES <= hd; d += OS_LANES)                                \
                    os_store_f32(o + d, os_load_f32(o + d) + p * LOADKV(vj + d));        \
                for (; d < hd; d++) o[d] += pj * SCALARKV(vj[d]);                        \
            }                                                                            \
    }

OS_DEFINE_ATTENTION_HEADS(os_attention_heads, float, os_dot_f32, os_load_f32, OS_ID)
/* the BF16 KV cache: bf16 values widen exactly, so this sums the very same
 * products in the same order as os_attention_heads over their float32 copies */
OS_DEFINE_ATTENTION_HEADS(os_attention_heads_bf16kv, uint16_t, os_dot_bf16, os_load_bf16, os_bf16_scalar)


/* ---- fused attention for many queries (prefill, encoder, aligner) ----------
 * Flash-attention-style blocking with an exact two-pass softmax: one task
 * handles query rows [i0, i1) of every query head that shares kv head g
 * (row r = (i - i0) * group + head-in-group, so consecutive rows are adjacent
 * in q and out). Per task: the full score rows q . k for the task's visible
 * keys into a per-thread scratch, then per row scale, max, exp, sum and a
 * division by the sum (the reference's order of operations), then P.V
 * accumulated into out. No BLAS call: only our OpenMP threads run.
 *
 * Register tiles of OS_AT_MR = 6 rows by two vectors: 12 accumulators, two
 * loads and one broadcast live, 15 of AVX2's 16 registers. Keys are packed
 * per kv head as panels of OS_AT_NR keys, kp[panel][d][OS_AT_NR] (zero past
 * n_kv), so the score tile reads two contiguous vectors per d; values are
 * packed as contiguous rows vp[j][d] per kv head. */

#define OS_AT_MR 6
#define OS_AT_NR (2 * OS_LANES)

/* a splat that compiles to one broadcast load (os_splat's 0 + a keeps an
 * addition, as it must turn -0 into +0; a - 0 is a exactly) */
static inline vf os_at_bcast(float a) { return a - (vf){0}; }

/* pack keys [j0, j1) of kv head g (j0, j1 multiples of OS_AT_NR, j1 may pass
 * n_kv: those keys become zero panels / are skipped for v) */
static void os_attn_pack(const float *k, const float *v, os_idx n_kv, os_idx n_kv_heads, os_idx hd,
                         os_idx g, os_idx j0, os_idx j1, float *kp, float *vp) {
    os_idx stride = n_kv_heads * hd;
    for (os_idx p = j0 / OS_AT_NR; p < j1 / OS_AT_NR; p++) {
        float *dst = kp + p * hd * OS_AT_NR;
        for (os_idx jj = 0; jj < OS_AT_NR; jj++) {
            os_idx j = p * OS_AT_NR + jj;
            if (j < n_kv) {
                const float *src = k + j * stride + g * hd;
                for (os_idx d = 0; d < hd; d++) dst[d * OS_AT_NR + jj] = src[d];
            } else {
                for (os_idx d = 0; d < hd; d++) dst[d * OS_AT_NR + jj] = 0.0f;
            }
        }
    }
    for (os_idx j = j0; j < j1 && j < n_kv; j++) memcpy(vp + j * hd, v + j * stride + g * hd, hd * sizeof(float));
}

/* s_r[0 : OS_AT_NR] = q_r . (the panel's keys), r < 6 */
static inline void os_attn_scores_tile(const float *q0, const float *q1, const float *q2, const float *q3,
                                       const float *q4, const float *q5, const float *kp, os_idx hd,
                                       float *s, os_idx ld) {
    vf a00 = os_splat(0), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    vf a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    for (os_idx d = 0; d < hd; d++) {
        vf k0 = os_load_f32(kp + d * OS_AT_NR), k1 = os_load_f32(kp + d * OS_AT_NR + OS_LANES), b;
        b = os_at_bcast(q0[d]); a00 += b * k0; a01 += b * k1;
        b = os_at_bcast(q1[d]); a10 += b * k0; a11 += b * k1;
        b = os_at_bcast(q2[d]); a20 += b * k0; a21 += b * k1;
        b = os_at_bcast(q3[d]); a30 += b * k0; a31 += b * k1;
        b = os_at_bcast(q4[d]); a40 += b * k0; a41 += b * k1;
        b = os_at_bcast(q5[d]); a50 += b * k0; a51 += b * k1;
    }
    os_store_f32(s, a00); os_store_f32(s + OS_LANES, a01); s += ld;
    os_store_f32(s, a10); os_store_f32(s + OS_LANES, a11); s += ld;
    os_store_f32(s, a20); os_store_f32(s + OS_LANES, a21); s += ld;
    os_store_f32(s, a30); os_store_f32(s + OS_LANES, a31); s += ld;
    os_store_f32(s, a40); os_store_f32(s + OS_LANES, a41); s += ld;
    os_store_f32(s, a50); os_store_f32(s + OS_LANES, a51);
}

/* o_r[d : d + 2 vectors] += sum_{j < nj} p_r[j] * vp[j * hd + d], r < 6 */
static inline void os_attn_pv_tile2(const float *p, os_idx ld, const float *vp, os_idx hd, os_idx nj,
                                    float *const *o, os_idx d) {
    vf a00 = os_load_f32(o[0] + d), a01 = os_load_f32(o[0] + d + OS_LANES);
    vf a10 = os_load_f32(o[1] + d), a11 = os_load_f32(o[1] + d + OS_LANES);
    vf a20 = os_load_f32(o[2] + d), a21 = os_load_f32(o[2] + d + OS_LANES);
    vf a30 = os_load_f32(o[3] + d), a31 = os_load_f32(o[3] + d + OS_LANES);
    vf a40 = os_load_f32(o[4] + d), a41 = os_load_f32(o[4] + d + OS_LANES);
    vf a50 = os_load_f32(o[5] + d), a51 = os_load_f32(o[5] + d + OS_LANES);
    const float *p0 = p, *p1 = p + ld, *p2 = p + 2 * ld, *p3 = p + 3 * ld, *p4 = p + 4 * ld, *p5 = p + 5 * ld;
    vp += d;
    for (os_idx j = 0; j < nj; j++, vp += hd) {
        vf v0 = os_load_f32(vp), v1 = os_load_f32(vp + OS_LANES), b;
        b = os_at_bcast(p0[j]); a00 += b * v0; a01 += b * v1;
        b = os_at_bcast(p1[j]); a10 += b * v0; a11 += b * v1;
        b = os_at_bcast(p2[j]); a20 += b * v0; a21 += b * v1;
        b = os_at_bcast(p3[j]); a30 += b * v0; a31 += b * v1;
        b = os_at_bcast(p4[j]); a40 += b * v0; a41 += b * v1;
        b = os_at_bcast(p5[j]); a50 += b * v0; a51 += b * v1;
    }
    os_store_f32(o[0] + d, a00); os_store_f32(o[0] + d + OS_LANES, a01);
    os_store_f32(o[1] + d, a10); os_store_f32(o[1] + d + OS_LANES, a11);
    os_store_f32(o[2] + d, a20); os_store_f32(o[2] + d + OS_LANES, a21);
    os_store_f32(o[3] + d, a30); os_store_f32(o[3] + d + OS_LANES, a31);
    os_store_f32(o[4] + d, a40); os_store_f32(o[4] + d + OS_LANES, a41);
    os_store_f32(o[5] + d, a50); os_store_f32(o[5] + d + OS_LANES, a51);
}

/* the same for one vector of dimensions */
static inline void os_attn_pv_tile1(const float *p, os_idx ld, const float *vp, os_idx hd, os_idx nj,
                                    float *const *o, os_idx d) {
    vf a0 = os_load_f32(o[0] + d), a1 = os_load_f32(o[1] + d), a2 = os_load_f32(o[2] + d);
    vf a3 = os_load_f32(o[3] + d), a4 = os_load_f32(o[4] + d), a5 = os_load_f32(o[5] + d);
    vp += d;
    for (os_idx j = 0; j < nj; j++, vp += hd) {
        vf v0 = os_load_f32(vp);
        a0 += os_at_bcast(p[j]) * v0;
        a1 += os_at_bcast(p[ld + j]) * v0;
        a2 += os_at_bcast(p[2 * ld + j]) * v0;
        a3 += os_at_bcast(p[3 * ld + j]) * v0;
        a4 += os_at_bcast(p[4 * ld + j]) * v0;
        a5 += os_at_bcast(p[5 * ld + j]) * v0;
    }
    os_store_f32(o[0] + d, a0); os_store_f32(o[1] + d, a1); os_store_f32(o[2] + d, a2);
    os_store_f32(o[3] + d, a3); os_store_f32(o[4] + d, a4); os_store_f32(o[5] + d, a5);
}

/* visible keys of query i */
static inline os_idx os_attn_n_vis(os_idx i, os_idx n_kv, os_idx causal) {
    return causal < 0 ? n_kv : (causal + i + 1 < n_kv ? causal + i + 1 : n_kv);
}

/* row pointers of the tile starting at row t0 (padding rows read `zero` and
 * write `dummy`); returns how many keys its rows see at most */
static inline os_idx os_attn_tile(const float *q, float *out, os_idx n_heads, os_idx hd, os_idx group,
                                  os_idx g, os_idx i0, os_idx rows, os_idx t0, os_idx n_kv, os_idx causal,
                                  const float *zero, float *dummy, const float **qr, float **o) {
    os_idx bound = 0;
    for (int r = 0; r < OS_AT_MR; r++) {
        os_idx row = t0 + r;
        if (row < rows) {
            os_idx i = i0 + row / group, h = g * group + row % group;
            os_idx n_vis = os_attn_n_vis(i, n_kv, causal);
            qr[r] = q + (i * n_heads + h) * hd;
            o[r] = out + (i * n_heads + h) * hd;
            if (n_vis > bound) bound = n_vis;
        } else {
            qr[r] = zero;
            o[r] = dummy + r * hd;
        }
    }
    return bound;
}

/* One task: rows of queries [i0, i1) and the `group` heads of kv head g.
 * q, out: [n_q, n_heads, hd]; kp, vp: kv head g's packed keys and values;
 * causal < 0: every key visible, else query i sees keys j <= causal + i.
 * s: scratch of rows_pad * ld floats (rows_pad = rows rounded up to
 * OS_AT_MR, ld >= n_kv rounded up to OS_AT_NR); zero: hd zeros; dummy:
 * OS_AT_MR * hd floats (the padding rows' output); kc: keys per chunk, a
 * multiple of OS_AT_NR.
 * Keys go in chunks over all row tiles of the task, so each chunk of k (and
 * later v) is read from memory once per task and then from L2. */
static void os_attn_block(const float *q, float *out, os_idx n_heads, os_idx hd, os_idx group, os_idx g,
                          os_idx i0, os_idx i1, const float *kp, const float *vp, os_idx n_kv,
                          os_idx causal, float scale, float *s, os_idx ld, const float *zero,
                          float *dummy, os_idx kc) {
    os_idx pc_step = kc / OS_AT_NR, rows = (i1 - i0) * group, max_bound = 0;
    const float *qr[OS_AT_MR];
    float *o[OS_AT_MR];
    for (os_idx t0 = 0; t0 < rows; t0 += OS_AT_MR) {
        os_idx b = os_attn_tile(q, out, n_heads, hd, group, g, i0, rows, t0, n_kv, causal, zero, dummy, qr, o);
        if (b > max_bound) max_bound = b;
    }
    /* scores */
    os_idx max_pan = (max_bound + OS_AT_NR - 1) / OS_AT_NR;
    for (os_idx pc = 0; pc < max_pan; pc += pc_step) {
        for (os_idx t0 = 0; t0 < rows; t0 += OS_AT_MR) {
            os_idx b = os_attn_tile(q, out, n_heads, hd, group, g, i0, rows, t0, n_kv, causal, zero, dummy, qr, o);
            os_idx n_pan = (b + OS_AT_NR - 1) / OS_AT_NR;
            if (n_pan > pc + pc_step) n_pan = pc + pc_step;
            float *st = s + t0 * ld;
            for (os_idx p = pc; p < n_pan; p++)
                os_attn_scores_tile(qr[0], qr[1], qr[2], qr[3], qr[4], qr[5], kp + p * hd * OS_AT_NR, hd,
                                    st + p * OS_AT_NR, ld);
        }
    }
    /* softmax per row; outputs start at zero */
    for (os_idx t0 = 0; t0 < rows; t0 += OS_AT_MR) {
        os_idx b = os_attn_tile(q, out, n_heads, hd, group, g, i0, rows, t0, n_kv, causal, zero, dummy, qr, o);
        float *st = s + t0 * ld;
        for (int r = 0; r < OS_AT_MR; r++) {
            os_idx row = t0 + r;
            if (row < rows)
                os_attn_softmax_row(st + r * ld, os_attn_n_vis(i0 + row / group, n_kv, causal), b, scale);
            else
                for (os_idx j = 0; j < b; j++) st[r * ld + j] = 0.0f;
            for (os_idx d = 0; d < hd; d++) o[r][d] = 0.0f;
        }
    }
    /* out += P . V, a chunk of keys at a time */
    for (os_idx j0 = 0; j0 < max_bound; j0 += kc) {
        const float *vc = vp + j0 * hd;
        for (os_idx t0 = 0; t0 < rows; t0 += OS_AT_MR) {
            os_idx b = os_attn_tile(q, out, n_heads, hd, group, g, i0, rows, t0, n_kv, causal, zero, dummy, qr, o);
            os_idx nj = b - j0 < kc ? b - j0 : kc;
            const float *st = s + t0 * ld + j0;
            os_idx d = 0;
            if (nj <= 0) continue;
            for (; d + 2 * OS_LANES <= hd; d += 2 * OS_LANES) os_attn_pv_tile2(st, ld, vc, hd, nj, o, d);
            for (; d + OS_LANES <= hd; d += OS_LANES) os_attn_pv_tile1(st, ld, vc, hd, nj, o, d);
            for (; d < hd; d++)
                for (int r = 0; r < OS_AT_MR; r++) {
                    float a = o[r][d];
                    for (os_idx j = 0; j < nj; j++) a += st[r * ld + j] * vc[j * hd + d];
                    o[r][d] = a;
                }
        }
    }
}

#endif
