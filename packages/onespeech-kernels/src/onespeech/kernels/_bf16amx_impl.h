/* bfloat16 x bfloat16 GEMM with float32 accumulation in AMX's arithmetic.
 *
 * y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) where x and w hold bfloat16
 * values, as AMX-BF16's TDPBF16PS computes it. Its order is the definition
 * here, so that the tiles (os_gemm_bf16amx with OS_AMX_NATIVE) and the
 * portable code (every other build) give the same bits:
 *
 * - K is read in steps of 32 values (K must be a multiple of 32);
 * - per step, an even chain e and an odd chain o start at +0 and take the
 *   step's 16 pairs in order: e += x[2p] w[2p], o += x[2p+1] w[2p+1], each
 *   a float32 multiply-add (products of bf16 values are exact);
 * - the step's sum e + o is added to the output's accumulator (from +0);
 * - the bias is added last.
 * Every operation rounds to nearest even, reads denormals as zero and
 * flushes denormal results (the instruction ignores the MXCSR and always
 * does so; the portable code sets DAZ / FTZ, or flushes in software where
 * there is no MXCSR). Intel's manual words the instruction as one chain; the
 * two-chain order above is what the hardware computes, bit for bit, on random
 * and on denormal-producing inputs (tests/test_bf16amx.py checks it on every
 * machine that has the tiles).
 */
#ifndef ONESPEECH_BF16AMX_IMPL_H
#define ONESPEECH_BF16AMX_IMPL_H

#include "_bf16dp_impl.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#include <immintrin.h>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define OS_AMX_NATIVE 1
#else
#define OS_AMX_NATIVE 0
#endif

#define OS_AMX_STEP 32 /* bf16 values of K per tile step */
#define OS_AMX_BLOCK 16 /* tile rows: outputs per block of m and of n */

/* The definition, one output at a time. x: (M, ldx) bf16 rows (first K used),
 * w: (N, K) bf16, y: (M, N); outputs m in [m0, m1), n in [n0, n1). */
static void os_gemm_bf16amx_portable(const uint16_t *x, os_idx ldx, const uint16_t *w, const float *bias,
                                     float *y, os_idx N, os_idx K, os_idx m0, os_idx m1, os_idx n0,
                                     os_idx n1) {
    unsigned csr = os_dp_enter();
    for (os_idx m = m0; m < m1; m++)
        for (os_idx n = n0; n < n1; n++) {
            const uint16_t *xr = x + m * ldx, *wr = w + n * K;
            float acc = 0.0f;
            for (os_idx k0 = 0; k0 < K; k0 += OS_AMX_STEP) {
                float e = 0.0f, o = 0.0f;
                for (os_idx k = k0; k < k0 + OS_AMX_STEP; k += 2) {
                    e = os_dp_flush(fmaf(os_dp_value(xr, K, k), os_dp_value(wr, K, k), e));
                    o = os_dp_flush(fmaf(os_dp_value(xr, K, k + 1), os_dp_value(wr, K, k + 1), o));
                }
                acc = os_dp_flush(acc + os_dp_flush(e + o));
            }
            y[m * N + n] = bias ? os_dp_flush(acc + bias[n]) : acc;
        }
    os_dp_leave(csr);
}

/* One 32-value tile row from v (float32 holding bfloat16 values), or zeros
 * where v is NULL. Returns the OR of the low 16 bits read (non-zero when some
 * value is not a bfloat16 value). */
static inline uint32_t os_amx_pack32(const float *v, uint16_t *t) {
    uint32_t low = 0;
    if (!v) {
        memset(t, 0, OS_AMX_STEP * sizeof(uint16_t));
        return 0;
    }
    const uint32_t *b = (const uint32_t *)v;
    for (int j = 0; j < OS_AMX_STEP; j++) {
        low |= b[j] & 0xFFFFu;
        t[j] = (uint16_t)(b[j] >> 16);
    }
    return low;
}

/* Pack x (M, K) float32 holding bfloat16 values into first-operand tiles for x-row blocks
 * [mb0, mb1): tile (mb, kb) holds x rows mb*16 .. mb*16 + 15 (zero past M),
 * values kb*32 .. kb*32 + 31 of each, as bf16, 1 KiB contiguous. xt holds
 * K / 32 tiles per block of 16 rows. Returns 1 if some value read is not a
 * bfloat16 value (low 16 bits set). */
