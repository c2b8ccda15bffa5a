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
 * Tiles: float32 4 weight rows x 2 activation rows (8 chains: the one-row
 * kernel's 4 chains wait on FMA latency); bf16 2 x 2 (8 chains of e and o
 * pairs, 16 accumulators would spill AVX2's registers), an odd last row 4 x 1
 * as the one-row kernel runs it. The weight tile is taken from the four
 * quarters of the range, as the one-row kernels read it (four far-apart DRAM
 * streams). A batch of one row calls the one-row kernels (the Cython caller).
 */
#ifndef ONESPEECH_BATCH_GEMV_IMPL_H
#define ONESPEECH_BATCH_GEMV_IMPL_H

#include "_kernels_impl.h"

/* four float32 weight rows against two activation rows: os_dot_f32_r4p's
 * chains for x0 into s0 and for x1 into s1 */
static inline void os_bdot_f32_r4x2(const float *x0, const float *x1, const float *w0, const float *w1,
                                    const float *w2, const float *w3, os_idx K, float *s0, float *s1) {
    vf a0 = os_splat(0), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    os_idx k = 0;
    for (; k + OS_LANES <= K; k += OS_LANES) {
        vf xv = os_load_f32(x0 + k);
        vf yv = os_load_f32(x1 + k);
        vf v0 = os_load_f32(w0 + k), v1 = os_load_f32(w1 + k);
        vf v2 = os_load_f32(w2 + k), v3 = os_load_f32(w3 + k);
        a0 += xv * v0;
        a1 += xv * v1;
        a2 += xv * v2;
        a3 += xv * v3;
        b0 += yv * v0;
        b1 += yv * v1;
        b2 += yv * v2;
        b3 += yv * v3;
    }
    s0[0] = os_hsum(a0); s0[1] = os_hsum(a1); s0[2] = os_hsum(a2); s0[3] = os_hsum(a3);
    s1[0] = os_hsum(b0); s1[1] = os_hsum(b1); s1[2] = os_hsum(b2); s1[3] = os_hsum(b3);
    for (; k < K; k++) {
        OS_TAIL_MADD(s0[0], x0[k], w0[k]); OS_TAIL_MADD(s0[1], x0[k], w1[k]);
        OS_TAIL_MADD(s0[2], x0[k], w2[k]); OS_TAIL_MADD(s0[3], x0[k], w3[k]);
        OS_TAIL_MADD(s1[0], x1[k], w0[k]); OS_TAIL_MADD(s1[1], x1[k], w1[k]);
        OS_TAIL_MADD(s1[2], x1[k], w2[k]); OS_TAIL_MADD(s1[3], x1[k], w3[k]);
    }
}

/* y[b * ldy + n] = x[b * ldx :] . W[n] (+ bias[n]) for b < B and n in [n0, n1),
 * all rows below N - N % 4: os_gemv_f32_rows for every activation row */
static void os_bgemv_f32_rows(const float *x, os_idx ldx, os_idx B, const float *W, os_idx K,
                              const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1) {
    const os_idx q = (n1 - n0) / 4;
    float s[4], t[4];
    for (os_idx n = n0; n < n0 + q; n++) {
        const float *w0 = W + n * K, *w1 = w0 + q * K, *w2 = w1 + q * K, *w3 = w2 + q * K;
        os_idx b = 0;
        for (; b + 2 <= B; b += 2) {
            os_bdot_f32_r4x2(x + b * ldx, x + (b + 1) * ldx, w0, w1, w2, w3, K, s, t);
            for (int j = 0; j < 4; j++) {
                y[b * ldy + n + j * q] = s[j] + (bias ? bias[n + j * q] : 0.0f);
                y[(b + 1) * ldy + n + j * q] = t[j] + (bias ? bias[n + j * q] : 0.0f);
            }
        }
        for (; b < B; b++) {
            os_dot_f32_r4p(x + b * ldx, w0, w1, w2, w3, K, s);
            for (int j = 0; j < 4; j++) y[b * ldy + n + j * q] = s[j] + (bias ? bias[n + j * q] : 0.0f);
        }
    }
    for (os_idx n = n0 + 4 * q; n < n1; n++) {
        const float *w = W + n * K;
        for (os_idx b = 0; b < B; b++) {
            os_dot_f32_r4p(x + b * ldx, w, w, w, w, K, s);
            y[b * ldy + n] = s[0] + (bias ? bias[n] : 0.0f);
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

/* two bf16 weight rows (a, c) against two pair-permuted activation rows (p0, p1),
 * each output's e and o chains as in os_gemv_bf16_rows */
static inline __attribute__((always_inline)) void os_bdot_bf16_r2x2(
    const float *x0, const float *p0, const float *x1, const float *p1, const uint16_t *a, const uint16_t *c,
    os_idx K, const float *bias, os_idx na, os_idx nc, float *y0, float *y1, int prefetch_next) {
    const vu hi = (vu){0} + 0xFFFF0000u;
    const os_idx kk = K - K % OS_PAIR;
    vf ae = os_splat(0), ao = ae, ce = ae, co = ae, be = ae, bo = ae, de = ae, dd = ae;
    for (os_idx k = 0; k < kk; k += OS_PAIR) {
        if (prefetch_next) { /* the rows after a and c (their quarters' next), one line each per step */
            __builtin_prefetch(a + K + k, 0, 3);
            __builtin_prefetch(c + K + k, 0, 3);
        }
        vu ua, uc;
        memcpy(&ua, a + k, sizeof ua);
        memcpy(&uc, c + k, sizeof uc);
        vf fae = os_bits_to_f32(ua << 16), fao = os_bits_to_f32(ua & hi);
        vf fce = os_bits_to_f32(uc << 16), fco = os_bits_to_f32(uc & hi);
        vf e0 = os_load_f32(p0 + k), o0 = os_load_f32(p0 + k + OS_LANES);
        vf e1 = os_load_f32(p1 + k), o1 = os_load_f32(p1 + k + OS_LANES);
        ae += e0 * fae;
        ao += o0 * fao;
        ce += e0 * fce;
        co += o0 * fco;
        be += e1 * fae;
        bo += o1 * fao;
        de += e1 * fce;
        dd += o1 * fco;
    }
    y0[na] = os_pair_finish(ae, ao, x0, a, kk, K, bias, na);
    y0[nc] = os_pair_finish(ce, co, x0, c, kk, K, bias, nc);
    y1[na] = os_pair_finish(be, bo, x1, a, kk, K, bias, na);
    y1[nc] = os_pair_finish(de, dd, x1, c, kk, K, bias, nc);
}

/* one bf16 weight row against one activation row: os_gemv_bf16_rows's arithmetic */
static inline float os_bdot_bf16_1(const float *x, const float *xp, const uint16_t *a, os_idx K,
                                   const float *bias, os_idx n) {
    const vu hi = (vu){0} + 0xFFFF0000u;
    const os_idx kk = K - K % OS_PAIR;
    vf ae = os_splat(0), ao = ae;
    for (os_idx k = 0; k < kk; k += OS_PAIR) OS_PAIR_STEP(ae, ao, xp, a, k, hi);
    return os_pair_finish(ae, ao, x, a, kk, K, bias, n);
}

/* one pair-permuted activation row against four bf16 weight rows r[i] (outputs
 * m[i]): os_gemv_bf16_rows's loop body, its eight chains in flight */
static inline void os_bdot_bf16_r4x1(const float *x, const float *xp, const uint16_t *const *r,
                                     const os_idx *m, os_idx K, const float *bias, float *y) {
    const vu hi = (vu){0} + 0xFFFF0000u;
    const os_idx kk = K - K % OS_PAIR;
    const uint16_t *a = r[0], *b = r[1], *c = r[2], *d = r[3];
    vf ae = os_splat(0), ao = ae, be = ae, bo = ae, ce = ae, co = ae, de = ae, dd = ae;
    for (os_idx k = 0; k < kk; k += OS_PAIR) {
        OS_PAIR_STEP(ae, ao, xp, a, k, hi);
        OS_PAIR_STEP(be, bo, xp, b, k, hi);
        OS_PAIR_STEP(ce, co, xp, c, k, hi);
        OS_PAIR_STEP(de, dd, xp, d, k, hi);
    }
    y[m[0]] = os_pair_finish(ae, ao, x, a, kk, K, bias, m[0]);
    y[m[1]] = os_pair_finish(be, bo, x, b, kk, K, bias, m[1]);
    y[m[2]] = os_pair_finish(ce, co, x, c, kk, K, bias, m[2]);
    y[m[3]] = os_pair_finish(de, dd, x, d, kk, K, bias, m[3]);
}

/* y[b * ldy + n] = x[b * ldx :] . bf16(W[n]) (+ bias[n]) for b < B and n in [n0, n1);
 * xp holds every activation row pair-permuted (os_pair_permute), ldx apart */
static void os_bgemv_bf16_rows(const float *x, const float *xp, os_idx ldx, os_idx B, const uint16_t *W,
                               os_idx K, const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1) {
    const os_idx q = (n1 - n0) / 4;
    for (os_idx n = n0; n < n0 + q; n++) {
        const uint16_t *r[4] = {W + n * K, W + (n + q) * K, W + (n + 2 * q) * K, W + (n + 3 * q) * K};
        os_idx m[4] = {n, n + q, n + 2 * q, n + 3 * q};
        /* the quarters' next rows are asked for while the first activation pair is summed,
           a line per row per step as the one-row kernel streams (a burst of a whole row's
           lines fills the miss buffers and stalls); later pairs find these rows in cache */
        for (int pair = 0; pair < 4; pair += 2) {
            if (B >= 2)
                os_bdot_bf16_r2x2(x, xp, x + ldx, xp + ldx, r[pair], r[pair + 1], K, bias, m[pair], m[pair + 1], y,
                                  y + ldy, 1);
            for (os_idx b = 2; b + 2 <= B; b += 2)
                os_bdot_bf16_r2x2(x + b * ldx, xp + b * ldx, x + (b + 1) * ldx, xp + (b + 1) * ldx, r[pair],
                                  r[pair + 1], K, bias, m[pair], m[pair + 1], y + b * ldy, y + (b + 1) * ldy, 0);
        }
        if (B % 2) /* the odd row: the one-row kernel's four rows at once */
            os_bdot_bf16_r4x1(x + (B - 1) * ldx, xp + (B - 1) * ldx, r, m, K, bias, y + (B - 1) * ldy);
    }
    for (os_idx n = n0 + 4 * q; n < n1; n++)
        for (os_idx b = 0; b < B; b++)
            y[b * ldy + n] = os_bdot_bf16_1(x + b * ldx, xp + b * ldx, W + n * K, K, bias, n);
}

#endif
