// Index ops. Every op first turns its ids (any index dtype, any layout) into
// contiguous i64 checked against the dim's size (ids_check: a bad id is
// reported in the error word, errors.py); the kernels that follow trust them.
//
// scatter, scatter_add and index_add write into a contiguous copy of x that
// the host made: a thread owns a fiber along `dim` and applies its updates
// in order, so no two threads write one element (no atomics) and duplicate
// ids give the same result on every run.
#include "scalar.cuh"

__device__ __forceinline__ i64 read_id(const void* ids, int dtype, i64 k) {
    switch (dtype) {
        case DT_u8: return ((const u8*)ids)[k];
        case DT_u32: return ((const u32*)ids)[k];
        case DT_i16: return ((const i16*)ids)[k];
        case DT_i32: return ((const i32*)ids)[k];
        default: return ((const i64*)ids)[k];
    }
}

KERNEL(ids_check, i64* out, const void* ids, i32 dtype, i64 n, i64 size, i64* err, Strided<1> l) {
    GRID_LOOP(i, n) {
        i64 o[1];
        offsets(l, i, o);
        i64 v = read_id(ids, dtype, o[0]);
        if (v < 0 || v >= size) {
            report(err, ERR_INDEX, i);
            v = 0;
        }
        out[i] = v;
    }
}

// index_select and gather: out[i] = x at `base` (the layout of operand 0, x's strides with the
// indexed dim's stride 0, walked over out's shape) + ids[...] * step. index_select reads ids at
// out's coordinate along dim (coordinate `dim` of the Strided shape); gather at i itself.
template <typename W>
__device__ void select_impl(W* out, const W* x, const i64* ids, i64 n, i64 step, i32 dim, const Strided<1>& l) {
    GRID_LOOP(i, n) {
        i64 o[1];
        offsets(l, i, o);
        i64 id;
        if (dim < 0) {
            id = ids[i];
        } else {
            i64 rest = i;
            for (int d = l.rank - 1; d > dim; --d) rest /= l.shape[d];
            id = ids[rest % l.shape[dim]];
        }
        out[i] = x[o[0] + id * step];
    }
}
#define SELECT(W, bits)                                                                               \
    KERNEL(select_##bits, W* out, const W* x, const i64* ids, i64 n, i64 step, i32 dim, Strided<1> l) { \
        select_impl<W>(out, x, ids, n, step, dim, l);                                                 \
    }
SELECT(u8, 8) SELECT(u16, 16) SELECT(u32, 32) SELECT(u64, 64)

template <typename T>
__device__ __forceinline__ T add(T a, T b) {
    if constexpr (IsFloat<T>::value) return store<T>(load(a) + load(b));
    else return w_add(a, b);
}

// scatter (accumulate 0) and scatter_add (1): fibers over ids' shape without dim, operands
// 0 out, 1 src, 2 ids; along dim, out steps out_step per id unit, src and ids their own steps.
template <typename T>
__device__ void scatter_impl(T* out, const T* src, const i64* ids, i64 n_fib, i64 len, i64 out_step, i64 src_step,
                             i64 ids_step, i32 accumulate, const Strided<3>& fib) {
    GRID_LOOP(f, n_fib) {
        i64 o[3];
        offsets(fib, f, o);
        for (i64 j = 0; j < len; ++j) {
            T* dst = out + o[0] + ids[o[2] + j * ids_step] * out_step;
            T v = src[o[1] + j * src_step];
            *dst = accumulate ? add(*dst, v) : v;
        }
    }
}
#define SCATTER(T)                                                                                          \
    KERNEL(scatter_##T, T* out, const T* src, const i64* ids, i64 n_fib, i64 len, i64 out_step, i64 src_step, \
           i64 ids_step, i32 accumulate, Strided<3> fib) {                                                  \
        scatter_impl<T>(out, src, ids, n_fib, len, out_step, src_step, ids_step, accumulate, fib);          \
    }
FOR_ALL(SCATTER)