static int os_amx_pack_x(const float *x, os_idx M, os_idx K, uint16_t *xt, os_idx mb0, os_idx mb1) {
    os_idx KB = K / OS_AMX_STEP;
    uint32_t low = 0;
    for (os_idx mb = mb0; mb < mb1; mb++)
        for (os_idx r = 0; r < OS_AMX_BLOCK; r++) {
            os_idx m = mb * OS_AMX_BLOCK + r;
            for (os_idx kb = 0; kb < KB; kb++)
                low |= os_amx_pack32(m < M ? x + m * K + kb * OS_AMX_STEP : NULL,
                                     xt + (mb * KB + kb) * 512 + r * OS_AMX_STEP);
        }
    return low != 0;
}

/* os_amx_pack_x of the im2col rows of a 3x3, stride-2, pad-1 convolution over
 * n channels-last images x[n][H][W][C] (os_im2col_3x3s2_row's rows, values
 * (kh, kw, c)), read from the images without forming the rows. C must be a
 * multiple of 32, so that every 32-value step lies within one tap. */
static int os_amx_pack_conv_x(const float *x, os_idx n, os_idx H, os_idx W, os_idx C, uint16_t *xt, os_idx mb0,
                              os_idx mb1) {
    os_idx Ho = (H + 1) / 2, Wo = (W + 1) / 2, M = n * Ho * Wo, KB = 9 * C / OS_AMX_STEP, SB = C / OS_AMX_STEP;
    uint32_t low = 0;
    for (os_idx mb = mb0; mb < mb1; mb++)
        for (os_idx r = 0; r < OS_AMX_BLOCK; r++) {
            os_idx m = mb * OS_AMX_BLOCK + r, img = m / (Ho * Wo), i = m / Wo % Ho, j = m % Wo;
            for (os_idx tap = 0; tap < 9; tap++) {
                os_idx row = 2 * i + tap / 3 - 1, col = 2 * j + tap % 3 - 1;
                const float *src =
                    m < M && row >= 0 && row < H && col >= 0 && col < W ? x + ((img * H + row) * W + col) * C : NULL;
                for (os_idx s = 0; s < SB; s++)
                    low |= os_amx_pack32(src ? src + s * OS_AMX_STEP : NULL,
                                         xt + (mb * KB + tap * SB + s) * 512 + r * OS_AMX_STEP);
            }
        }
    return low != 0;
}

#if OS_AMX_NATIVE
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} os_amx_config;

/* Whether this CPU has the tiles and the OS lets this process use them
 * (Linux hands out the 8 KiB of tile state only on request). */
static int os_amx_request(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((d >> 22) & 1u) || !((d >> 24) & 1u)) return 0; /* AMX-BF16, AMX-TILE */
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

/* every tile 16 rows of 64 bytes: C tiles 0-3, x tiles 4-5, w tiles 6-7 */
static inline void os_amx_configure(void) {
    os_amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = OS_AMX_BLOCK;
    }
    /* GCC 12 treats LDTILECFG's operand as too short a read and may drop the
     * stores of colsb (then the instruction faults): make them all happen */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

/* out[i, j] += b[j] for a rows x cols corner of a tile (rows of out N apart) */
static inline void os_amx_add_bias(float *out, os_idx N, const float *b, int rows, int cols) {
    __mmask16 mask = (__mmask16)((1u << cols) - 1u);
    __m512 bv = _mm512_maskz_loadu_ps(mask, b);
    for (int i = 0; i < rows; i++) {
        float *o = out + i * N;
        _mm512_mask_storeu_ps(o, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), bv));
    }
}

/* C tile T (16 x rows from m) x (16 w rows from n), row-major: straight into
 * y where the tile lies inside it, else through c and clipped; then the bias
 * (the caller has set the MXCSR's DAZ / FTZ, so the adds flush as the
 * portable code's do). A macro: the tile number must be an immediate. */
#define OS_AMX_STORE(T, c, bias, y, M, N, m, n)                                                            \
    do {                                                                                                  \
        int rows_ = (M) - (m) < OS_AMX_BLOCK ? (int)((M) - (m)) : OS_AMX_BLOCK;                          \
        int cols_ = (N) - (n) < OS_AMX_BLOCK ? (int)((N) - (n)) : OS_AMX_BLOCK;                          \
        float *out_ = (y) + (m) * (N) + (n);                                                              \
        if (rows_ == OS_AMX_BLOCK && cols_ == OS_AMX_BLOCK) {                                            \
            _tile_stored(T, out_, 4 * (N));                                                               \
        } else {                                                                                          \
            _tile_stored(T, (c), 64);                                                                     \
            for (int i_ = 0; i_ < rows_; i_++)                                                            \
                memcpy(out_ + i_ * (N), (c) + i_ * OS_AMX_BLOCK, cols_ * sizeof(float));                 \
        }                                                                                                 \
        if (bias) os_amx_add_bias(out_, (N), (bias) + (n), rows_, cols_);                                \
    } while (0)

