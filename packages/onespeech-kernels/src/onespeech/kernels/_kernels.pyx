# Compiled kernels: Cython entry points over the C loops in _kernels_impl.h.
#
# The build hook copies this file to _kernels_<variant>.pyx and compiles each
# copy with its ISA flags (generic, avx2, avx512); cpu.py imports the best one
# the CPU runs. Each `def` takes preallocated C-contiguous buffers already
# checked by ops.py, splits rows into per-thread chunks and runs the C worker
# under `prange` without the GIL. Arguments are marked IN / OUT.

from cython.parallel cimport prange, threadid
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

cdef extern from "_kernels_impl.h" nogil:
    const char *OS_VARIANT
    int OS_LANES
    int OS_OPENMP
    ctypedef Py_ssize_t os_idx
    void os_bf16_to_f32(const unsigned short *inp, float *out, os_idx n)
    void os_f32_to_bf16(const float *inp, unsigned short *out, os_idx n)
    void os_round_bf16(const float *inp, float *out, os_idx n)
    void os_dot_bf16_rows(const float *x, os_idx M, const unsigned short *W, os_idx K,
                          const float *bias, float *y, os_idx N, os_idx n0, os_idx n1)
    void os_dot_f32_rows(const float *x, os_idx M, const float *W, os_idx K,
                         const float *bias, float *y, os_idx N, os_idx n0, os_idx n1)
    float os_stream_sum(const float *a, os_idx n)
    int OS_PAIR_GEMV
    void os_pair_permute(const float *x, float *xp, os_idx K)
    void os_gemv_f32_rows(const float *x, const float *W, os_idx K, const float *bias, float *y,
                          os_idx n0, os_idx n1)
    void os_gemv_bf16_rows(const float *x, const float *xp, const unsigned short *W, os_idx K,
                           const float *bias, float *y, os_idx n0, os_idx n1)
    void os_rms_norm_row(const float *x, const float *w, float eps, float *y, os_idx D)
    void os_layer_norm_row(const float *x, const float *w, const float *b, float eps, float *y, os_idx D)
    void os_im2col_3x3s2_row(const float *x, os_idx H, os_idx W, os_idx C, os_idx i, os_idx Wo,
                             float *cols)
    void os_conv3x3s2_c1_row(const float *x, os_idx H, os_idx W, const float *wt, const float *bias, os_idx Co,
                             os_idx i, os_idx Wo, float *y, int to_bf16)
    void os_rope_token(const float *x, const float *c, const float *s, float *y,
                       os_idx n_heads, os_idx hd)
    void os_swiglu(const float *g, const float *u, float *y, os_idx n)
    void os_silu(const float *x, float *y, os_idx n)
    void os_gelu(const float *x, float *y, os_idx n)
    void os_attention_heads(const float *q, const float *k, const float *v, os_idx kv_stride,
                            os_idx n_keys, os_idx hd, os_idx group, os_idx g0, os_idx g1,
                            float scale, float *scores, float *out)
    void os_attention_heads_bf16kv(const float *q, const unsigned short *k, const unsigned short *v,
                                   os_idx kv_stride, os_idx n_keys, os_idx hd, os_idx group, os_idx g0,
                                   os_idx g1, float scale, float *scores, float *out)
    int OS_AT_MR
    int OS_AT_NR
    void os_attn_pack(const float *k, const float *v, os_idx n_kv, os_idx n_kv_heads, os_idx hd,
                      os_idx g, os_idx j0, os_idx j1, float *kp, float *vp)
    void os_attn_block(const float *q, float *out, os_idx n_heads, os_idx hd, os_idx group, os_idx g,
                       os_idx i0, os_idx i1, const float *kp, const float *vp, os_idx n_kv,
                       os_idx causal, float scale, float *s, os_idx ld, const float *zero,
                       float *dummy, os_idx kc)

cdef extern from "_gemm_impl.h" nogil:
    int OS_GM_MR
    int OS_GM_NR
    void os_gemm_f32_nt(const float *x, const float *w, const float *bias, float *y,
                        os_idx N, os_idx K, os_idx m0, os_idx m1, os_idx n0, os_idx n1, os_idx kc)
    void os_gemm_bf16w_nt(const float *x, const unsigned short *w, const float *bias, float *y,
                          os_idx N, os_idx K, os_idx m0, os_idx m1, os_idx n0, os_idx n1, os_idx kc,
                          float *buf)

cdef extern from "_bf16dp_impl.h" nogil:
    int OS_BF16DP_NATIVE
    int OS_DP_STEP
    void os_gemm_bf16dp(const unsigned short *x, os_idx ldx, const unsigned short *w, const float *bias,
                        float *y, os_idx N, os_idx K, os_idx m0, os_idx m1, os_idx n0, os_idx n1)
    void os_gemm_bf16dp_portable(const unsigned short *x, os_idx ldx, const unsigned short *w,
                                 const float *bias, float *y, os_idx N, os_idx K, os_idx m0, os_idx m1,
                                 os_idx n0, os_idx n1)
    int os_dp_pack_conv_row(const float *x, os_idx H, os_idx W, os_idx C, os_idx i, os_idx Wo,
                            unsigned short *xp, os_idx ldx)

cdef extern from "_bf16amx_impl.h" nogil:
    int OS_AMX_NATIVE
    int OS_AMX_STEP
    int OS_AMX_BLOCK
    int os_amx_request()
    int os_amx_pack_x(const float *x, os_idx M, os_idx K, unsigned short *xt, os_idx mb0, os_idx mb1)
    int os_amx_pack_conv_x(const float *x, os_idx n, os_idx H, os_idx W, os_idx C, unsigned short *xt,
                           os_idx mb0, os_idx mb1)
    void os_gemm_bf16amx(const unsigned short *xt, const unsigned short *w, const float *bias, float *y,
                         os_idx M, os_idx N, os_idx K, os_idx group, os_idx t0, os_idx t1, unsigned short *wp)
    void os_gemm_bf16amx_portable(const unsigned short *x, os_idx ldx, const unsigned short *w,
                                  const float *bias, float *y, os_idx N, os_idx K, os_idx m0, os_idx m1,
                                  os_idx n0, os_idx n1)

cdef extern from "_int8_impl.h" nogil:
    const char *OS_I8_PATH
    int OS_I8_MAX_K
    void os_i8_quantize_rows(const float *x, os_idx K, os_idx m0, os_idx m1, signed char *q, float *scale)
    void os_i8_gemv_rows(const signed char *q, float sx, const signed char *w, const float *sw, os_idx K,
                         const float *bias, float *y, os_idx n0, os_idx n1)
    void os_i8_gemm_rows(const signed char *q, const float *sx, const signed char *w, const float *sw, os_idx K,
                         const float *bias, float *y, os_idx N, os_idx m0, os_idx m1, os_idx n0, os_idx n1)
    void os_i8_bgemv_rows(const signed char *q, const float *sx, os_idx B, const signed char *w, const float *sw,
                          os_idx K, const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1)
    int OS_I8_PANEL
    int OS_I8_NR
    os_idx os_i8_kp(os_idx K)
    os_idx os_i8_panel_bytes(os_idx K)
    void os_i8_offset_rows(const signed char *q, os_idx K, os_idx m0, os_idx m1, unsigned char *xu)
    void os_i8_gemm_panels(const unsigned char *xu, const float *sx, os_idx M, const signed char *w,
                           const float *sw, os_idx K, const float *bias, float *y, os_idx N, os_idx p0, os_idx p1,
                           signed char *panel)

VARIANT = OS_VARIANT.decode()
# gemm_bf16dp runs AVX512_BF16's VDPBF16PS (else the portable definition of its arithmetic)
BF16DP_NATIVE = bool(OS_BF16DP_NATIVE)
# gemm_bf16amx runs AMX tiles where this build has them and the OS grants this
# process the tile state (asked once, here), else the portable definition
AMX_NATIVE = bool(os_amx_request())
# whether this process can run every instruction this build relies on (cpu.py
# chooses a build only if so): the amx build only where the tile state was granted
RUNNABLE = AMX_NATIVE or not OS_AMX_NATIVE
GEMM_TILE = (OS_GM_MR, OS_GM_NR)
# the int8 dot products' instructions (avx512vnni, avx512bw, avx2 or scalar) and the largest K they take
INT8_PATH = OS_I8_PATH.decode()
INT8_MAX_K = OS_I8_MAX_K
LANES = OS_LANES
OPENMP = bool(OS_OPENMP)

cdef enum:
    # element-wise work is split into chunks of this many values (64 KiB of
    # float32): big enough to amortise scheduling, small enough to balance
    CHUNK = 16384
    # weight rows per parallel task of the matrix kernels
    ROW_BLOCK = 16


cdef inline os_idx _threads_for(os_idx n_tasks, int n_threads) noexcept nogil:
    if n_tasks < 1:
        return 1
    return n_threads if n_threads < n_tasks else n_tasks


def parallel_threads(int n_threads):
    """How many distinct OpenMP threads a `prange` with ``n_threads`` really runs (1 without OpenMP)."""
    cdef int seen[256]
    cdef Py_ssize_t t, n_tasks = 4 * max(1, min(n_threads, 256))
    cdef int nt = max(1, min(n_threads, 256))
    for t in range(256):
        seen[t] = 0
    for t in prange(n_tasks, nogil=True, schedule="static", num_threads=nt):
        seen[threadid()] = 1
    return sum([seen[t] for t in range(256)])


# ---- bfloat16 conversions (flat arrays) --------------------------------------

def bf16_to_f32(const unsigned short[::1] inp,  # IN
                float[::1] out,                  # OUT
                int n_threads):
    """out = float32(inp) exactly (inp holds bfloat16 bits)."""
    cdef os_idx n = inp.shape[0], c, n_chunks = (n + CHUNK - 1) // CHUNK
    cdef int nt = _threads_for(n_chunks, n_threads)
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=nt):
        os_bf16_to_f32(&inp[c * CHUNK], &out[c * CHUNK], min(CHUNK, n - c * CHUNK))


def f32_to_bf16(const float[::1] inp,     # IN
                unsigned short[::1] out,  # OUT
                int n_threads):
    """out = nearest-even bfloat16 bits of inp (NaN -> 0x7FC0)."""
    cdef os_idx n = inp.shape[0], c, n_chunks = (n + CHUNK - 1) // CHUNK
    cdef int nt = _threads_for(n_chunks, n_threads)
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=nt):
        os_f32_to_bf16(&inp[c * CHUNK], &out[c * CHUNK], min(CHUNK, n - c * CHUNK))


def round_bf16(const float[::1] inp,  # IN
               float[::1] out,        # OUT (may be inp's buffer)
               int n_threads):
    """out = float32(bfloat16_rne(inp))."""
    cdef os_idx n = inp.shape[0], c, n_chunks = (n + CHUNK - 1) // CHUNK
    cdef int nt = _threads_for(n_chunks, n_threads)
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=nt):
        os_round_bf16(&inp[c * CHUNK], &out[c * CHUNK], min(CHUNK, n - c * CHUNK))


# ---- matrix products -----------------------------------------------------------

cdef inline void _round_columns(float *y, os_idx M, os_idx N, os_idx n0, os_idx n1) noexcept nogil:
    """Columns [n0, n1) of every row of y (M, N) rounded to bfloat16 values: a
    task's own outputs, rounded while still in its cache (BF16 activations)."""
    cdef os_idx m
    for m in range(M):
        os_round_bf16(y + m * N + n0, y + m * N + n0, n1 - n0)

