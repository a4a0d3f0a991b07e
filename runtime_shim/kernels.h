// runtime_shim/kernels.h: the helpers every generated C++ kernel file includes.
// bf16 storage, wrapping integer arithmetic, NaN-propagating min/max, and exp, tanh,
// sigmoid, erf and GELU for float written so that `omp simd` loops vectorize them.
// Part of runtime_shim: the cache key of a compiled library includes this file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

static inline float bf16_to_float(uint16_t v) {
    uint32_t u = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if (std::isnan(f)) return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
}

// Integer arithmetic that wraps around as torch's does, where `a + b` on signed
// types would be undefined on overflow (and let the compiler fold `x + 1 > x`).
template <typename T> using wrap_t = typename std::make_unsigned<T>::type;
template <typename T> static inline T wrap_add(T a, T b) {
    return static_cast<T>(static_cast<wrap_t<T>>(a) + static_cast<wrap_t<T>>(b));
}
template <typename T> static inline T wrap_sub(T a, T b) {
    return static_cast<T>(static_cast<wrap_t<T>>(a) - static_cast<wrap_t<T>>(b));
}
template <typename T> static inline T wrap_mul(T a, T b) {
    return static_cast<T>(static_cast<wrap_t<T>>(a) * static_cast<wrap_t<T>>(b));
}
template <typename T> static inline T wrap_neg(T a) {
    return static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(a));
}
template <typename T> static inline T wrap_abs(T a) { return a < 0 ? wrap_neg(a) : a; }

// NaN wins, and of equal values the first (torch.maximum's -0.0 vs 0.0). Two
// selects that compilers turn into max instructions, and one NaN test: written
// with `||`, or with both NaN tests, the test merges with a ReLU's select before
// it into branches or a dozen blends per element.
template <typename T> static inline T max_nan(T a, T b) {
    T larger = b > a ? b : a;  // a where either is NaN
    T other = a > b ? a : b;  // b where either is NaN
    return other != other ? other : larger;
}

template <typename T> static inline T min_nan(T a, T b) {
    T smaller = b < a ? b : a;
    T other = a < b ? a : b;
    return other != other ? other : smaller;
}

// exp for float: exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln(2) / 2, with
// exp(r) from a degree-6 minimax polynomial: within 0.9 ulp. Adding 1.5 * 2^23 + 126
// rounds x / ln 2 to an integer and leaves n + 126 in the low bits of `t`, so one
// shift makes 2^(n - 1); the polynomial's coefficients are doubled to match. That
// way n = 128 (x up to ln(FLT_MAX)) is still finite, and n = -126 gives 0: results
// below 2^-125.5 (2.1e-38) flush to 0. Branch-free, so it vectorizes.
// `exp_in_range` takes x in [-87.34, 89]; `exp_f32` clamps any x into it, so -inf
// gives 0, inf gives inf and NaN passes through.
static inline float exp_in_range(float x) {
    float t = x * 1.44269504088896341f + 12583038.0f;
    float n = t - 12583038.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln 2 in two parts
    float p = 2.7629225515e-3f;  // 2 * exp(r)
    p = p * r + 1.6737420112e-2f;
    p = p * r + 8.3336777985e-2f;
    p = p * r + 3.3333042264e-1f;
    p = p * r + 9.9999988079e-1f;
    p = p * r + 2.0f;
    p = p * r + 2.0f;
    uint32_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    bits <<= 23;
    float half_scale;  // 2^(n - 1)
    std::memcpy(&half_scale, &bits, sizeof half_scale);
    return p * half_scale;
}
static inline float exp_f32(float x) {
    return exp_in_range(std::min(std::max(x, -87.3365447505f), 89.0f));
}
static inline double exp_f32(double x) { return std::exp(x); }

// tanh: Cephes' odd polynomial near zero, (1 - e) / (1 + e) with e = exp(-2|x|) beyond.
static inline float tanh_f32(float x) {
    float a = std::fabs(x);
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z
                     - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
                   - 3.33332819422e-1f) * z * x + x;
    float e = exp_f32(-2.0f * a);
    float large = std::copysign((1.0f - e) / (1.0f + e), x);
    return a < 0.625f ? small : large;
}
static inline double tanh_f32(double x) { return std::tanh(x); }

static inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }
static inline double sigmoid_f32(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// erf for float without a division (which costs as much as the rest): below 1,
// x * P(x^2); from 1 on, 1 - exp(Q(|x|)) with Q fitted to log(erfc), and |x| capped
// at 4, where erf is 1 in float. Both least-squares fits; |error| < 1.5e-7.
static inline float erf_f32(float x) {
    float a = std::fabs(x);
    float s = x * x;
    float p = -5.654105917e-04f;
    p = p * s + 4.923277535e-03f;
    p = p * s - 2.671638504e-02f;
    p = p * s + 1.128036454e-01f;
    p = p * s - 3.761234879e-01f;
    p = p * s + 1.128379107e+00f;
    float t = std::min(a, 4.0f);
    float q = -1.330938994e-05f;
    q = q * t + 3.175720340e-04f;
    q = q * t - 3.436867613e-03f;
    q = q * t + 2.262198552e-02f;
    q = q * t - 1.033189818e-01f;
    q = q * t - 6.390933394e-01f;
    q = q * t - 1.125925899e+00f;
    q = q * t - 7.569686277e-04f;
    float large = std::copysign(1.0f - exp_in_range(q), x);
    return a < 1.0f ? x * p : large;
}
static inline double erf_f32(double x) { return std::erf(x); }

// Exact GELU, x * Phi(x), for float from one exp-like evaluation and no division:
// h = Phi(-|x|) = 2^g, g a degree-7 polynomial in t = |x| fitted to log2 Phi(-t) on
// [0, 5.5] (minimax, the error weighted by h), and 2^g = 2^n * 2^f with n = round(g)
// and 2^f a degree-5 minimax fit on [-1/2, 1/2]. Then gelu = x * h below 0 and
// x - x * h above (no cancellation); from |x| = 5.5 on, h = 0 (Phi(-5.5) = 1.9e-8)
// and t stays 5.5, so that gelu(inf) = inf and gelu(-inf) = -0. |error| < 1.5e-7 *
// max(1, |x|), and < 1.8e-7 * |x| (relative accuracy near 0).
static inline float gelu_f32(float x) {
    float a = std::fabs(x);
    float t = a < 5.5f ? a : 5.5f;
    float g = 8.470160537e-06f;
    g = g * t - 5.390371371e-05f;
    g = g * t - 4.212359781e-04f;
    g = g * t + 7.389272563e-03f;
    g = g * t - 5.269111320e-02f;
    g = g * t - 4.591531456e-01f;
    g = g * t - 1.151110888e+00f;
    g = g * t - 9.999998808e-01f;
    float n = std::nearbyint(g);
    float f = g - n;
    float p = 1.325174584e-03f;
    p = p * f + 9.678361937e-03f;
    p = p * f + 5.550805479e-02f;
    p = p * f + 2.402203083e-01f;
    p = p * f + 6.931468844e-01f;
    p = p * f + 1.000000119e+00f;
    int32_t bits;
    std::memcpy(&bits, &p, sizeof bits);
    bits -= static_cast<int32_t>(-n) << 23;  // h = p * 2^n, n in [-26, -1]
    float h;
    std::memcpy(&h, &bits, sizeof h);
    h = a < 5.5f ? h : 0.0f;
    float xh = std::copysign(t, x) * h;
    return x <= 0.0f ? xh : x - xh;  // NaN takes the second branch
}
static inline double gelu_f32(double x) {
    return x == -INFINITY ? -0.0 : 0.5 * x * std::erfc(-x * 0.7071067811865476);
}

// A row's mean and the sum of squared deviations about it, from the row and a first
// mean `m` (its sum over n): the corrected two-pass algorithm (Chan, Golub and
// LeVeque, 1983). The deviations' sum e is the first mean's rounding error times n,
// so the mean is m + e / n and the sum of squares loses e * e / n. An inf in the
// row leaves the first mean (inf, as eager's) and a NaN sum. With L lanes, element
// r goes to lane r % L, and the lanes join at the end, as a reduction's loop does.
template <typename T> struct Spread {
    T mean;
    T squares;
};
template <typename T, int L = 0>
static inline Spread<T> row_spread(const T* row, int64_t n, T m) {
    T squares = 0;
    T residual = 0;
    if constexpr (L == 0) {
        #pragma omp simd reduction(+:squares) reduction(+:residual)
        for (int64_t r = 0; r < n; ++r) {
            T d = row[r] - m;
            squares += d * d;
            residual += d;
        }
    } else {
        T squares_lane[L] = {};
        T residual_lane[L] = {};
        int64_t whole = n - n % L;
        for (int64_t r1 = 0; r1 < whole; r1 += L) {
            #pragma omp simd
            for (int l = 0; l < L; ++l) {
                T d = row[r1 + l] - m;
                squares_lane[l] += d * d;
                residual_lane[l] += d;
            }
        }
        #pragma omp simd
        for (int64_t r = whole; r < n; ++r) {
            T d = row[r] - m;
            squares_lane[r - whole] += d * d;
            residual_lane[r - whole] += d;
        }
        #pragma omp simd reduction(+:squares) reduction(+:residual)
        for (int l = 0; l < L; ++l) {
            squares += squares_lane[l];
            residual += residual_lane[l];
        }
    }
    T error = residual / T(n);
    T less = squares - residual * error;
    return {error != error ? m : m + error, less < 0 ? T(0) : less};
}