/* dst (16 x 16, contiguous) = the transpose of 16 rows of 16 values, `stride`
 * apart, rows from `rows` on read as zero: four rounds of unpacks and lane
 * shuffles instead of 256 scalar moves (products 3-10 % faster at encoder and
 * prefill shapes) */
static inline void os_amx_transpose16(const uint32_t *src, os_idx stride, int rows, uint32_t *dst) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = i < rows ? _mm512_loadu_si512((const void *)(src + i * stride)) : _mm512_setzero_si512();
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        _mm512_storeu_si512((void *)(dst + i * 16), _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88));
        _mm512_storeu_si512((void *)(dst + (i + 8) * 16), _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd));
    }
}

/* Copying a band of (at most) 32 w rows into B tiles, one 16 x 16 block at a
 * time: tile (j, kb) row p holds, for each of the 16 w rows 16j + f, the pair
 * (k, k + 1) at k = kb*32 + 2p (zero rows past the band's end). */
typedef struct {
    const uint32_t *src; /* the band's first w row, read as pairs */
    os_idx K, rows, next, total; /* rows in the band; blocks done, of total (2 K / 32) */
    uint16_t *dst;
} os_amx_pack_job;

/* the job's next block */
static inline void os_amx_pack_block(os_amx_pack_job *job) {
    os_idx KB = job->K / OS_AMX_STEP, i = job->next++, j = i / KB, kb = i % KB;
    os_idx valid = job->rows - j * OS_AMX_BLOCK;
    os_amx_transpose16(job->src + (j * OS_AMX_BLOCK * job->K) / 2 + kb * OS_AMX_BLOCK, job->K / 2,
                       valid < 0 ? 0 : (int)(valid < OS_AMX_BLOCK ? valid : OS_AMX_BLOCK),
                       (uint32_t *)(job->dst + (j * KB + kb) * 512));
}

/* (rm x 16 x rows) x (rn x 16 w rows) over all of K: x tiles (first operand)
 * from xt, w pair tiles (second operand) from wp, as os_gemm_bf16amx packs
 * them. Between steps it copies blocks of the next band (job): the AVX-512
 * shuffles run while the tiles multiply, instead of the tiles waiting for
 * them (the products ran 15-30 % faster at prefill shapes). Tile numbers are
 * immediates, so each shape is its own instantiation. */
static inline __attribute__((always_inline)) void
os_amx_tile(const uint16_t *xt, const uint16_t *wp, os_idx KB, const float *bias, float *y, os_idx M, os_idx N,
            os_idx mb, os_idx n, const int rm, const int rn, os_amx_pack_job *job) {
    const uint16_t *x0 = xt + mb * KB * 512, *x1 = x0 + KB * 512;
    const uint16_t *w0 = wp, *w1 = wp + KB * 512;
    _tile_zero(0);
    if (rn > 1) _tile_zero(1);
    if (rm > 1) _tile_zero(2);
    if (rm > 1 && rn > 1) _tile_zero(3);
    for (os_idx kb = 0; kb < KB; kb++) {
        _tile_loadd(4, x0 + kb * 512, 64);
        if (rm > 1) _tile_loadd(5, x1 + kb * 512, 64);
        _tile_loadd(6, w0 + kb * 512, 64);
        if (rn > 1) _tile_loadd(7, w1 + kb * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (rn > 1) _tile_dpbf16ps(1, 4, 7);
        if (rm > 1) _tile_dpbf16ps(2, 5, 6);
        if (rm > 1 && rn > 1) _tile_dpbf16ps(3, 5, 7);
        if (job->next < job->total) os_amx_pack_block(job);
    }
    float c[OS_AMX_BLOCK * OS_AMX_BLOCK];
    os_idx m = mb * OS_AMX_BLOCK;
    OS_AMX_STORE(0, c, bias, y, M, N, m, n);
    if (rn > 1) OS_AMX_STORE(1, c, bias, y, M, N, m, n + OS_AMX_BLOCK);
    if (rm > 1) OS_AMX_STORE(2, c, bias, y, M, N, m + OS_AMX_BLOCK, n);
    if (rm > 1 && rn > 1) OS_AMX_STORE(3, c, bias, y, M, N, m + OS_AMX_BLOCK, n + OS_AMX_BLOCK);
}

#define OS_AMX_TILE_FN(RM, RN)                                                                            \
    static void os_amx_tile_##RM##x##RN(const uint16_t *xt, const uint16_t *wp, os_idx KB, const float *bias, \
                                        float *y, os_idx M, os_idx N, os_idx mb, os_idx n,                \
                                        os_amx_pack_job *job) {                                           \
        os_amx_tile(xt, wp, KB, bias, y, M, N, mb, n, RM, RN, job);                                      \
    }
