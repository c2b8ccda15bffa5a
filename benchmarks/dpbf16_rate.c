/* Issue rate of VDPBF16PS against a float32 FMA on this core (AVX512_BF16 CPUs).
 *
 * Twelve independent accumulators per loop (more than either instruction's
 * latency), registers only, so the time per instruction is its throughput.
 * One VDPBF16PS does 32 multiply-adds, one 512-bit FMA 16: VDPBF16PS beats
 * float32 per flop only where its time per instruction is under twice the FMA's.
 *
 *   gcc -O2 -mavx512f -mavx512bw -mavx512bf16 -o dpbf16_rate benchmarks/dpbf16_rate.c && ./dpbf16_rate
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define N_ACC 12
#define STEPS 200000000L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(void) {
    __m512 acc[N_ACC];
    __m512i a = _mm512_set1_epi16(0x3f80), b = _mm512_set1_epi16(0x3f80); /* bf16 1.0 */
    __m512 fa = _mm512_set1_ps(1e-8f), fb = _mm512_set1_ps(1.0f);
    float sink = 0.0f;

    for (int j = 0; j < N_ACC; j++) acc[j] = _mm512_setzero_ps();
    double t = now();
    for (long i = 0; i < STEPS; i++)
#pragma GCC unroll 12
        for (int j = 0; j < N_ACC; j++) acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)a, (__m512bh)b);
    double dp = now() - t;
    for (int j = 0; j < N_ACC; j++) sink += _mm512_reduce_add_ps(acc[j]);

    for (int j = 0; j < N_ACC; j++) acc[j] = _mm512_setzero_ps();
    t = now();
    for (long i = 0; i < STEPS; i++)
#pragma GCC unroll 12
        for (int j = 0; j < N_ACC; j++) acc[j] = _mm512_fmadd_ps(fa, fb, acc[j]);
    double fma = now() - t;
    for (int j = 0; j < N_ACC; j++) sink += _mm512_reduce_add_ps(acc[j]);

    double per = 1e9 / ((double)STEPS * N_ACC);
    printf("VDPBF16PS %.3f ns per instruction, FMA %.3f ns: per flop VDPBF16PS runs at %.2fx the FMA rate"
           " (sink %g)\n", dp * per, fma * per, 2.0 * fma / dp, sink);
    return 0;
}