def linear_bf16(const float[:, ::1] x,            # IN  (M, K)
                const unsigned short[:, ::1] w,   # IN  (N, K) bfloat16 bits
                const float[::1] bias,            # IN  (N,) or None
                float[:, ::1] y,                  # OUT (M, N)
                int n_threads,
                bint to_bf16=False):
    """y = x @ bf16(w).T + bias, float32 accumulation; weights read once per call.

    to_bf16: y rounded to bfloat16 values, by each task over its own outputs.
    """
    cdef os_idx M = x.shape[0], K = x.shape[1], N = w.shape[0]
    cdef os_idx b, n_blocks = (N + ROW_BLOCK - 1) // ROW_BLOCK
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef int nt = _threads_for(n_blocks, n_threads)
    cdef float *xp
    cdef os_idx t
    if M == 0 or N == 0:
        return
    if M == 1 and OS_PAIR_GEMV:
        # decode: the activation row permuted once, weights read as bf16 pairs,
        # one contiguous share of the rows per thread (long DRAM streams)
        xp = <float *> malloc(max(1, K) * sizeof(float))
        if xp == NULL:
            raise MemoryError(f"bf16 GEMV needs {K} float32 of scratch")
        try:
            os_pair_permute(&x[0, 0], xp, K)
            for t in prange(nt, nogil=True, schedule="static", num_threads=nt):
                os_gemv_bf16_rows(&x[0, 0], xp, &w[0, 0], K, bp, &y[0, 0], N * t // nt, N * (t + 1) // nt)
                if to_bf16:
                    _round_columns(&y[0, 0], 1, N, N * t // nt, N * (t + 1) // nt)
        finally:
            free(xp)
        return
    for b in prange(n_blocks, nogil=True, schedule="static", num_threads=nt):
        os_dot_bf16_rows(&x[0, 0], M, &w[0, 0], K, bp, &y[0, 0], N,
                         b * ROW_BLOCK, min(N, (b + 1) * ROW_BLOCK))
        if to_bf16:
            _round_columns(&y[0, 0], M, N, b * ROW_BLOCK, min(N, (b + 1) * ROW_BLOCK))


def linear_f32(const float[:, ::1] x,    # IN  (M, K)
               const float[:, ::1] w,    # IN  (N, K)
               const float[::1] bias,    # IN  (N,) or None
               float[:, ::1] y,          # OUT (M, N)
               int n_threads,
               bint to_bf16=False):
    """y = x @ w.T + bias for small M (decode), float32 accumulation; to_bf16 as in linear_bf16."""
    cdef os_idx M = x.shape[0], K = x.shape[1], N = w.shape[0]
    cdef os_idx b, n_blocks = (N + ROW_BLOCK - 1) // ROW_BLOCK
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef int nt = _threads_for(n_blocks, n_threads)
    cdef os_idx n4 = N - N % 4, t
    if M == 0 or N == 0:
        return
    if M == 1:
        # decode: one contiguous share of the rows per thread as four far-apart
        # streams; the last N % 4 rows as os_dot_f32_rows sums them
        for t in prange(nt, nogil=True, schedule="static", num_threads=nt):
            os_gemv_f32_rows(&x[0, 0], &w[0, 0], K, bp, &y[0, 0], n4 * t // nt, n4 * (t + 1) // nt)
            if to_bf16:
                _round_columns(&y[0, 0], 1, N, n4 * t // nt, n4 * (t + 1) // nt)
        if n4 < N:
            os_dot_f32_rows(&x[0, 0], 1, &w[0, 0], K, bp, &y[0, 0], N, n4, N)
            if to_bf16:
                _round_columns(&y[0, 0], 1, N, n4, N)
        return
    for b in prange(n_blocks, nogil=True, schedule="static", num_threads=nt):
        os_dot_f32_rows(&x[0, 0], M, &w[0, 0], K, bp, &y[0, 0], N,
                        b * ROW_BLOCK, min(N, (b + 1) * ROW_BLOCK))
        if to_bf16:
            _round_columns(&y[0, 0], M, N, b * ROW_BLOCK, min(N, (b + 1) * ROW_BLOCK))


cdef enum:
    MAX_MANY = 8


cdef void _gemv_bf16_span(const float *x, const float *xp, const unsigned short **ws, float **ys,
                          const os_idx *rows, int n, os_idx K, os_idx r0, os_idx r1,
                          bint to_bf16) noexcept nogil:
    """Rows [r0, r1) of the matrices ws[0..n) taken one after another."""
    cdef os_idx start = 0, a, b
    cdef int j
    for j in range(n):
        a = max(r0, start)
        b = min(r1, start + rows[j])
        if a < b:
            os_gemv_bf16_rows(x, xp, ws[j], K, NULL, ys[j], a - start, b - start)
            if to_bf16:
                _round_columns(ys[j], 1, rows[j], a - start, b - start)
        start += rows[j]


cdef void _gemv_f32_span(const float *x, const float **ws, float **ys, const os_idx *rows, int n, os_idx K,
                         os_idx r0, os_idx r1, bint to_bf16) noexcept nogil:
    """Rows [r0, r1) of the float32 matrices ws[0..n) taken one after another, as linear_f32 sums them."""
    cdef os_idx start = 0, a, b, n4
    cdef int j
    for j in range(n):
        a = max(r0, start) - start
        b = min(r1, start + rows[j]) - start
        n4 = rows[j] - rows[j] % 4
        if a < min(b, n4):
            os_gemv_f32_rows(x, ws[j], K, NULL, ys[j], a, min(b, n4))
        if max(a, n4) < b:
            os_dot_f32_rows(x, 1, ws[j], K, NULL, ys[j], rows[j], max(a, n4), b)
        if to_bf16 and a < b:
            _round_columns(ys[j], 1, rows[j], a, b)
        start += rows[j]


cdef int _gemv_many(const float *x, const void **ws, bint bf16, float **ys, const os_idx *rows,
                    int n, os_idx K, int n_threads, bint to_bf16) noexcept nogil:
    """ys[j] = x @ ws[j].T for one activation row x of K values and n <= MAX_MANY
    matrices of rows[j] rows, in one parallel region; -1 if scratch could not
    be allocated. Each thread takes one contiguous share of all the rows, as
    linear_f32 and linear_bf16 do (bf16 without the pair kernel: ROW_BLOCK
    blocks). Every
    output is summed exactly as there. to_bf16 as in linear_bf16."""
    cdef os_idx first[MAX_MANY + 1]
    cdef os_idx b, n0, n1, t, total = 0
    cdef int i, j, nt
    cdef float *xp
    first[0] = 0
    for i in range(n):
        first[i + 1] = first[i] + (rows[i] + ROW_BLOCK - 1) // ROW_BLOCK
        total += rows[i]
    nt = _threads_for(first[n], n_threads)
    if bf16 and OS_PAIR_GEMV:
        xp = <float *> malloc(max(1, K) * sizeof(float))
        if xp == NULL:
            return -1
        os_pair_permute(x, xp, K)
        # each thread one contiguous share of all the matrices' rows, as in
        # linear_bf16 (row sums do not depend on the split)
        for t in prange(nt, schedule="static", num_threads=nt):
            _gemv_bf16_span(x, xp, <const unsigned short **> ws, ys, rows, n, K, total * t // nt,
                            total * (t + 1) // nt, to_bf16)
        free(xp)
        return 0
    if not bf16:
        # each thread one contiguous share of all the matrices' rows, as in linear_f32
        for t in prange(nt, schedule="static", num_threads=nt):
            _gemv_f32_span(x, <const float **> ws, ys, rows, n, K, total * t // nt, total * (t + 1) // nt,
                           to_bf16)
        return 0
    for b in prange(first[n], schedule="static", num_threads=nt):
        j = 0
        while first[j + 1] <= b:
            j = j + 1
        n0 = (b - first[j]) * ROW_BLOCK
        n1 = min(rows[j], n0 + ROW_BLOCK)
        os_dot_bf16_rows(x, 1, <const unsigned short *> ws[j], K, NULL, ys[j], rows[j], n0, n1)
        if to_bf16:
            _round_columns(ys[j], 1, rows[j], n0, n1)
    return 0


cdef const void *_matrix_data(object w, os_idx *rows, os_idx *cols) except NULL:
    """Address, rows and columns of a C-contiguous float32 or bf16 (uint16) matrix."""
    cdef const float[:, ::1] wf
    cdef const unsigned short[:, ::1] wb
    if w.dtype.itemsize == 2:
        wb = w
        rows[0], cols[0] = wb.shape[0], wb.shape[1]
        return &wb[0, 0]
    wf = w
    rows[0], cols[0] = wf.shape[0], wf.shape[1]
    return &wf[0, 0]


def linear_many(const float[:, ::1] x,  # IN  (1, K)
                tuple ws,               # IN  up to 8 weights (N_i, K), all float32 or all bf16 bits
                tuple ys,               # OUT (1, N_i) each
                int n_threads,
                bint to_bf16=False):
    """ys[i] = x @ ws[i].T for one activation row, in one parallel region.

    Decode multiplies one row by several matrices that share it (q/k/v,
    gate/up); one region over all their rows saves a fork/join per matrix and,
    for bf16, permutes the row once (see _gemv_many).
    """
    cdef const void *wp[MAX_MANY]
    cdef float *yp[MAX_MANY]
    cdef float[:, ::1] yv
    cdef os_idx rows[MAX_MANY]
    cdef os_idx cols
    cdef int i, n = len(ws), rc
    cdef bint bf16 = n > 0 and ws[0].dtype.itemsize == 2
    if n != len(ys) or not 0 < n <= MAX_MANY:
        raise ValueError(f"linear_many takes 1..{MAX_MANY} weights and as many outputs")
    for i in range(n):
        wp[i] = _matrix_data(ws[i], &rows[i], &cols)
        yv = ys[i]
        yp[i] = &yv[0, 0]
    with nogil:
        rc = _gemv_many(&x[0, 0], wp, bf16, yp, rows, n, x.shape[1], n_threads, to_bf16)
    if rc:
        raise MemoryError(f"bf16 GEMV needs {x.shape[1]} float32 of scratch")


cdef inline os_idx _round_up(os_idx a, os_idx step) noexcept nogil:
    return (max(1, a) + step - 1) // step * step


def gemm_f32(const float[:, ::1] x,    # IN  (M, K)
             const float[:, ::1] w,    # IN  (N, K)
             const float[::1] bias,    # IN  (N,) or None
             float[:, ::1] y,          # OUT (M, N)
             Py_ssize_t mb,            # x rows per task (rounded up to the tile)
             Py_ssize_t nb,            # w rows per task (rounded up to the tile)
             Py_ssize_t kc,            # K block (rounded up to the vector width)
             int n_threads):
    """y = x @ w.T + bias, float32, no packing; tasks are (mb rows of x, nb rows of w)."""
    cdef os_idx M = x.shape[0], K = x.shape[1], N = w.shape[0]
    cdef os_idx t, n_mb, n_nb, m0, n0
    cdef const float *bp = &bias[0] if bias is not None else NULL
    if M == 0 or N == 0:
        return
    mb, nb, kc = _round_up(mb, OS_GM_MR), _round_up(nb, OS_GM_NR), _round_up(kc, OS_LANES)
    n_mb, n_nb = (M + mb - 1) // mb, (N + nb - 1) // nb
    # band-major: both threads work on neighbouring bands of w at a time
    for t in prange(n_mb * n_nb, nogil=True, schedule="dynamic",
                    num_threads=_threads_for(n_mb * n_nb, n_threads)):
        m0 = (t % n_mb) * mb
        n0 = (t // n_mb) * nb
        os_gemm_f32_nt(&x[0, 0], &w[0, 0], bp, &y[0, 0], N, K, m0, min(M, m0 + mb),
                       n0, min(N, n0 + nb), kc)


def gemm_bf16w(const float[:, ::1] x,             # IN  (M, K)
               const unsigned short[:, ::1] w,    # IN  (N, K) bfloat16 bits
               const float[::1] bias,             # IN  (N,) or None
               float[:, ::1] y,                   # OUT (M, N)
               Py_ssize_t mb,                     # x rows per task (rounded up to the tile)
               Py_ssize_t nb,                     # w rows per task (rounded up to the tile)
               Py_ssize_t kc,                     # K block (rounded up to the vector width)
               int n_threads):
    """`gemm_f32` on float32(w), bit for bit, widening one band of w per task and K block."""
    cdef os_idx M = x.shape[0], K = x.shape[1], N = w.shape[0]
    cdef os_idx t, n_mb, n_nb, m0, n0
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef float *buf
    cdef int nt
    if M == 0 or N == 0:
        return
    mb, nb, kc = _round_up(mb, OS_GM_MR), _round_up(nb, OS_GM_NR), _round_up(kc, OS_LANES)
    n_mb, n_nb = (M + mb - 1) // mb, (N + nb - 1) // nb
    nt = _threads_for(n_mb * n_nb, n_threads)
    buf = <float *>malloc(nt * nb * kc * sizeof(float))  # one band per thread
    if buf == NULL:
        raise MemoryError(f"the bf16 GEMM needs {nt * nb * kc} float32 of scratch")
    try:
        # band-major: both threads work on neighbouring bands of w at a time
        for t in prange(n_mb * n_nb, nogil=True, schedule="dynamic", num_threads=nt):
            m0 = (t % n_mb) * mb
            n0 = (t // n_mb) * nb
            os_gemm_bf16w_nt(&x[0, 0], &w[0, 0], bp, &y[0, 0], N, K, m0, min(M, m0 + mb),
                             n0, min(N, n0 + nb), kc, buf + threadid() * nb * kc)
    finally:
        free(buf)


cdef int _bf16_rows(const float[:, ::1] x, unsigned short *xp, os_idx ldx, int n_threads) noexcept nogil:
    """x's bfloat16 bits into rows of ldx values, zeros from K on; 1 if some value of x is not a bfloat16 value."""
    cdef os_idx M = x.shape[0], K = x.shape[1], m, k
    cdef const unsigned int *xb = <const unsigned int *>&x[0, 0]
    cdef unsigned int bits
    cdef int inexact = 0
    for m in prange(M, schedule="static", num_threads=_threads_for(M, n_threads)):
        for k in range(K):
            bits = xb[m * K + k]
            inexact |= (bits & 0xFFFF) != 0
            xp[m * ldx + k] = <unsigned short>(bits >> 16)
        for k in range(K, ldx):
            xp[m * ldx + k] = 0
    return inexact


cdef enum:
    # scratch is used from its first 64-byte boundary: a tile row or vector
    # read across two cache lines costs two (numpy's arrays start 16 bytes past
    # one; the products ran 25-30 % slower at encoder and prefill shapes)
    SCRATCH_SLACK = 32


cdef inline unsigned short *_aligned64(unsigned short[::1] scratch) noexcept nogil:
    cdef size_t address = <size_t>&scratch[0]
    return &scratch[0] + ((64 - address % 64) % 64) // 2


def bf16dp_scratch_size(Py_ssize_t M, Py_ssize_t K):
    """uint16 values of scratch `gemm_bf16dp` needs: x (M, K) as bf16 rows padded to whole 32-value steps."""
    return M * _round_up(K, OS_DP_STEP) + SCRATCH_SLACK


def gemm_bf16dp(const float[:, ::1] x,           # IN  (M, K), every value a bfloat16 value
                const unsigned short[:, ::1] w,  # IN  (N, K) bfloat16 bits
                const float[::1] bias,           # IN  (N,) or None
                float[:, ::1] y,                 # OUT (M, N)
                unsigned short[::1] scratch,     # SCRATCH bf16dp_scratch_size(M, K) values
                Py_ssize_t mb,                   # x rows per task
                Py_ssize_t nb,                   # w rows per task
                int n_threads,
                bint portable=False,
                bint to_bf16=False):
    """y = x @ w.T + bias in VDPBF16PS's arithmetic (_bf16dp_impl.h), x and w bfloat16 values.

    x is packed to bfloat16 bits first, into ``scratch`` (rows zero-padded to
    whole 32-value steps; the caller keeps it across calls, as for
    `gemm_bf16amx`). Returns False, leaving y untouched, when some value of x
    is not a bfloat16 value (its low 16 bits are not zero): the products would
    not be exact and the caller must take a float32 path. ``portable`` runs the
    portable definition even in a build with the instruction (tests compare the two).
    ``to_bf16`` rounds each task's outputs to bfloat16 values while in its cache.
    """
    cdef os_idx M = x.shape[0], K = x.shape[1], N = w.shape[0], ldx = _round_up(K, OS_DP_STEP)
    cdef unsigned short *xp
    cdef const float *bp = &bias[0] if bias is not None else NULL
    if scratch.shape[0] < bf16dp_scratch_size(M, K):
        raise ValueError(f"scratch holds {scratch.shape[0]} values; x of shape ({M}, {K}) needs "
                         f"{bf16dp_scratch_size(M, K)}")
    if M == 0 or N == 0:
        return True
    xp = _aligned64(scratch)
    if _bf16_rows(x, xp, ldx, n_threads):
        return False
    with nogil:
        _dp_products(xp, ldx, &w[0, 0], bp, &y[0, 0], M, N, K, mb, nb, n_threads, portable, to_bf16)
    return True


cdef void _dp_products(const unsigned short *xp, os_idx ldx, const unsigned short *w, const float *bp,
                       float *y, os_idx M, os_idx N, os_idx K, os_idx mb, os_idx nb, int n_threads,
                       bint portable, bint to_bf16) noexcept nogil:
    """y = x w^T + bias in tasks of mb x rows by nb w rows, x already packed in xp (rows of ldx values)."""
    cdef os_idx t, n_mb, n_nb, m0, n0, m1, n1
    mb, nb = _round_up(mb, 4), _round_up(nb, 3)
    n_mb, n_nb = (M + mb - 1) // mb, (N + nb - 1) // nb
    for t in prange(n_mb * n_nb, schedule="dynamic", num_threads=_threads_for(n_mb * n_nb, n_threads)):
        m0 = (t % n_mb) * mb
        n0 = (t // n_mb) * nb
        m1 = min(M, m0 + mb)
        n1 = min(N, n0 + nb)
        if portable:
            os_gemm_bf16dp_portable(xp, ldx, w, bp, y, N, K, m0, m1, n0, n1)
        else:
            os_gemm_bf16dp(xp, ldx, w, bp, y, N, K, m0, m1, n0, n1)
        if to_bf16:
            _round_columns(y + m0 * N, m1 - m0, N, n0, n1)


def conv3x3s2_bf16dp(const float[:, :, :, ::1] x,     # IN  (n, H, W, C), channels-last, bfloat16 values
                     const unsigned short[:, ::1] w,  # IN  (Co, 9 * C) bfloat16 bits, (kh, kw, c) order
                     const float[::1] bias,           # IN  (Co,) or None
                     float[:, ::1] y,                 # OUT (n * Ho * Wo, Co)
                     unsigned short[::1] scratch,     # SCRATCH bf16dp_scratch_size(n * Ho * Wo, 9 * C) values
                     Py_ssize_t mb,                   # x rows per task
                     Py_ssize_t nb,                   # w rows per task
                     int n_threads,
                     bint portable=False,
                     bint to_bf16=False):
    """`gemm_bf16dp` of `im2col_3x3s2`'s rows, packed from x without forming them (the same bits).

    Returns False, leaving y untouched, when some value of x is not a bfloat16 value.
    """
    cdef os_idx n = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3]
    cdef os_idx Ho = (H + 1) // 2, Wo = (W + 1) // 2, M = n * Ho * Wo, K = 9 * C, N = w.shape[0], task
    cdef os_idx ldx = _round_up(K, OS_DP_STEP)
    cdef unsigned short *xp
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef int inexact = 0
    if w.shape[1] != K or y.shape[0] != M or y.shape[1] != N:
        raise ValueError(f"conv3x3s2_bf16dp needs w of shape (Co, {K}) and y of shape ({M}, Co); got "
                         f"w ({w.shape[0]}, {w.shape[1]}), y ({y.shape[0]}, {y.shape[1]})")
    if scratch.shape[0] < bf16dp_scratch_size(M, K):
        raise ValueError(f"scratch holds {scratch.shape[0]} values; {M} rows of {K} need "
                         f"{bf16dp_scratch_size(M, K)}")
    if M == 0 or N == 0:
        return True
    xp = _aligned64(scratch)
    for task in prange(n * Ho, nogil=True, schedule="static", num_threads=_threads_for(n * Ho, n_threads)):
        inexact |= os_dp_pack_conv_row(&x[task // Ho, 0, 0, 0], H, W, C, task % Ho, Wo, xp + task * Wo * ldx,
                                       ldx)
    if inexact:
        return False
    with nogil:
        _dp_products(xp, ldx, &w[0, 0], bp, &y[0, 0], M, N, K, mb, nb, n_threads, portable, to_bf16)
    return True


cdef enum:
    # AMX tasks: a band of 32 w rows (two tiles) by a group of x rows whose tiles
    # fit half of a core's L2 (at most 64 blocks of 16), so that they stay there
    # while the bands pass; x was read from memory once per band before
    AMX_BAND = 32
    AMX_GROUP_BYTES = 1 << 20
    AMX_GROUP_MAX = 64


def amx_scratch_size(Py_ssize_t M, Py_ssize_t K, int n_threads):
    """uint16 values of scratch `gemm_bf16amx` needs: x (M, K) in tiles, and two bands of w per thread."""
    return ((M + OS_AMX_BLOCK - 1) // OS_AMX_BLOCK * OS_AMX_BLOCK * K + max(1, n_threads) * 2 * AMX_BAND * K
            + SCRATCH_SLACK)


cdef void _amx_products(unsigned short *xt, const unsigned short *w, const float *bp, float *y, os_idx M,
                        os_idx N, os_idx K, int n_threads) noexcept nogil:
    """y = x w^T + bias on the tiles, x already in xt (os_amx_pack_x's layout), w's bands after it."""
    cdef os_idx MB = (M + OS_AMX_BLOCK - 1) // OS_AMX_BLOCK, x_size = MB * OS_AMX_BLOCK * K
    cdef os_idx group = max(2, min(AMX_GROUP_MAX, AMX_GROUP_BYTES // (OS_AMX_BLOCK * 2 * max(K, 1)) // 2 * 2))
    cdef os_idx n_tasks = (N + AMX_BAND - 1) // AMX_BAND * ((MB + group - 1) // group)
    cdef int nt = _threads_for(n_tasks, n_threads), th
    # each thread takes a run of tasks, so that it knows the next band to copy while the tiles work
    for th in prange(nt, schedule="static", num_threads=nt):
        os_gemm_bf16amx(xt, w, bp, y, M, N, K, group, n_tasks * th // nt, n_tasks * (th + 1) // nt,
                        xt + x_size + th * 2 * AMX_BAND * K)


def gemm_bf16amx(const float[:, ::1] x,           # IN  (M, K), every value a bfloat16 value, K % 32 == 0
                 const unsigned short[:, ::1] w,  # IN  (N, K) bfloat16 bits
                 const float[::1] bias,           # IN  (N,) or None
                 float[:, ::1] y,                 # OUT (M, N)
                 unsigned short[::1] scratch,     # SCRATCH amx_scratch_size(M, K, n_threads) values
                 int n_threads,
                 bint portable=False):
    """y = x @ w.T + bias in AMX's arithmetic (_bf16amx_impl.h), x and w bfloat16 values.

    Runs the tiles where AMX_NATIVE, else (and with ``portable``) the portable
    definition; both give the same bits. K must be a multiple of 32. Returns
    False, leaving y untouched, when some value of x is not a bfloat16 value.
    The caller owns ``scratch`` so that it can keep it across calls: fresh
    pages for every call cost more page faults than the products take.
    """
    cdef os_idx M = x.shape[0], K = x.shape[1], N = w.shape[0]
    cdef os_idx MB = (M + OS_AMX_BLOCK - 1) // OS_AMX_BLOCK, n_bands, t
    cdef os_idx need = amx_scratch_size(M, K, n_threads)
    cdef unsigned short *xp
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef int inexact = 0
    if K % OS_AMX_STEP:
        raise ValueError(f"gemm_bf16amx needs K to be a multiple of {OS_AMX_STEP}, got {K}")
    if scratch.shape[0] < need:
        raise ValueError(f"scratch holds {scratch.shape[0]} values; x of shape ({M}, {K}) on {n_threads} "
                         f"threads needs {need}")
    if M == 0 or N == 0:
        return True
    xp = _aligned64(scratch)
    if portable or not AMX_NATIVE:
        # row-major bf16 rows for the definition
        if _bf16_rows(x, xp, K, n_threads):
            return False
        n_bands = (N + AMX_BAND - 1) // AMX_BAND
        for t in prange(n_bands, nogil=True, schedule="dynamic", num_threads=_threads_for(n_bands, n_threads)):
            os_gemm_bf16amx_portable(xp, K, &w[0, 0], bp, &y[0, 0], N, K, 0, M,
                                     t * AMX_BAND, min(N, (t + 1) * AMX_BAND))
        return True
    for t in prange(MB, nogil=True, schedule="static", num_threads=_threads_for(MB, n_threads)):
        inexact |= os_amx_pack_x(&x[0, 0], M, K, xp, t, t + 1)
    if inexact:
        return False
    with nogil:
        _amx_products(xp, &w[0, 0], bp, &y[0, 0], M, N, K, n_threads)
    return True


def conv3x3s2_bf16amx(const float[:, :, :, ::1] x,     # IN  (n, H, W, C), channels-last, bfloat16 values
                      const unsigned short[:, ::1] w,  # IN  (Co, 9 * C) bfloat16 bits, (kh, kw, c) order
                      const float[::1] bias,           # IN  (Co,) or None
                      float[:, ::1] y,                 # OUT (n * Ho * Wo, Co)
                      unsigned short[::1] scratch,     # SCRATCH amx_scratch_size(n * Ho * Wo, 9 * C, n_threads)
                      int n_threads):
    """`gemm_bf16amx` of `im2col_3x3s2`'s rows, packed from x without forming them (the same bits).

    Tiles only (AMX_NATIVE) and C a multiple of 32. Returns False, leaving y
    untouched, when some value of x is not a bfloat16 value.
    """
    cdef os_idx n = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3]
    cdef os_idx M = n * ((H + 1) // 2) * ((W + 1) // 2), K = 9 * C, N = w.shape[0], t
    cdef os_idx MB = (M + OS_AMX_BLOCK - 1) // OS_AMX_BLOCK
    cdef unsigned short *xt
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef int inexact = 0
    if not AMX_NATIVE:
        raise RuntimeError("conv3x3s2_bf16amx runs on AMX tiles only; this process has none (AMX_NATIVE)")
    if C % OS_AMX_STEP or w.shape[1] != K or y.shape[0] != M or y.shape[1] != N:
        raise ValueError(f"conv3x3s2_bf16amx needs C a multiple of {OS_AMX_STEP}, w of shape (Co, {K}) and y "
                         f"of shape ({M}, Co); got C = {C}, w ({w.shape[0]}, {w.shape[1]}), "
                         f"y ({y.shape[0]}, {y.shape[1]})")
    if scratch.shape[0] < amx_scratch_size(M, K, n_threads):
        raise ValueError(f"scratch holds {scratch.shape[0]} values; {M} rows of {K} on {n_threads} threads "
                         f"need {amx_scratch_size(M, K, n_threads)}")
    if M == 0 or N == 0:
        return True
    xt = _aligned64(scratch)
    for t in prange(MB, nogil=True, schedule="static", num_threads=_threads_for(MB, n_threads)):
        inexact |= os_amx_pack_conv_x(&x[0, 0, 0, 0], n, H, W, C, xt, t, t + 1)
    if inexact:
        return False
    with nogil:
        _amx_products(xt, &w[0, 0], bp, &y[0, 0], M, N, K, n_threads)
    return True


# ---- int8 products (_int8_impl.h) ------------------------------------------------------

cdef enum:
    # rows quantized per task
    I8_QUANT_ROWS = 16
    # int8 GEMM task: activation rows x weight rows (64 x 1 KiB codes stay in L2
    # while four weight rows at a time sit in L1)
    I8_MB = 64
    I8_NB = 64
    # from this many activation rows VNNI builds run packed weight panels
    # (os_i8_gemm_panels): packing a panel costs about what 8 rows of products do
    I8_PANEL_MIN_ROWS = 16
    # up to this many rows (sequences decoded together, e.g. through the output
    # head) take the decode GEMV's batched kernel: its four far-apart streams read
    # the codes faster than the GEMM tasks' neighbouring rows
    I8_BATCH_ROWS = 8


def quantize_int8(const float[:, ::1] x,     # IN  (M, K)
                  signed char[:, ::1] q,     # OUT (M, K)
                  float[::1] scale,          # OUT (M,)
                  int n_threads):
    """Per-row symmetric int8 codes and scales (the rule in _int8_impl.h)."""
    cdef os_idx M = x.shape[0], K = x.shape[1], c, n_chunks = (M + I8_QUANT_ROWS - 1) // I8_QUANT_ROWS
    if M == 0:
        return
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=_threads_for(n_chunks, n_threads)):
        os_i8_quantize_rows(&x[0, 0], K, c * I8_QUANT_ROWS, min(M, (c + 1) * I8_QUANT_ROWS),
                            &q[0, 0], &scale[0])


cdef void _i8_span(const signed char *q, const float *sx, os_idx B, const void **ws, const float **scales,
                   const float *bias, float **ys, const os_idx *rows, int n, os_idx K, os_idx r0, os_idx r1,
                   bint to_bf16) noexcept nogil:
    """Rows [r0, r1) of the int8 matrices ws[0..n) taken one after another, for the B
    quantized activation rows q (B, K) with scales sx; ys[j] is (B, rows[j])."""
    cdef os_idx start = 0, a, b
    cdef int j
    for j in range(n):
        a = max(r0, start) - start
        b = min(r1, start + rows[j]) - start
        if a < b:
            if B == 1:  # linear_int8's decode GEMV (four far-apart streams)
                os_i8_gemv_rows(q, sx[0], <const signed char *> ws[j], scales[j], K, bias, ys[j], a, b)
            else:  # each group of four weight rows summed for all B rows: the codes are read once
                os_i8_bgemv_rows(q, sx, B, <const signed char *> ws[j], scales[j], K, bias, ys[j], rows[j], a, b)
            if to_bf16:
                _round_columns(ys[j], B, rows[j], a, b)
        start += rows[j]


cdef int _i8_many(const float *x, os_idx B, const void **ws, const float **scales, float **ys,
                  const os_idx *rows, int n, os_idx K, int n_threads, bint to_bf16,
                  const float *bias=NULL) noexcept nogil:
    """ys[j][b] = linear_int8(x[b], ws[j], scales[j]) for B activation rows x (B, K)
    and n <= MAX_MANY int8 matrices (K <= OS_I8_MAX_K), in one parallel region,
    each thread one contiguous share of all the matrices' rows; -1 if scratch
    could not be allocated.

    Each row is quantized once for all the matrices (linear_int8 on each would
    quantize it to the same codes again). The integer sums are exact and every
    output is dequantized alone, so each is bit-identical to linear_int8 on its
    row alone, whatever the split or the number of rows. to_bf16 as in linear_bf16;
    bias (n = 1 only: one matrix's (N,)) is added as linear_int8 adds it.
    """
    cdef os_idx t, total = 0
    cdef int j, nt
    cdef signed char *q = <signed char *> malloc(max(1, B * K))
    cdef float *sx = <float *> malloc(max(1, B) * sizeof(float))
    if q == NULL or sx == NULL:
        free(q)
        free(sx)
        return -1
    os_i8_quantize_rows(x, K, 0, B, q, sx)
    for j in range(n):
        total += rows[j]
    nt = _threads_for((total + ROW_BLOCK - 1) // ROW_BLOCK, n_threads)
    for t in prange(nt, schedule="static", num_threads=nt):
        _i8_span(q, sx, B, ws, scales, bias, ys, rows, n, K, total * t // nt, total * (t + 1) // nt, to_bf16)
    free(q)
    free(sx)
    return 0


cdef int _linear_int8_panels(const signed char *q, const float *sx, os_idx M, os_idx K, const signed char *w,
                             const float *sw, const float *bias, float *y, os_idx N, int n_threads) noexcept nogil:
    """linear_int8's products of M >= I8_PANEL_MIN_ROWS quantized rows (codes q, scales sx)
    on a VNNI build: the codes offset once, then each task one packed panel of OS_I8_NR
    weight rows for every row. -1 if scratch could not be allocated."""
    cdef os_idx Kp = os_i8_kp(K), n_panels = (N + OS_I8_NR - 1) // OS_I8_NR, c, p
    cdef os_idx n_chunks = (M + I8_QUANT_ROWS - 1) // I8_QUANT_ROWS
    cdef int nt = _threads_for(n_panels, n_threads)
    cdef unsigned char *xu = <unsigned char *> malloc(M * Kp)
    cdef signed char *panels = <signed char *> malloc(nt * os_i8_panel_bytes(K))
    if xu == NULL or panels == NULL:
        free(xu)
        free(panels)
        return -1
    for c in prange(n_chunks, schedule="static", num_threads=_threads_for(n_chunks, n_threads)):
        os_i8_offset_rows(q, K, c * I8_QUANT_ROWS, min(M, (c + 1) * I8_QUANT_ROWS), xu)
    for p in prange(n_panels, schedule="dynamic", num_threads=nt):
        os_i8_gemm_panels(xu, sx, M, w, sw, K, bias, y, N, p, p + 1, panels + threadid() * os_i8_panel_bytes(K))
    free(xu)
    free(panels)
    return 0


def linear_int8(const float[:, ::1] x,          # IN  (M, K)
                const signed char[:, ::1] w,    # IN  (N, K) int8 codes, K <= INT8_MAX_K
                const float[::1] w_scale,       # IN  (N,)
                const float[::1] bias,          # IN  (N,) or None
                float[:, ::1] y,                # OUT (M, N)
                int n_threads):
    """y = dequant(quantize_rows(x) @ w.T) + bias; every output row depends only on its x row.

    Up to I8_BATCH_ROWS rows (decode): each thread one contiguous share of the
    weight rows, read as four far-apart streams once for all rows. More rows:
    tasks of I8_MB activation rows x I8_NB
    weight rows, or from I8_PANEL_MIN_ROWS rows on VNNI builds packed panels
    (_linear_int8_panels). Integer sums are exact and each output is dequantized alone, so
    no split changes a bit.
    """
    cdef os_idx M = x.shape[0], K = x.shape[1], N = w.shape[0]
    cdef os_idx c, t, m0, n0, n_mb, n_nb, n_chunks = (M + I8_QUANT_ROWS - 1) // I8_QUANT_ROWS
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef signed char *q
    cdef float *sx
    cdef const void *wp[1]
    cdef const float *sp[1]
    cdef float *yp[1]
    cdef int rc
    if M == 0 or N == 0:
        return
    if K > OS_I8_MAX_K:
        raise ValueError(f"int8 products take K <= {OS_I8_MAX_K}, got {K}")
    if M <= I8_BATCH_ROWS:  # the decode GEMV (batched from two rows): the fused layer's products, one matrix
        wp[0], sp[0], yp[0] = &w[0, 0], &w_scale[0], &y[0, 0]
        with nogil:
            rc = _i8_many(&x[0, 0], M, wp, sp, yp, &N, 1, K, n_threads, False, bp)
        if rc:
            raise MemoryError(f"int8 products need {K} bytes of activation codes")
        return
    q = <signed char *> malloc(max(1, M * K))
    sx = <float *> malloc(M * sizeof(float))
    if q == NULL or sx == NULL:
        free(q)
        free(sx)
        raise MemoryError(f"int8 products need {M * K} bytes of activation codes")
    rc = 0
    try:
        with nogil:
            for c in prange(n_chunks, schedule="static", num_threads=_threads_for(n_chunks, n_threads)):
                os_i8_quantize_rows(&x[0, 0], K, c * I8_QUANT_ROWS, min(M, (c + 1) * I8_QUANT_ROWS), q, sx)
            if OS_I8_PANEL and M >= I8_PANEL_MIN_ROWS:
                rc = _linear_int8_panels(q, sx, M, K, &w[0, 0], &w_scale[0], bp, &y[0, 0], N, n_threads)
            else:
                n_mb = (M + I8_MB - 1) // I8_MB
                n_nb = (N + I8_NB - 1) // I8_NB
                for t in prange(n_mb * n_nb, schedule="dynamic", num_threads=_threads_for(n_mb * n_nb, n_threads)):
                    m0 = (t % n_mb) * I8_MB
                    n0 = (t // n_mb) * I8_NB
                    os_i8_gemm_rows(q, sx, &w[0, 0], &w_scale[0], K, bp, &y[0, 0], N, m0, min(M, m0 + I8_MB),
                                    n0, min(N, n0 + I8_NB))
    finally:
        free(q)
        free(sx)
    if rc:
        raise MemoryError(f"int8 products need {M * os_i8_kp(K)} bytes of offset codes and packed panels")


def stream_sum(const float[::1] a,  # IN
               int n_threads):
    """sum(a) in per-thread chunks: reads memory at full speed (bandwidth probe)."""
    cdef os_idx n = a.shape[0], c, n_chunks = (n + 64 * CHUNK - 1) // (64 * CHUNK)
    cdef int nt = _threads_for(n_chunks, n_threads)
    cdef double total = 0
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=nt):
        total += os_stream_sum(&a[c * 64 * CHUNK], min(64 * CHUNK, n - c * 64 * CHUNK))
    return total


# ---- normalisation, positions, activations -----------------------------------------

def rms_norm(const float[:, ::1] x,   # IN  (n, D)
             const float[::1] weight,  # IN  (D,)
             float eps,
             float[:, ::1] y,          # OUT (n, D)
             int n_threads,
             bint to_bf16=False):
    """y[i] = weight * x[i] / sqrt(mean(x[i]**2) + eps), then bfloat16-rounded if to_bf16."""
    cdef os_idx n = x.shape[0], D = x.shape[1], i
    cdef int nt = _threads_for(n * D // CHUNK, n_threads)
    if D == 0:
        return
    for i in prange(n, nogil=True, schedule="static", num_threads=nt):
        os_rms_norm_row(&x[i, 0], &weight[0], eps, &y[i, 0], D)
        if to_bf16:
            os_round_bf16(&y[i, 0], &y[i, 0], D)


def rope(const float[:, :, ::1] x,   # IN  (n_tokens, n_heads, head_dim)
         const float[:, ::1] cos,    # IN  (n_tokens, head_dim)
         const float[:, ::1] sin,    # IN  (n_tokens, head_dim)
         float[:, :, ::1] y,         # OUT (n_tokens, n_heads, head_dim)
         int n_threads,
         bint to_bf16=False):
    """y = x * cos + rotate_half(x) * sin, per token and head; bfloat16-rounded if to_bf16."""
    cdef os_idx n = x.shape[0], H = x.shape[1], hd = x.shape[2], t
    cdef int nt = _threads_for(n * H * hd // CHUNK, n_threads)
    if H == 0 or hd == 0:
        return
    for t in prange(n, nogil=True, schedule="static", num_threads=nt):
        os_rope_token(&x[t, 0, 0], &cos[t, 0], &sin[t, 0], &y[t, 0, 0], H, hd)
        if to_bf16:
            os_round_bf16(&y[t, 0, 0], &y[t, 0, 0], H * hd)


def swiglu(const float[::1] gate,  # IN
           const float[::1] up,    # IN
           float[::1] y,           # OUT
           int n_threads,
           bint to_bf16=False):
    """y = silu(gate) * up, then bfloat16-rounded if to_bf16."""
    cdef os_idx n = gate.shape[0], c, n_chunks = (n + CHUNK - 1) // CHUNK
    cdef int nt = _threads_for(n_chunks, n_threads)
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=nt):
        os_swiglu(&gate[c * CHUNK], &up[c * CHUNK], &y[c * CHUNK], min(CHUNK, n - c * CHUNK))
        if to_bf16:
            os_round_bf16(&y[c * CHUNK], &y[c * CHUNK], min(CHUNK, n - c * CHUNK))


def silu(const float[::1] x,  # IN
         float[::1] y,        # OUT
         int n_threads):
    """y = x / (1 + exp(-x))."""
    cdef os_idx n = x.shape[0], c, n_chunks = (n + CHUNK - 1) // CHUNK
    cdef int nt = _threads_for(n_chunks, n_threads)
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=nt):
        os_silu(&x[c * CHUNK], &y[c * CHUNK], min(CHUNK, n - c * CHUNK))


def im2col_3x3s2(const float[:, :, :, ::1] x,  # IN  (n, H, W, C), channels-last
                 float[:, ::1] cols,            # OUT (n * Ho * Wo, 9 * C)
                 int n_threads):
    """Patches of a 3x3 stride-2 pad-1 convolution, one row per output position."""
    cdef os_idx n = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3]
    cdef os_idx Ho = (H + 1) // 2, Wo = (W + 1) // 2, task
    cdef int nt = _threads_for(n * Ho * Wo * 9 * C // CHUNK, n_threads)
    if n * Ho * Wo * C == 0:
        return
    for task in prange(n * Ho, nogil=True, schedule="static", num_threads=nt):
        os_im2col_3x3s2_row(&x[task // Ho, 0, 0, 0], H, W, C, task % Ho, Wo, &cols[task * Wo, 0])


def conv3x3s2_c1(const float[:, :, :, ::1] x,  # IN  (n, H, W, 1)
                 const float[:, ::1] wt,        # IN  (9, Co): the kernel's taps in (kh, kw) order, transposed
                 const float[::1] bias,         # IN  (Co,) or None
                 float[:, ::1] y,               # OUT (n * Ho * Wo, Co)
                 int n_threads,
                 bint to_bf16=False):
    """A 3x3 stride-2 pad-1 convolution of one input channel, computed directly.

    Each output is the nine taps' products summed in (kh, kw) order, padding taps
    included as zeros (what im2col's row times the kernel sums), then the bias;
    rounded to bfloat16 values row by row if ``to_bf16``.
    """
    cdef os_idx n = x.shape[0], H = x.shape[1], W = x.shape[2], Co = wt.shape[1]
    cdef os_idx Ho = (H + 1) // 2, Wo = (W + 1) // 2, task
    cdef const float *bp = &bias[0] if bias is not None else NULL
    if x.shape[3] != 1 or wt.shape[0] != 9 or y.shape[0] != n * Ho * Wo or y.shape[1] != Co:
        raise ValueError(f"conv3x3s2_c1 needs x of shape (n, H, W, 1), wt (9, Co) and y ({n * Ho * Wo}, Co); "
                         f"got x's last dim {x.shape[3]}, wt ({wt.shape[0]}, {Co}), y ({y.shape[0]}, {y.shape[1]})")
    if bias is not None and bias.shape[0] != Co:
        raise ValueError(f"bias has {bias.shape[0]} values; wt has {Co} output channels")
    if n * Ho * Wo * Co == 0:
        return
    for task in prange(n * Ho, nogil=True, schedule="static",
                       num_threads=_threads_for(n * Ho * Wo * Co // CHUNK, n_threads)):
        os_conv3x3s2_c1_row(&x[task // Ho, 0, 0, 0], H, W, &wt[0, 0], bp, Co, task % Ho, Wo,
                            &y[task * Wo, 0], to_bf16)


def layer_norm(const float[:, ::1] x,   # IN  (n, D)
               const float[::1] weight,  # IN  (D,)
               const float[::1] bias,    # IN  (D,)
               float eps,
               float[:, ::1] y,          # OUT (n, D)
               int n_threads,
               bint to_bf16=False):
    """y[i] = (x[i] - mean) / sqrt(var + eps) * weight + bias, moments in double;
    then bfloat16-rounded if to_bf16."""
    cdef os_idx n = x.shape[0], D = x.shape[1], i
    cdef int nt = _threads_for(n * D // CHUNK, n_threads)
    if D == 0:
        return
    for i in prange(n, nogil=True, schedule="static", num_threads=nt):
        os_layer_norm_row(&x[i, 0], &weight[0], &bias[0], eps, &y[i, 0], D)
        if to_bf16:
            os_round_bf16(&y[i, 0], &y[i, 0], D)


def gelu(const float[::1] x,  # IN
         float[::1] y,        # OUT (may be x's buffer)
         int n_threads,
         bint to_bf16=False):
    """y = x * 0.5 * (1 + erf(x / sqrt(2))), ATen's float32 erf; rounded to
    bfloat16 values chunk by chunk while in cache if ``to_bf16``."""
    cdef os_idx n = x.shape[0], c, m, n_chunks = (n + CHUNK - 1) // CHUNK
    cdef int nt = _threads_for(n_chunks, n_threads)
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=nt):
        m = min(CHUNK, n - c * CHUNK)
        os_gelu(&x[c * CHUNK], &y[c * CHUNK], m)
        if to_bf16:
            os_round_bf16(&y[c * CHUNK], &y[c * CHUNK], m)


# ---- attention over a KV cache -------------------------------------------------------

ctypedef fused kv_t:
    float           # float32 keys and values
    unsigned short  # bfloat16 bits (the BF16 KV cache)


cdef int _attention_rows(const float *q, const void *k, const void *v, bint bf16kv, os_idx n_q, os_idx H,
                         os_idx hd, os_idx n_kv, os_idx Hkv, Py_ssize_t causal_offset, float scale,
                         float *out, int n_threads, bint to_bf16) noexcept nogil:
    """`attention` over raw buffers q, out (n_q, H, hd) and k, v (n_kv, Hkv, hd),
    float32 or (bf16kv) bfloat16 bits; -1 if the scores could not be allocated."""
    cdef os_idx group = H // Hkv
    cdef os_idx task, i, s, g0, g1, n_keys, shares, n_tasks
    cdef int nt
    # n_heads rows of scores per thread, indexed by threadid()
    cdef float *scores
    cdef os_idx per_thread = H * max(1, n_kv)
    if n_q == 0 or H == 0 or hd == 0:
        return 0
    shares = max(1, min(Hkv, n_threads))
    n_tasks = n_q * shares
    nt = _threads_for(n_tasks, n_threads)
    scores = <float *> malloc(nt * per_thread * sizeof(float))
    if scores == NULL:
        return -1
    for task in prange(n_tasks, schedule="static", num_threads=nt):
        i = task // shares
        s = task % shares
        g0 = Hkv * s // shares
        g1 = Hkv * (s + 1) // shares
        n_keys = n_kv if causal_offset < 0 else min(n_kv, causal_offset + i + 1)
        if not bf16kv:
            os_attention_heads(q + i * H * hd, <const float *> k, <const float *> v, Hkv * hd, n_keys, hd,
                               group, g0, g1, scale, scores + threadid() * per_thread, out + i * H * hd)
        else:
            os_attention_heads_bf16kv(q + i * H * hd, <const unsigned short *> k, <const unsigned short *> v,
                                      Hkv * hd, n_keys, hd, group, g0, g1, scale,
                                      scores + threadid() * per_thread, out + i * H * hd)
        if to_bf16:
            os_round_bf16(out + (i * H + g0 * group) * hd, out + (i * H + g0 * group) * hd,
                          (g1 - g0) * group * hd)
    free(scores)
    return 0


def attention(const float[:, :, ::1] q,  # IN  (n_q, n_heads, hd)
              const kv_t[:, :, ::1] k,   # IN  (n_kv, n_kv_heads, hd)
              const kv_t[:, :, ::1] v,   # IN  (n_kv, n_kv_heads, hd)
              float scale,
              Py_ssize_t causal_offset,  # < 0: every key is visible
              float[:, :, ::1] out,      # OUT (n_q, n_heads, hd)
              int n_threads,
              bint to_bf16=False):
    """out[i, h] = softmax(q[i, h] . k[:, g(h)] * scale) @ v[:, g(h)] for few query rows (decode).

    One task per query row and share of the kv heads (as many shares as
    threads); every head is computed alike whatever the split. bfloat16 k/v
    give exactly the result of their float32 widening. to_bf16: out rounded to
    bfloat16 values, each task its own heads.
    """
    cdef int rc
    if q.shape[0] == 0 or q.shape[1] == 0 or q.shape[2] == 0:
        return
    with nogil:
        rc = _attention_rows(&q[0, 0, 0], &k[0, 0, 0], &v[0, 0, 0], kv_t is not float, q.shape[0], q.shape[1],
                             q.shape[2], k.shape[0], k.shape[1], causal_offset, scale, &out[0, 0, 0],
                             n_threads, to_bf16)
    if rc:
        raise MemoryError(f"attention needs {n_threads} x {q.shape[1]} x {k.shape[0]} float32 scores")


# ---- fused attention for many queries ----------------------------------------------------

cdef os_idx _attention_layout(os_idx n_q, os_idx n_kv, os_idx H, os_idx Hkv, os_idx hd, os_idx block,
                              int n_threads, os_idx *ld, os_idx *rows_pad, os_idx *n_tasks, int *nt) noexcept nogil:
    """Sizes of `attention_fused`'s buffers; returns the float32 values of work it needs."""
    cdef os_idx group = H // Hkv
    ld[0] = (n_kv + OS_AT_NR - 1) // OS_AT_NR * OS_AT_NR
    block = max(1, min(block, n_q))
    n_tasks[0] = (n_q + block - 1) // block * Hkv
    rows_pad[0] = (block * group + OS_AT_MR - 1) // OS_AT_MR * OS_AT_MR
    nt[0] = _threads_for(n_tasks[0], n_threads)
    # packed keys and values, then per thread: scores, a zero query row, the padding rows' outputs
    return Hkv * ld[0] * hd + Hkv * n_kv * hd + nt[0] * (rows_pad[0] * ld[0] + hd + OS_AT_MR * hd)


def attention_fused_work_size(Py_ssize_t n_q, Py_ssize_t n_kv, Py_ssize_t n_heads, Py_ssize_t n_kv_heads,
                              Py_ssize_t head_dim, Py_ssize_t block, int n_threads):
    """float32 values of ``work`` `attention_fused` needs for these shapes."""
    cdef os_idx ld, rows_pad, n_tasks
    cdef int nt
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
    return _attention_layout(n_q, n_kv, n_heads, n_kv_heads, head_dim, block, n_threads, &ld, &rows_pad,
                             &n_tasks, &nt)


def attention_fused(const float[:, :, ::1] q,  # IN  (n_q, n_heads, hd)
                    const float[:, :, ::1] k,  # IN  (n_kv, n_kv_heads, hd)
                    const float[:, :, ::1] v,  # IN  (n_kv, n_kv_heads, hd)
                    float scale,
                    Py_ssize_t causal_offset,  # < 0: every key is visible
                    float[:, :, ::1] out,      # OUT (n_q, n_heads, hd)
                    Py_ssize_t block,          # queries per task (>= 1)
                    Py_ssize_t key_chunk,      # keys per cache chunk (rounded up to the tile)
                    float[::1] work,           # SCRATCH attention_fused_work_size(...) values
                    int n_threads):
    """out = attention as `attention`, one task per (kv head, block of queries): scores, softmax and P.V fused.

    The caller owns ``work`` (packed keys and values, per-thread scores), so that
    it can keep it across calls: fresh pages for every call fault again.
    """
    cdef os_idx n_q = q.shape[0], H = q.shape[1], hd = q.shape[2]
    cdef os_idx n_kv = k.shape[0], Hkv = k.shape[1], group = H // Hkv
    cdef os_idx ld, n_blocks, n_tasks, task, b, g, i0, rows_pad, per_thread, pack_step, n_pack, c, need
    cdef int nt
    cdef float *kp
    cdef float *vp
    cdef float *scratch
    cdef float *mine
    if n_q == 0 or H == 0 or hd == 0:
        return
    need = _attention_layout(n_q, n_kv, H, Hkv, hd, block, n_threads, &ld, &rows_pad, &n_tasks, &nt)
    if work.shape[0] < need:
        raise ValueError(f"work holds {work.shape[0]} values; these shapes on {n_threads} threads need {need}")
    block = max(1, min(block, n_q))
    key_chunk = (max(1, key_chunk) + OS_AT_NR - 1) // OS_AT_NR * OS_AT_NR
    n_blocks = (n_q + block - 1) // block
    per_thread = rows_pad * ld + hd + OS_AT_MR * hd
    # packing: chunks of 16 panels per task
    pack_step = 16 * OS_AT_NR
    n_pack = (ld + pack_step - 1) // pack_step
    kp = &work[0]
    vp = kp + Hkv * ld * hd
    scratch = vp + Hkv * n_kv * hd
    for c in prange(Hkv * n_pack, nogil=True, schedule="static",
                    num_threads=_threads_for(Hkv * n_pack, n_threads)):
        g = c // n_pack
        os_attn_pack(&k[0, 0, 0], &v[0, 0, 0], n_kv, Hkv, hd, g, (c % n_pack) * pack_step,
                     min(ld, (c % n_pack + 1) * pack_step), kp + g * ld * hd, vp + g * n_kv * hd)
    for task in prange(n_tasks, nogil=True, schedule="dynamic", num_threads=nt):
        # kv head by kv head, so both threads share one head's k and v in
        # cache; within a head the largest (latest, under a causal mask)
        # blocks first, so the small ones fill the end (balance)
        g = task // n_blocks
        b = n_blocks - 1 - task % n_blocks
        i0 = b * block
        mine = scratch + threadid() * per_thread
        for c in range(hd):
            mine[rows_pad * ld + c] = 0
        os_attn_block(&q[0, 0, 0], &out[0, 0, 0], H, hd, group, g, i0, min(n_q, i0 + block),
                      kp + g * ld * hd, vp + g * n_kv * hd, n_kv, causal_offset, scale,
                      mine, ld, mine + rows_pad * ld, mine + rows_pad * ld + hd, key_chunk)


# ---- one decode step through a decoder layer -------------------------------------------

cdef inline void _rms_norm_rounded(const float *x, const float *w, float eps, float *y, os_idx n,
                                   bint to_bf16) noexcept nogil:
    """y = rms_norm(x) (y may be x), bfloat16-rounded if to_bf16: the ops' rms_norm on one row."""
    os_rms_norm_row(x, w, eps, y, n)
    if to_bf16:
        os_round_bf16(y, y, n)


cdef inline void _add_rounded(float *h, const float *o, os_idx n, bint to_bf16) noexcept nogil:
    """h += o, bfloat16-rounded if to_bf16: a residual sum."""
    cdef os_idx i
    for i in range(n):
        h[i] = h[i] + o[i]
    if to_bf16:
        os_round_bf16(h, h, n)


cdef class DecoderLayer:
    """One token through a pre-norm decoder layer (Qwen3's) in a single call.

    The same operators as the op-by-op path, in the same order, over the same
    kernels and thread splits, so every value is bit-identical to it: input RMS
    norm, q/k/v in one GEMV region, per-head q/k RMS norms, rotary positions,
    the new key/value into the cache, attention over the cache, o projection
    and residual, post-attention RMS norm, gate/up, SwiGLU, down and residual.
    to_bf16 rounds every operator's output as the ops' round_to_bf16 does.
    Int8 matrices (codes with per-row scales) run linear_int8's arithmetic
    (_i8_many): q, k and v share one quantization of the normed row, as they
    share the row, and gate and up another.
    What a call saves is the ~20 Python-level operator calls per layer (and
    their allocations) that cost more than the arithmetic around a GEMV.

    The matrices' and norm weights' buffers are held (``_keep``) for the
    object's life; the pointers below point into them.
    """

    cdef object _keep
    cdef const void *_w[7]   # q, k, v, o, gate, up, down: (N, K) float32, bf16 bits or int8 codes
    cdef os_idx _rows[7]
    cdef bint _bf16_weights
    cdef bint _int8
    cdef const float *_scale[7]  # int8: the codes' per-row scales (N,)
    cdef const float *_norm[4]  # input, post-attention (D,); q, k (head_dim,)
    cdef readonly os_idx hidden_size, n_heads, n_kv_heads, head_dim, intermediate_size
    cdef float _eps

    def __init__(self, tuple matrices, tuple norms, os_idx n_heads, os_idx n_kv_heads, os_idx head_dim,
                 float eps, tuple scales=None):
        cdef os_idx cols[7]
        cdef const float[::1] nv
        cdef const float[::1] sv
        cdef const signed char[:, ::1] codes
        cdef int i
        if len(matrices) != 7 or len(norms) != 4:
            raise ValueError("a decoder layer takes 7 matrices (q, k, v, o, gate, up, down) and 4 norm weights")
        if len({m.dtype for m in matrices}) != 1:
            raise ValueError("the layer's matrices mix dtypes; give all float32, all uint16 (bf16) or all int8")
        if n_heads < 1 or n_kv_heads < 1 or n_heads % n_kv_heads or head_dim < 2 or head_dim % 2:
            raise ValueError(f"n_heads={n_heads}, n_kv_heads={n_kv_heads}, head_dim={head_dim}: expected "
                             "n_heads a multiple of n_kv_heads and an even head_dim")
        self._int8 = matrices[0].dtype.itemsize == 1
        if self._int8 != (scales is not None) or (scales is not None and len(scales) != 7):
            raise ValueError("int8 matrices take 7 scale vectors (one per matrix), float matrices none")
        self._keep = (matrices, norms, scales)
        self._bf16_weights = matrices[0].dtype.itemsize == 2
        for i in range(7):
            if self._int8:
                codes = matrices[i]
                self._rows[i], cols[i] = codes.shape[0], codes.shape[1]
                self._w[i] = &codes[0, 0]
                sv = scales[i]
                if sv.shape[0] != self._rows[i] or cols[i] > OS_I8_MAX_K:
                    raise ValueError(f"int8 matrix {i} has {self._rows[i]} rows of {cols[i]} codes and {sv.shape[0]} "
                                     f"scales; expected one scale per row and at most {OS_I8_MAX_K} codes per row")
                self._scale[i] = &sv[0]
            else:
                self._w[i] = _matrix_data(matrices[i], &self._rows[i], &cols[i])
        D, I = cols[0], self._rows[4]
        expected = [(n_heads * head_dim, D), (n_kv_heads * head_dim, D), (n_kv_heads * head_dim, D),
                    (D, n_heads * head_dim), (I, D), (I, D), (D, I)]
        for i in range(7):
            if (self._rows[i], cols[i]) != expected[i]:
                raise ValueError(f"matrix {i} (q, k, v, o, gate, up, down) has shape {(self._rows[i], cols[i])}; "
                                 f"expected {expected[i]}")
        for i in range(4):
            nv = norms[i]
            if nv.shape[0] != (D if i < 2 else head_dim):
                raise ValueError(f"norm weight {i} (input, post-attention, q, k) has {nv.shape[0]} values; "
                                 f"expected {D if i < 2 else head_dim}")
            self._norm[i] = &nv[0]
        self.hidden_size, self.n_heads, self.n_kv_heads = D, n_heads, n_kv_heads
        self.head_dim, self.intermediate_size = head_dim, I
        self._eps = eps

    cdef int _products(self, const float *x, os_idx B, int first, int n, os_idx K, float **ys, int n_threads,
                       bint to_bf16) noexcept nogil:
        """ys[j][b] = x[b] @ matrix[first + j].T for B rows x (B, K), in one parallel region,
        each row as the one-row product of its kind gives it; -1 if scratch could not be allocated."""
        if self._int8:
            return _i8_many(x, B, &self._w[first], &self._scale[first], ys, &self._rows[first], n, K, n_threads,
                            to_bf16)
        if B == 1:
            return _gemv_many(x, &self._w[first], self._bf16_weights, ys, &self._rows[first], n, K, n_threads,
                              to_bf16)
        return _bgemv_many(x, B, &self._w[first], self._bf16_weights, NULL, ys, &self._rows[first], n, K, n_threads,
                           to_bf16)

    def step(self,
             float[::1] hidden,         # IN/OUT (D,) the residual stream, updated in place
             kv_t[:, :, ::1] k_cache,   # IN/OUT (capacity, n_kv_heads, head_dim): row pos is written
             kv_t[:, :, ::1] v_cache,   # IN/OUT (capacity, n_kv_heads, head_dim)
             Py_ssize_t pos,            # the token's position; keys 0..pos are attended
             const float[::1] cos,      # IN  (head_dim,) rotary table row of pos
             const float[::1] sin,      # IN  (head_dim,)
             float scale,
             int n_threads,
             bint to_bf16=False):
        cdef os_idx D = self.hidden_size, H = self.n_heads, Hkv = self.n_kv_heads, hd = self.head_dim
        cdef os_idx I = self.intermediate_size, qn = H * hd, kn = Hkv * hd, i
        cdef float eps = self._eps
        cdef float *buf
        cdef float *x
        cdef float *q
        cdef float *k
        cdef float *v
        cdef float *qr
        cdef float *kr
        cdef float *att
        cdef float *o
        cdef float *gate
        cdef float *up
        cdef float *act
        cdef float *h = &hidden[0]
        cdef float *ys[3]
        cdef int rc = 0
        if hidden.shape[0] != D or cos.shape[0] != hd or sin.shape[0] != hd:
            raise ValueError(f"hidden has {hidden.shape[0]} values, cos {cos.shape[0]}, sin {sin.shape[0]}; "
                             f"expected {D}, {hd}, {hd}")
        if (k_cache.shape[1] != Hkv or k_cache.shape[2] != hd or v_cache.shape[0] != k_cache.shape[0]
                or v_cache.shape[1] != Hkv or v_cache.shape[2] != hd):
            raise ValueError(f"caches of shape {(k_cache.shape[0], k_cache.shape[1], k_cache.shape[2])} and "
                             f"{(v_cache.shape[0], v_cache.shape[1], v_cache.shape[2])}; "
                             f"expected (capacity, {Hkv}, {hd}) each")
        if not 0 <= pos < k_cache.shape[0]:
            raise ValueError(f"position {pos} is outside the cache's 0..{k_cache.shape[0] - 1}")
        buf = <float *> malloc((2 * D + 3 * qn + 3 * kn + 3 * I + 1) * sizeof(float))
        if buf == NULL:
            raise MemoryError("a decoder layer step needs its activations' scratch")
        x, q = buf, buf + D
        k, v = q + qn, q + qn + kn
        qr, kr = v + kn, v + kn + qn
        att, o = kr + kn, kr + kn + qn
        gate, up = o + D, o + D + I
        act = up + I
        with nogil:
            # attention block: q, k, v share the normed row
            _rms_norm_rounded(h, self._norm[0], eps, x, D, to_bf16)
            ys[0], ys[1], ys[2] = q, k, v
            rc = self._products(x, 1, 0, 3, D, ys, n_threads, to_bf16)
            if rc == 0:
                for i in range(H):
                    _rms_norm_rounded(q + i * hd, self._norm[2], eps, q + i * hd, hd, to_bf16)
                for i in range(Hkv):
                    _rms_norm_rounded(k + i * hd, self._norm[3], eps, k + i * hd, hd, to_bf16)
                os_rope_token(q, &cos[0], &sin[0], qr, H, hd)
                os_rope_token(k, &cos[0], &sin[0], kr, Hkv, hd)
                if to_bf16:
                    os_round_bf16(qr, qr, qn)
                    os_round_bf16(kr, kr, kn)
                if kv_t is float:
                    memcpy(&k_cache[pos, 0, 0], kr, kn * sizeof(float))
                    memcpy(&v_cache[pos, 0, 0], v, kn * sizeof(float))
                else:
                    os_f32_to_bf16(kr, &k_cache[pos, 0, 0], kn)
                    os_f32_to_bf16(v, &v_cache[pos, 0, 0], kn)
                rc = _attention_rows(qr, &k_cache[0, 0, 0], &v_cache[0, 0, 0], kv_t is not float, 1, H, hd,
                                     pos + 1, Hkv, pos, scale, att, n_threads, to_bf16)
            if rc == 0:
                ys[0] = o
                rc = self._products(att, 1, 3, 1, qn, ys, n_threads, to_bf16)
            if rc == 0:
                _add_rounded(h, o, D, to_bf16)
                # MLP block
                _rms_norm_rounded(h, self._norm[1], eps, x, D, to_bf16)
                ys[0], ys[1] = gate, up
                rc = self._products(x, 1, 4, 2, D, ys, n_threads, to_bf16)
            if rc == 0:
                os_swiglu(gate, up, act, I)
                if to_bf16:
                    os_round_bf16(act, act, I)
                ys[0] = o
                rc = self._products(act, 1, 6, 1, I, ys, n_threads, to_bf16)
            if rc == 0:
                _add_rounded(h, o, D, to_bf16)
        free(buf)
        if rc:
            raise MemoryError("a decoder layer step could not allocate its GEMV or attention scratch")


# ==== batched decode: several sequences per step, each bit-identical to alone ==========
# (kept in one block: the products of _batch_gemv_impl.h and the layer step over them)

cdef extern from "_batch_gemv_impl.h" nogil:
    void os_bgemv_f32_rows(const float *x, os_idx ldx, os_idx B, const float *W, os_idx K, const float *bias,
                           float *y, os_idx ldy, os_idx n0, os_idx n1)
    void os_bgemv_f32_tail(const float *x, os_idx ldx, os_idx B, const float *W, os_idx K, const float *bias,
                           float *y, os_idx ldy, os_idx n0, os_idx n1)
    void os_bgemv_bf16_rows(const float *x, const float *xp, os_idx ldx, os_idx B, const unsigned short *W,
                            os_idx K, const float *bias, float *y, os_idx ldy, os_idx n0, os_idx n1)


cdef void _bgemv_span(const float *x, const float *xp, os_idx B, const void **ws, bint bf16, const float *bias,
                      float **ys, const os_idx *rows, int n, os_idx K, os_idx r0, os_idx r1,
                      bint to_bf16) noexcept nogil:
    """Rows [r0, r1) of the matrices ws[0..n) taken one after another, for the B
    activation rows of x (B, K); ys[j] is (B, rows[j]). Every output is summed as
    the one-row GEMV (_gemv_bf16_span / _gemv_f32_span) sums it."""
    cdef os_idx start = 0, a, b, n4
    cdef int j
    for j in range(n):
        a = max(r0, start) - start
        b = min(r1, start + rows[j]) - start
        n4 = rows[j] - rows[j] % 4
        if B == 1:
            # one row: the one-row kernels themselves (they keep more chains in flight per row)
            if bf16:
                if a < b:
                    os_gemv_bf16_rows(x, xp, <const unsigned short *> ws[j], K, bias, ys[j], a, b)
            else:
                if a < min(b, n4):
                    os_gemv_f32_rows(x, <const float *> ws[j], K, bias, ys[j], a, min(b, n4))
                if max(a, n4) < b:
                    os_dot_f32_rows(x, 1, <const float *> ws[j], K, bias, ys[j], rows[j], max(a, n4), b)
        elif bf16:
            if a < b:
                os_bgemv_bf16_rows(x, xp, K, B, <const unsigned short *> ws[j], K, bias, ys[j], rows[j], a, b)
        else:
            if a < min(b, n4):
                os_bgemv_f32_rows(x, K, B, <const float *> ws[j], K, bias, ys[j], rows[j], a, min(b, n4))
            if max(a, n4) < b:
                os_bgemv_f32_tail(x, K, B, <const float *> ws[j], K, bias, ys[j], rows[j], max(a, n4), b)
        if to_bf16 and a < b:
            _round_columns(ys[j], B, rows[j], a, b)
        start += rows[j]


cdef int _bgemv_many(const float *x, os_idx B, const void **ws, bint bf16, const float *bias, float **ys,
                     const os_idx *rows, int n, os_idx K, int n_threads, bint to_bf16) noexcept nogil:
    """ys[j][b] = x[b] @ ws[j].T for B activation rows (B, K) and n <= MAX_MANY
    matrices, in one parallel region, the weights read once for all rows; each
    output bit-identical to _gemv_many on that row alone. -1 if scratch could
    not be allocated."""
    cdef os_idx first[MAX_MANY + 1]
    cdef os_idx blk, n0, n1, t, m, total = 0
    cdef int i, j, nt
    cdef float *xp = NULL
    first[0] = 0
    for i in range(n):
        first[i + 1] = first[i] + (rows[i] + ROW_BLOCK - 1) // ROW_BLOCK
        total += rows[i]
    nt = _threads_for(first[n], n_threads)
    if bf16 and not OS_PAIR_GEMV:
        # the one-row path without the pair kernel: ROW_BLOCK blocks of os_dot_bf16_rows,
        # run here row by row (a big-endian machine; no weight sharing)
        for blk in prange(first[n], schedule="static", num_threads=nt):
            j = 0
            while first[j + 1] <= blk:
                j = j + 1
            n0 = (blk - first[j]) * ROW_BLOCK
            n1 = min(rows[j], n0 + ROW_BLOCK)
            for m in range(B):
                os_dot_bf16_rows(x + m * K, 1, <const unsigned short *> ws[j], K, bias, ys[j] + m * rows[j],
                                 rows[j], n0, n1)
            if to_bf16:
                _round_columns(ys[j], B, rows[j], n0, n1)
        return 0
    if bf16:
        xp = <float *> malloc(max(1, B * K) * sizeof(float))
        if xp == NULL:
            return -1
        for m in range(B):
            os_pair_permute(x + m * K, xp + m * K, K)
    for t in prange(nt, schedule="static", num_threads=nt):
        _bgemv_span(x, xp, B, ws, bf16, bias, ys, rows, n, K, total * t // nt, total * (t + 1) // nt, to_bf16)
    free(xp)
    return 0


def linear_rows(const float[:, ::1] x,  # IN  (B, K): one activation row per sequence
                object w,               # IN  (N, K) float32 or bf16 bits
                const float[::1] bias,  # IN  (N,) or None
                float[:, ::1] y,        # OUT (B, N)
                int n_threads,
                bint to_bf16=False):
    """y[b] = x[b] @ w.T + bias, each row bit-identical to the one-row GEMV
    (linear_f32 / linear_bf16 with M = 1); the weights are read once for all rows."""
    cdef const void *wp[1]
    cdef float *yp[1]
    cdef os_idx rows[1]
    cdef os_idx cols
    cdef bint bf16 = w.dtype.itemsize == 2
    cdef const float *bp = &bias[0] if bias is not None else NULL
    cdef int rc
    wp[0] = _matrix_data(w, &rows[0], &cols)
    if cols != x.shape[1] or y.shape[0] != x.shape[0] or y.shape[1] != rows[0]:
        raise ValueError(f"linear_rows: x {x.shape[0]} x {x.shape[1]}, w {rows[0]} x {cols} and "
                         f"y {y.shape[0]} x {y.shape[1]} do not fit")
    if x.shape[0] == 0 or rows[0] == 0:
        return
    yp[0] = &y[0, 0]
    with nogil:
        rc = _bgemv_many(&x[0, 0], x.shape[0], wp, bf16, bp, yp, rows, 1, x.shape[1], n_threads, to_bf16)
    if rc:
        raise MemoryError(f"linear_rows needs {x.shape[0]} x {x.shape[1]} float32 of scratch")


cdef int _attention_batch(const float *q, const void **k, const void **v, bint bf16kv, const os_idx *pos,
                          os_idx B, os_idx H, os_idx hd, os_idx Hkv, float scale, float *out, int n_threads,
                          bint to_bf16) noexcept nogil:
    """One query row per sequence b over its own cache (keys 0..pos[b]), in one
    parallel region: each (row, share of kv heads) task is _attention_rows's task
    for that sequence alone, with the same shares, so the same bits."""
    cdef os_idx group = H // Hkv, task, b, s, g0, g1, shares, n_tasks, most = 1
    cdef int nt
    cdef float *scores
    cdef os_idx per_thread
    for b in range(B):
        most = max(most, pos[b] + 1)
    per_thread = H * most
    shares = max(1, min(Hkv, n_threads))
    n_tasks = B * shares
    nt = _threads_for(n_tasks, n_threads)
    scores = <float *> malloc(nt * per_thread * sizeof(float))
    if scores == NULL:
        return -1
    for task in prange(n_tasks, schedule="static", num_threads=nt):
        b = task // shares
        s = task % shares
        g0 = Hkv * s // shares
        g1 = Hkv * (s + 1) // shares
        if not bf16kv:
            os_attention_heads(q + b * H * hd, <const float *> k[b], <const float *> v[b], Hkv * hd, pos[b] + 1,
                               hd, group, g0, g1, scale, scores + threadid() * per_thread, out + b * H * hd)
        else:
            os_attention_heads_bf16kv(q + b * H * hd, <const unsigned short *> k[b],
                                      <const unsigned short *> v[b], Hkv * hd, pos[b] + 1, hd, group, g0, g1,
                                      scale, scores + threadid() * per_thread, out + b * H * hd)
        if to_bf16:
            os_round_bf16(out + (b * H + g0 * group) * hd, out + (b * H + g0 * group) * hd,
                          (g1 - g0) * group * hd)
    free(scores)
    return 0


def decoder_layer_step_batch(DecoderLayer layer,
                             float[:, ::1] hidden,              # IN/OUT (B, D) residual streams, in place
                             tuple k_caches,                    # IN/OUT B arrays (n_layers, capacity_b, Hkv, hd)
                             tuple v_caches,                    # IN/OUT the same shapes
                             Py_ssize_t index,                  # which layer of the caches
                             const long long[::1] positions,   # IN  (B,) each token's position
                             const float[:, ::1] cos,           # IN  (B, head_dim) rotary rows of the positions
                             const float[:, ::1] sin,           # IN  (B, head_dim)
                             float scale,
                             int n_threads,
                             bint to_bf16=False):
    """One token of each of B sequences through ``layer``: DecoderLayer.step on
    every row, bit for bit, with each matrix read once for all rows.

    The caches are every layer's (the decoder's KVCache.k / .v of each sequence),
    all float32 or all bf16 bits; row positions[b] of layer ``index`` of cache b
    receives that sequence's key and value.
    """
    cdef os_idx B = hidden.shape[0], D = layer.hidden_size, H = layer.n_heads, Hkv = layer.n_kv_heads
    cdef os_idx hd = layer.head_dim, I = layer.intermediate_size, qn = H * hd, kn = Hkv * hd, i, b
    cdef float eps = layer._eps
    cdef bint bf16kv
    cdef float *buf
    cdef float *x
    cdef float *q
    cdef float *k
    cdef float *v
    cdef float *qr
    cdef float *kr
    cdef float *att
    cdef float *o
    cdef float *gate
    cdef float *up
    cdef float *act
    cdef float *h
    cdef float *ys[3]
    cdef const void **kp
    cdef const void **vp
    cdef os_idx *pos
    cdef float[:, :, :, ::1] kf
    cdef float[:, :, :, ::1] vf
    cdef unsigned short[:, :, :, ::1] kb
    cdef unsigned short[:, :, :, ::1] vb
    cdef list views = []
    cdef int rc = 0
    if B == 0:
        return
    if hidden.shape[1] != D or cos.shape[0] != B or sin.shape[0] != B or positions.shape[0] != B:
        raise ValueError(f"hidden ({B}, {hidden.shape[1]}), positions {positions.shape[0]}, cos {cos.shape[0]}, "
                         f"sin {sin.shape[0]} rows; expected ({B}, {D}) and {B} rows each")
    if cos.shape[1] != hd or sin.shape[1] != hd:
        raise ValueError(f"cos and sin rows hold {cos.shape[1]} and {sin.shape[1]} values; expected {hd}")
    if len(k_caches) != B or len(v_caches) != B:
        raise ValueError(f"{len(k_caches)} key and {len(v_caches)} value caches for {B} rows")
    bf16kv = k_caches[0].dtype.itemsize == 2
    buf = <float *> malloc((B * (2 * D + 3 * qn + 3 * kn + 3 * I) + 1) * sizeof(float))
    kp = <const void **> malloc(2 * B * sizeof(void *))
    pos = <os_idx *> malloc(B * sizeof(os_idx))
    if buf == NULL or kp == NULL or pos == NULL:
        free(buf)
        free(kp)
        free(pos)
        raise MemoryError("a batched decoder layer step needs its activations' scratch")
    vp = kp + B
    try:
        for b in range(B):
            kc, vc = k_caches[b], v_caches[b]
            if (kc.dtype.itemsize == 2) != bf16kv or (vc.dtype.itemsize == 2) != bf16kv:
                raise ValueError("the caches mix float32 and bf16; give all of one dtype")
            if bf16kv:
                kb, vb = kc, vc
                views.append((kb, vb))
                shape = (kb.shape[0], kb.shape[1], kb.shape[2], kb.shape[3])
                vshape = (vb.shape[0], vb.shape[1], vb.shape[2], vb.shape[3])
            else:
                kf, vf = kc, vc
                views.append((kf, vf))
                shape = (kf.shape[0], kf.shape[1], kf.shape[2], kf.shape[3])
                vshape = (vf.shape[0], vf.shape[1], vf.shape[2], vf.shape[3])
            if shape != vshape or shape[2] != Hkv or shape[3] != hd or not 0 <= index < shape[0]:
                raise ValueError(f"caches of sequence {b} have shapes {shape} and {vshape}; expected "
                                 f"(n_layers > {index}, capacity, {Hkv}, {hd}) each")
            if not 0 <= positions[b] < shape[1]:
                raise ValueError(f"position {positions[b]} of sequence {b} is outside its cache's 0..{shape[1] - 1}")
            pos[b] = positions[b]
            if bf16kv:
                kp[b] = &kb[index, 0, 0, 0]
                vp[b] = &vb[index, 0, 0, 0]
            else:
                kp[b] = &kf[index, 0, 0, 0]
                vp[b] = &vf[index, 0, 0, 0]
        x = buf
        q = x + B * D
        k = q + B * qn
        v = k + B * kn
        qr = v + B * kn
        kr = qr + B * qn
        att = kr + B * kn
        o = att + B * qn
        gate = o + B * D
        up = gate + B * I
        act = up + B * I
        h = &hidden[0, 0]
        with nogil:
            # attention block: q, k, v of every row in one region
            for b in range(B):
                _rms_norm_rounded(h + b * D, layer._norm[0], eps, x + b * D, D, to_bf16)
            ys[0], ys[1], ys[2] = q, k, v
            rc = layer._products(x, B, 0, 3, D, ys, n_threads, to_bf16)
            if rc == 0:
                for b in range(B):
                    for i in range(H):
                        _rms_norm_rounded(q + b * qn + i * hd, layer._norm[2], eps, q + b * qn + i * hd, hd,
                                          to_bf16)
                    for i in range(Hkv):
                        _rms_norm_rounded(k + b * kn + i * hd, layer._norm[3], eps, k + b * kn + i * hd, hd,
                                          to_bf16)
                    os_rope_token(q + b * qn, &cos[b, 0], &sin[b, 0], qr + b * qn, H, hd)
                    os_rope_token(k + b * kn, &cos[b, 0], &sin[b, 0], kr + b * kn, Hkv, hd)
                    if to_bf16:
                        os_round_bf16(qr + b * qn, qr + b * qn, qn)
                        os_round_bf16(kr + b * kn, kr + b * kn, kn)
                    if bf16kv:
                        os_f32_to_bf16(kr + b * kn, <unsigned short *> kp[b] + pos[b] * kn, kn)
                        os_f32_to_bf16(v + b * kn, <unsigned short *> vp[b] + pos[b] * kn, kn)
                    else:
                        memcpy(<float *> kp[b] + pos[b] * kn, kr + b * kn, kn * sizeof(float))
                        memcpy(<float *> vp[b] + pos[b] * kn, v + b * kn, kn * sizeof(float))
                rc = _attention_batch(qr, kp, vp, bf16kv, pos, B, H, hd, Hkv, scale, att, n_threads, to_bf16)
            if rc == 0:
                ys[0] = o
                rc = layer._products(att, B, 3, 1, qn, ys, n_threads, to_bf16)
            if rc == 0:
                for b in range(B):
                    _add_rounded(h + b * D, o + b * D, D, to_bf16)
                    # MLP block
                    _rms_norm_rounded(h + b * D, layer._norm[1], eps, x + b * D, D, to_bf16)
                ys[0], ys[1] = gate, up
                rc = layer._products(x, B, 4, 2, D, ys, n_threads, to_bf16)
            if rc == 0:
                for b in range(B):
                    os_swiglu(gate + b * I, up + b * I, act + b * I, I)
                    if to_bf16:
                        os_round_bf16(act + b * I, act + b * I, I)
                ys[0] = o
                rc = layer._products(act, B, 6, 1, I, ys, n_threads, to_bf16)
            if rc == 0:
                for b in range(B):
                    _add_rounded(h + b * D, o + b * D, D, to_bf16)
    finally:
        free(buf)
        free(kp)
        free(pos)
    if rc:
        raise MemoryError("a batched decoder layer step could not allocate its GEMV or attention scratch")