OS_AMX_TILE_FN(1, 1) OS_AMX_TILE_FN(1, 2) OS_AMX_TILE_FN(2, 1) OS_AMX_TILE_FN(2, 2)

/* the job that copies band `band` of w (rows 32 band ..) into dst */
static inline os_amx_pack_job os_amx_band_job(const uint16_t *w, os_idx N, os_idx K, os_idx band, uint16_t *dst) {
    os_idx n0 = band * 2 * OS_AMX_BLOCK, rows = N - n0 < 2 * OS_AMX_BLOCK ? N - n0 : 2 * OS_AMX_BLOCK;
    os_amx_pack_job job = {(const uint32_t *)(w + n0 * K), K, rows, 0, 2 * (K / OS_AMX_STEP), dst};
    return job;
}

/* One thread's tasks [t0, t1): task t is x-row blocks [g * group, (g + 1) *
 * group) for g = t / n_bands (xt from os_amx_pack_x) times band t % n_bands
 * of w (rows 32 b .. 32 b + 31). A group's x tiles stay in this core's cache
 * while the bands of w pass by. Outputs are tile rows of y, stored in place.
 * wp holds two bands' B tiles (2 * 32 * K values): the next task's band is
 * copied into one while the tiles work from the other. */
static void os_gemm_bf16amx(const uint16_t *xt, const uint16_t *w, const float *bias, float *y, os_idx M,
                            os_idx N, os_idx K, os_idx group, os_idx t0, os_idx t1, uint16_t *wp) {
    os_idx KB = K / OS_AMX_STEP, MB = (M + OS_AMX_BLOCK - 1) / OS_AMX_BLOCK, band_size = 2 * OS_AMX_BLOCK * K;
    os_idx n_bands = (N + 2 * OS_AMX_BLOCK - 1) / (2 * OS_AMX_BLOCK);
    if (t0 >= t1) return;
    os_amx_pack_job first = os_amx_band_job(w, N, K, t0 % n_bands, wp);
    while (first.next < first.total) os_amx_pack_block(&first);
    unsigned csr = os_dp_enter();
    os_amx_configure();
    int cur = 0;
    for (os_idx t = t0; t < t1; t++) {
        os_idx band = t % n_bands, n0 = band * 2 * OS_AMX_BLOCK, mb = t / n_bands * group;
        os_idx mb1 = mb + group < MB ? mb + group : MB;
        os_amx_pack_job next = {NULL, K, 0, 0, 0, NULL}; /* nothing to copy */
        if (t + 1 < t1 && n_bands > 1) next = os_amx_band_job(w, N, K, (t + 1) % n_bands, wp + (1 - cur) * band_size);
        const uint16_t *tiles = wp + cur * band_size;
        int two = N - n0 > OS_AMX_BLOCK;
        for (; mb + 2 <= mb1; mb += 2)
            (two ? os_amx_tile_2x2 : os_amx_tile_2x1)(xt, tiles, KB, bias, y, M, N, mb, n0, &next);
        if (mb < mb1) (two ? os_amx_tile_1x2 : os_amx_tile_1x1)(xt, tiles, KB, bias, y, M, N, mb, n0, &next);
        while (next.next < next.total) os_amx_pack_block(&next);
        if (next.total) cur = 1 - cur;
    }
    _tile_release();
    os_dp_leave(csr);
}
#else
static int os_amx_request(void) { return 0; }

/* never called: os_amx_request() is 0 in this build, so callers take os_gemm_bf16amx_portable */
static void os_gemm_bf16amx(const uint16_t *xt, const uint16_t *w, const float *bias, float *y, os_idx M,
                            os_idx N, os_idx K, os_idx group, os_idx t0, os_idx t1, uint16_t *wp) {
    (void)xt, (void)w, (void)bias, (void)y, (void)M, (void)N, (void)K, (void)group, (void)t0, (void)t1, (void)wp;
}
#endif

#endif
