// Reductions over any set of dims (sum, prod, max, min, argmax, argmin) and
// cumsum along one dim.
//
// The host orders the dims: kept ones (their layout `kept`, over the
// outputs) and reduced ones (`red`, over each output's inputs), each merged.
// When the innermost reduced dim is contiguous, a block reduces each output
// (its threads read neighbours); otherwise a thread does (neighbouring
// threads then read neighbouring outputs' inputs). The order of the
// accumulation is fixed by the shape alone, so results are reproducible.
// Floats accumulate in f64 (sum, prod) or their compute type (max, min);
// integers in 64-bit wrapping arithmetic; max and min propagate NaN, and
// arg* give the first extreme (the first NaN) as a flat index within the
// reduced dims.
#include "scalar.cuh"

// An accumulator: a value, and for arg* the flat index it came from.
template <typename A>
struct Acc2 {
    A v;
    i64 i;
};

template <typename T> struct Red { typedef double type; };
template <> struct Red<u8> { typedef u64 type; };
template <> struct Red<u32> { typedef u64 type; };
template <> struct Red<i16> { typedef u64 type; };
template <> struct Red<i32> { typedef u64 type; };
template <> struct Red<i64> { typedef u64 type; };

template <typename A> __device__ __forceinline__ bool is_nan(A v) { return v != v; }

// Whether (v, i) should replace (w, j) for the op: the greater (max) or lesser (min) value,
// NaN first, and the lower index between equals.
template <typename A>
__device__ __forceinline__ bool better(int op, A v, i64 i, A w, i64 j) {
    if (j < 0) return true;
    bool vn = is_nan(v), wn = is_nan(w);
    if (vn || wn) return vn && (!wn || i < j);
    bool max = op == REDUCE_max || op == REDUCE_argmax;
    if (v == w) return i < j;
    return max ? v > w : v < w;
}

template <typename T>
struct Reducer {
    typedef typename Red<T>::type R;   // sum and prod
    typedef typename Acc<T>::type C;   // max, min, arg*
    int op;

    __device__ Acc2<R> start_sum() const { return {op == REDUCE_prod ? R(1) : R(0), 0}; }

    __device__ void add(Acc2<R>& s, Acc2<C>& m, T x, i64 i) const {
        if (op == REDUCE_sum) s.v = s.v + (R)load(x);
        else if (op == REDUCE_prod) s.v = s.v * (R)load(x);
        else if (better(op, load(x), i, m.v, m.i)) m = {load(x), i};
    }

    __device__ void merge(Acc2<R>& s, Acc2<C>& m, const Acc2<R>& s2, const Acc2<C>& m2) const {
        if (op == REDUCE_sum) s.v = s.v + s2.v;
        else if (op == REDUCE_prod) s.v = s.v * s2.v;
        else if (m2.i >= 0 && better(op, m2.v, m2.i, m.v, m.i)) m = m2;
    }

    __device__ void write(void* out, i64 o, const Acc2<R>& s, const Acc2<C>& m) const {
        if (op == REDUCE_argmax || op == REDUCE_argmin) ((u32*)out)[o] = (u32)m.i;
        else if (op == REDUCE_max || op == REDUCE_min) ((T*)out)[o] = store<T>(m.v);
        else if constexpr (IsFloat<T>::value) ((T*)out)[o] = convert<T, f64>(s.v);
        else ((T*)out)[o] = (T)s.v;  // wraps
    }
};

template <typename T>
__device__ void reduce_impl(void* out, const T* x, i64 n_out, i64 n_red, int op, int per_block,
                            const Strided<1>& kept, const Strided<1>& red) {
    typedef typename Red<T>::type R;
    typedef typename Acc<T>::type C;
    const Reducer<T> r{op};
    if (!per_block) {  // a thread per output
        GRID_LOOP(o, n_out) {
            i64 ko[1];
            offsets(kept, o, ko);
            Acc2<R> s = r.start_sum();
            Acc2<C> m = {C(0), -1};
            for (i64 j = 0; j < n_red; ++j) {
                i64 ro[1];
                offsets(red, j, ro);
                r.add(s, m, x[ko[0] + ro[0]], j);
            }
            r.write(out, o, s, m);
        }
        return;
    }
    __shared__ Acc2<R> ss[256];
    __shared__ Acc2<C> ms[256];
    for (i64 o = blockIdx.x; o < n_out; o += gridDim.x) {  // a block per output
        i64 ko[1];
        offsets(kept, o, ko);
        Acc2<R> s = r.start_sum();
        Acc2<C> m = {C(0), -1};
        for (i64 j = threadIdx.x; j < n_red; j += blockDim.x) {
            i64 ro[1];
            offsets(red, j, ro);
            r.add(s, m, x[ko[0] + ro[0]], j);
        }
        ss[threadIdx.x] = s;
        ms[threadIdx.x] = m;
        __syncthreads();
        for (int half = blockDim.x / 2; half > 0; half /= 2) {
            if ((int)threadIdx.x < half) r.merge(ss[threadIdx.x], ms[threadIdx.x], ss[threadIdx.x + half], ms[threadIdx.x + half]);
            __syncthreads();
        }
        if (threadIdx.x == 0) r.write(out, o, ss[0], ms[0]);
        __syncthreads();
    }
}
#define REDUCE(T)                                                                                    \
    KERNEL(reduce_##T, void* out, const T* x, i64 n_out, i64 n_red, i32 op, i32 per_block, Strided<1> kept, \
           Strided<1> red) {                                                                         \
        reduce_impl<T>(out, x, n_out, n_red, op, per_block, kept, red);                              \
    }
FOR_ALL(REDUCE)

// cumsum: a thread per fiber along the dim (fibers: the other dims, in operand 0 x's strides and
// operand 1 out's), summing in order.
template <typename T>
__device__ void cumsum_impl(T* out, const T* x, i64 n_fib, i64 len, i64 x_step, i64 out_step, const Strided<2>& fib) {
    typedef typename Red<T>::type R;
    GRID_LOOP(f, n_fib) {
        i64 o[2];
        offsets(fib, f, o);
        R acc = R(0);
        for (i64 j = 0; j < len; ++j) {
            acc = acc + (R)load(x[o[0] + j * x_step]);
            if constexpr (IsFloat<T>::value) out[o[1] + j * out_step] = convert<T, f64>(acc);
            else out[o[1] + j * out_step] = (T)acc;
        }
    }
}
#define CUMSUM(T)                                                                                      \
    KERNEL(cumsum_##T, T* out, const T* x, i64 n_fib, i64 len, i64 x_step, i64 out_step, Strided<2> fib) { \
        cumsum_impl<T>(out, x, n_fib, len, x_step, out_step, fib);                                     \
    }
FOR_ALL(CUMSUM)
