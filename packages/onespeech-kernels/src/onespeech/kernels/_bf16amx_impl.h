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

/* Pack rows [m0, m1) of x (M, ldx) bf16 into B tiles: tile (mb, kb) holds
 * 16 rows of K pairs, row p = for each of the 16 x rows mb*16 + c the pair
 * (k, k + 1) at k = kb*32 + 2p. Rows past M are zero. xt has KB = K / 32
 * tiles of 512 values per block of 16 rows. */
static void os_amx_pack_x(const uint16_t *x, os_idx ldx, os_idx M, os_idx K, uint16_t *xt, os_idx mb0,
                          os_idx mb1) {
    os_idx KB = K / OS_AMX_STEP;
    const uint32_t *x32 = (const uint32_t *)x;
    for (os_idx mb = mb0; mb < mb1; mb++)
        for (os_idx kb = 0; kb < KB; kb++) {
            uint32_t *t = (uint32_t *)(xt + (mb * KB + kb) * 512);
            for (os_idx c = 0; c < OS_AMX_BLOCK; c++) {
                os_idx m = mb * OS_AMX_BLOCK + c;
                for (os_idx p = 0; p < OS_AMX_BLOCK; p++)
                    t[p * OS_AMX_BLOCK + c] = m < M ? x32[(m * ldx) / 2 + kb * OS_AMX_BLOCK + p] : 0u;
            }
        }
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

/* every tile 16 rows of 64 bytes: C tiles 0-3, w tiles 4-5, x tiles 6-7 */
static inline void os_amx_configure(void) {
    os_amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = OS_AMX_BLOCK;
    }
    _tile_loadconfig(&cfg);
}

/* C tile (16 w rows from n) x (16 x rows from m) -> y, transposed, clipped to M and N */
static inline void os_amx_store(const float *c, const float *bias, float *y, os_idx M, os_idx N, os_idx m,
                                os_idx n) {
    unsigned csr = os_dp_enter(); /* the bias add flushes as the portable code's does */
    for (int r = 0; r < OS_AMX_BLOCK && n + r < N; r++) {
        float b = bias ? bias[n + r] : 0.0f;
        for (int i = 0; i < OS_AMX_BLOCK && m + i < M; i++)
            y[(m + i) * N + n + r] = bias ? c[r * OS_AMX_BLOCK + i] + b : c[r * OS_AMX_BLOCK + i];
    }
    os_dp_leave(csr);
}

/* (rm x 16 x rows) x (rn x 16 w rows) over all of K; tile numbers are
 * immediates, so each shape is its own instantiation */
static inline __attribute__((always_inline)) void
os_amx_tile(const uint16_t *xt, os_idx KB, const uint16_t *w, os_idx K, const float *bias, float *y, os_idx M,
            os_idx N, os_idx mb, os_idx n0, os_idx n, const int rm, const int rn) {
    const uint16_t *x0 = xt + mb * KB * 512, *x1 = x0 + KB * 512;
    const uint16_t *w0 = w + n * K, *w1 = w0 + OS_AMX_BLOCK * K; /* w is row n0, n counts from it */
    _tile_zero(0);
    if (rn > 1) _tile_zero(1);
    if (rm > 1) _tile_zero(2);
    if (rm > 1 && rn > 1) _tile_zero(3);
    for (os_idx kb = 0; kb < KB; kb++) {
        _tile_loadd(4, w0 + kb * OS_AMX_STEP, 2 * K);
        if (rn > 1) _tile_loadd(5, w1 + kb * OS_AMX_STEP, 2 * K);
        _tile_loadd(6, x0 + kb * 512, 64);
        if (rm > 1) _tile_loadd(7, x1 + kb * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (rn > 1) _tile_dpbf16ps(1, 5, 6);
        if (rm > 1) _tile_dpbf16ps(2, 4, 7);
        if (rm > 1 && rn > 1) _tile_dpbf16ps(3, 5, 7);
    }
    float c[OS_AMX_BLOCK * OS_AMX_BLOCK];
    os_idx m = mb * OS_AMX_BLOCK;
    _tile_stored(0, c, 64);
    os_amx_store(c, bias, y, M, N, m, n0 + n);
    if (rn > 1) {
        _tile_stored(1, c, 64);
        os_amx_store(c, bias, y, M, N, m, n0 + n + OS_AMX_BLOCK);
    }
    if (rm > 1) {
        _tile_stored(2, c, 64);
        os_amx_store(c, bias, y, M, N, m + OS_AMX_BLOCK, n0 + n);
    }
    if (rm > 1 && rn > 1) {
        _tile_stored(3, c, 64);
        os_amx_store(c, bias, y, M, N, m + OS_AMX_BLOCK, n0 + n + OS_AMX_BLOCK);
    }
}

#define OS_AMX_TILE_FN(RM, RN)                                                                            \
    static void os_amx_tile_##RM##x##RN(const uint16_t *xt, os_idx KB, const uint16_t *w, os_idx K,     \
                                        const float *bias, float *y, os_idx M, os_idx N, os_idx mb,      \
                                        os_idx n0, os_idx n) {                                            \
        os_amx_tile(xt, KB, w, K, bias, y, M, N, mb, n0, n, RM, RN);                                     \
    }
OS_AMX_TILE_FN(1, 1) OS_AMX_TILE_FN(1, 2) OS_AMX_TILE_FN(2, 1) OS_AMX_TILE_FN(2, 2)

/* Outputs of x-row blocks [mb0, mb1) (xt from os_amx_pack_x) and w rows
 * [n0, n1); w points at row n0 and must hold whole blocks of 16 rows from
 * there up to n1 (the caller pads a last partial block). */
static void os_gemm_bf16amx(const uint16_t *xt, const uint16_t *w, const float *bias, float *y, os_idx M,
                            os_idx N, os_idx K, os_idx mb0, os_idx mb1, os_idx n0, os_idx n1) {
    os_idx KB = K / OS_AMX_STEP;
    os_amx_configure();
    for (os_idx n = 0; n < n1 - n0; n += 2 * OS_AMX_BLOCK) {
        int rn = n1 - n0 - n > OS_AMX_BLOCK ? 2 : 1;
        os_idx mb = mb0;
        for (; mb + 2 <= mb1; mb += 2)
            (rn == 2 ? os_amx_tile_2x2 : os_amx_tile_2x1)(xt, KB, w, K, bias, y, M, N, mb, n0, n);
        if (mb < mb1) (rn == 2 ? os_amx_tile_1x2 : os_amx_tile_1x1)(xt, KB, w, K, bias, y, M, N, mb, n0, n);
    }
    _tile_release();
}
#else
static int os_amx_request(void) { return 0; }

/* never called: os_amx_request() is 0 in this build, so callers take os_gemm_bf16amx_portable */
static void os_gemm_bf16amx(const uint16_t *xt, const uint16_t *w, const float *bias, float *y, os_idx M,
                            os_idx N, os_idx K, os_idx mb0, os_idx mb1, os_idx n0, os_idx n1) {
    (void)xt, (void)w, (void)bias, (void)y, (void)M, (void)N, (void)K, (void)mb0, (void)mb1, (void)n0, (void)n1;
}
#endif

#endif
