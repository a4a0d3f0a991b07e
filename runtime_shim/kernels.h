// runtime_shim/kernels.h: the helpers every generated C++ kernel file includes.
// bf16 storage, wrapping integer arithmetic, NaN-propagating min/max, and exp, log,
// log1p, expm1, sin, cos, tanh, sigmoid, erf and GELU for float written so that
// `omp simd` loops vectorize them.
// Part of runtime_shim: the cache key of a compiled library includes this file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

// GCC 12's superword-level vectorizer drops a double rounded to float and back in
// the pair it makes of a loop's last two elements; kernels that round doubles to
// float are compiled without it (Note [Doubles to float] in
// transpiler/codegen/cpp.py).
#if defined(__GNUC__) && !defined(__clang__)
#define ROUNDS_DOUBLES __attribute__((optimize("no-tree-slp-vectorize")))
#else
#define ROUNDS_DOUBLES
#endif

static inline float bf16_to_float(uint16_t v) {
    uint32_t u = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// round to nearest even; a NaN is 0x7fc0, as c10::BFloat16 rounds it. The NaN is chosen
// by a select, not a branch out: GCC vectorizes either, but the branch made an RMSNorm
// over [2048, 2048] bf16 a fifth slower (0.75 against 0.63 ms on two cores)
static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
    return static_cast<uint16_t>(f != f ? 0x7fc0u : rounded);
}

// int64 to and from float and double, as static_cast converts them, in operations
// AVX2 has: without AVX-512 it converts neither way, and GCC then leaves the whole
// loop scalar (Note [Conversions of int64] in transpiler/codegen/cpp.py).
// `from`'s bits as a `To` (C++20's std::bit_cast)
template <typename To, typename From> static inline To bit_cast(From from) {
    static_assert(sizeof(To) == sizeof(From), "bit_cast between sizes");
    To to;
    std::memcpy(&to, &from, sizeof to);
    return to;
}
// v = hi * 2^32 + lo, lo unsigned: the double of bits 2^84 + 2^63 + hi * 2^32 (hi's
// sign bit flipped into the mantissa) less 2^84 + 2^63 + 2^52 is hi * 2^32 - 2^52,
// exactly; adding the double of bits 2^52 + lo rounds once.
static inline double i64_to_f64(int64_t v) {
#if defined(__AVX512DQ__)
    return static_cast<double>(v);
#else
    uint64_t u = static_cast<uint64_t>(v);
    double hi = bit_cast<double>((u >> 32) ^ 0x4530000080000000ull) - 0x1.00000801p+84;
    return hi + bit_cast<double>((u & 0xffffffffull) | 0x4330000000000000ull);
#endif
}
// Exact in double below 2^53, so rounded once to float. From 2^36 on, float's last
// place is 2^13 or more, and bits 0..11 only tell a value off a tie (every float and
// tie there is a multiple of 2^12): they are kept as bit 11 alone, which leaves a
// value of 52 bits, exact in double, that rounds to the same float.
static inline float i64_to_f32(int64_t v) {
#if defined(__AVX512DQ__)
    return static_cast<float>(v);
#else
    uint64_t u = static_cast<uint64_t>(v);
    uint64_t kept = (u & ~0xfffull) | ((u & 0xfffull) != 0 ? 0x800ull : 0);
    bool wide = u + (1ull << 36) >= (1ull << 37);
    return static_cast<float>(i64_to_f64(static_cast<int64_t>(wide ? kept : u)));
#endif
}
// Truncated toward zero; NaN and what int64 does not hold give INT64_MIN, as x86's
// conversion instruction does (static_cast leaves them undefined). t = hi * 2^32 +
// lo, lo in [0, 2^32): 1.5 * 2^52 + hi holds hi's int32 in its low bits, 2^52 + lo
// holds lo.
static inline int64_t f64_to_i64(double x) {
#if defined(__AVX512DQ__)
    return std::fabs(x) < 0x1p63 ? static_cast<int64_t>(x) : INT64_MIN;
#else
    double t = std::trunc(x);
    double hi = std::floor(t * 0x1p-32);
    double lo = std::fma(hi, -0x1p32, t);  // exact
    uint64_t high = bit_cast<uint64_t>(hi + 0x1.8p52) << 32;
    uint64_t low = bit_cast<uint64_t>(lo + 0x1p52) & 0xffffffffull;
    int64_t v = static_cast<int64_t>(high | low);
    return std::fabs(t) < 0x1p63 ? v : INT64_MIN;
#endif
}
static inline int64_t f32_to_i64(float x) { return f64_to_i64(static_cast<double>(x)); }

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

// log for float: x = 2^k * m with m in [sqrt(1/2), sqrt(2)) from the bits (a
// subnormal x scaled by 2^23 first), and log(m) = f - f^2 / 2 + f^3 * P(f), f = m - 1,
// with Cephes' degree-8 P: within 1 ulp. 0 gives -inf, inf gives inf, x < 0 and NaN
// give NaN. Branch-free, so it vectorizes (std::log does not).
static inline float log_f32(float x) {
    bool subnormal = x < 1.17549435e-38f;
    float xs = subnormal ? x * 8388608.0f : x;
    int32_t bits;
    std::memcpy(&bits, &xs, sizeof bits);
    int32_t t = bits - 0x3f3504f3;  // the bits of sqrt(1/2)
    int32_t k = (t >> 23) - (subnormal ? 23 : 0);
    bits -= t & -8388608;  // 0xff800000
    float m;
    std::memcpy(&m, &bits, sizeof m);
    float f = m - 1.0f;
    float e = static_cast<float>(k);
    float z = f * f;
    float p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    float y = p * f * z - 2.12194440e-4f * e - 0.5f * z;  // ln 2 in two parts
    float r = (f + y) + 0.693359375f * e;
    r = x == INFINITY ? x : r;
    r = x == 0.0f ? -INFINITY : r;
    return x >= 0.0f ? r : NAN;  // NaN fails the test too
}
static inline double log_f32(double x) { return std::log(x); }

// log1p: log(u) for u = 1 + x, plus the rounding error of that sum over u (c, exact:
// Fast2Sum from the larger of 1 and |x|). Within 1.5 ulp; x = -1 gives -inf.
static inline float log1p_f32(float x) {
    float u = 1.0f + x;
    float c = std::fabs(x) <= 1.0f ? x - (u - 1.0f) : 1.0f - (u - x);
    float lu = log_f32(u);
    float r = u == 0.0f ? lu : lu + c / u;
    r = x == INFINITY ? lu : r;
    return x == 0.0f ? x : r;  // -0.0
}
static inline double log1p_f32(double x) { return std::log1p(x); }

// expm1: below |x| = 1/2 the Taylor series to x^8 (its remainder < 0.1 ulp); beyond,
// exp(x) - 1. Within 1.5 ulp.
static inline float expm1_f32(float x) {
    float p = 2.48015873e-5f;  // 1 / 8!
    p = p * x + 1.98412698e-4f;
    p = p * x + 1.38888889e-3f;
    p = p * x + 8.33333333e-3f;
    p = p * x + 4.16666667e-2f;
    p = p * x + 1.66666667e-1f;
    p = p * x + 0.5f;
    float small = x == 0.0f ? x : x + x * (x * p);  // -0.0
    return std::fabs(x) < 0.5f ? small : exp_f32(x) - 1.0f;
}
static inline double expm1_f32(double x) { return std::expm1(x); }

// 2^e mod 2 pi for e = 0 .. 104, each as a double and the double of its remainder
// (mpmath at 400 bits): a float of 2^23 or more is an integer M * 2^e, M < 2^24, and
// x mod 2 pi = M * (2^e mod 2 pi) mod 2 pi.
static const double kPow2Mod2Pi[210] = {
    1.0, 0.0, 2.0, 0.0,
    4.0, 0.0, 1.7168146928204135, -2.2884754904439327e-17,
    3.433629385640827, -4.5769509808878654e-17, 0.5840734641020676, -3.4014720596809827e-18,
    1.1681469282041352, -6.802944119361965e-18, 2.3362938564082705, -1.360588823872393e-17,
    4.672587712816541, -2.721177647744786e-17, 3.0619901184534952, 1.4473629706569626e-16,
    6.1239802369069904, 2.8947259413139253e-16, 5.964775166634395, 3.3401582843331437e-16,
    5.646365026089203, 4.2310229703715814e-16, 5.009544744998821, -2.869031854552796e-16,
    3.7359041828180546, 6.944268896009545e-17, 1.188623058456523, -1.0604398190927974e-16,
    2.377246116913046, -2.120879638185595e-16, 4.754492233826092, -4.24175927637119e-16,
    3.2257991604725964, -2.0510279540358334e-16, 0.1684130137656059, 1.0998864138456587e-17,
    0.3368260275312118, 2.1997728276913175e-17, 0.6736520550624236, 4.399545655382635e-17,
    1.3473041101248473, 8.79909131076527e-17, 2.6946082202496946, 1.759818262153054e-16,
    5.389216440499389, 3.519636524306108e-16, 4.495247573819193, -4.291804746683743e-16,
    2.707309840458799, -2.1511188946609392e-16, 5.414619680917598, -4.3022377893218785e-16,
    4.546054054655609, -2.1719849799372113e-16, 2.8089228021316304, 2.0885206388321233e-16,
    5.617845604263261, 4.1770412776642467e-16, 4.952505901346936, -2.976995239967466e-16,
    3.621826495514285, 4.7850011877161456e-17, 0.960467683848984, -3.820703361263207e-17,
    1.920935367697968, -7.641406722526414e-17, 3.841870735395936, -1.5282813445052828e-16,
    1.400556163612285, -1.0649641888046457e-16, 2.80111232722457, -2.1299283776092915e-16,
    5.60222465444914, -4.259856755218583e-16, 4.921264001718693, -2.0872229117306203e-16,
    3.5593426962577985, -2.1828473232553208e-16, 0.8355000853360102, -1.5365009705440884e-17,
    1.6710001706720203, -3.073001941088177e-17, 3.3420003413440407, -6.146003882176354e-17,
    0.4008153755084947, 2.0728621145807084e-17, 0.8016307510169894, 4.145724229161417e-17,
    1.6032615020339789, 8.291448458322833e-17, 3.2065230040679578, 1.6582896916645667e-16,
    0.12986070095632937, 3.4618516565559846e-18, 0.25972140191265874, 6.923703313111969e-18,
    0.5194428038253175, 1.3847406626223939e-17, 1.038885607650635, 2.7694813252447877e-17,
    2.07777121530127, 5.5389626504895754e-17, 4.15554243060254, 1.1077925300979151e-16,
    2.0278995540254936, -2.337085380988763e-17, 4.055799108050987, -4.674170761977526e-17,
    1.8284129089223877, 1.0567643478104146e-16, 3.6568258178447755, 2.1135286956208292e-16,
    1.030466328509965, -4.426822563033612e-17, 2.06093265701993, -8.853645126067224e-17,
    4.12186531403986, -1.7707290252134449e-16, 1.9605453209001322, 6.705864990293432e-17,
    3.9210906418002645, 1.3411729980586864e-16, 1.5589959764209427, 2.3305239782266665e-17,
    3.1179919528418854, 4.661047956453333e-17, 6.235983905683771, 9.322095912906666e-17,
    6.188782504187955, -5.848744157133731e-17, 6.094379701196324, -3.619042429721453e-16,
    5.905574095213061, -8.055942607363592e-17, 5.527962883246536, -4.060482119767425e-16,
    4.772740459313485, -1.6884736408283038e-16, 3.262295611447383, -1.3853487814506878e-16,
    0.24140591571517903, 5.356820577341173e-18, 0.48281183143035805, 1.0713641154682347e-17,
    0.9656236628607161, 2.1427282309364693e-17, 1.9312473257214322, 4.2854564618729387e-17,
    3.8624946514428644, 8.570912923745877e-17, 1.4418039957061426, -7.351110135455308e-17,
    2.883607991412285, -1.4702220270910616e-16, 5.76721598282457, -2.9404440541821233e-16,
    5.251246658469554, 5.5160249034229947e-17, 4.219308009759521, -1.3460886176101075e-16,
    2.1554307123394554, -7.005787350142952e-17, 4.310861424678911, -1.4011574700285904e-16,
    2.338537542178235, -8.107164398512609e-17, 4.67707508435647, -1.6214328797025217e-16,
    3.0709648615333527, -1.2512672591991234e-16, 6.141929723066705, -2.502534518398247e-16,
    6.000674138953824, 1.4274215619100522e-16, 5.718162970728061, 4.055495255253981e-17,
    5.153140634276536, -1.6381945472439102e-16, 4.0230959613734845, 3.156101504218726e-16,
    1.7630066155673831, -5.779826883578811e-17, 3.5260132311347663, -1.1559653767157621e-16,
    0.7688411550899459, -3.203322532256044e-17, 1.5376823101798918, -6.406645064512088e-17,
    3.0753646203597835, -1.2813290129024176e-16, 6.150729240719567, -2.562658025804835e-16,
    6.018273174259547, 1.3071745470968757e-16, 5.753361041339508, 1.650554958990453e-17,
    5.223536775499429, -2.1191826064966158e-16, 4.1638882438192715, 2.1941253857133145e-16,
    2.0445911804589567, 1.9389571731319223e-16, 4.089182360917913, 3.8779143462638446e-16,
    1.895179414656241, 8.656429957323569e-17,
};

// sin and cos of float: |x| = r + k pi / 2 with |r| <= pi / 4 (a little more where k
// rounds the other way), in double: |x| itself below 2^23, and from 2^23 on M * (2^e
// mod 2 pi) from the table as a double and its rounding error, so every float
// reduces without a branch. r carries an absolute error near 2^-52, against the
// 2^-29 that the float closest to a multiple of pi / 2 leaves; then Cephes' float
// polynomials on [-pi/4, pi/4]. Within 1.5 ulp; inf and NaN give NaN.
// a = |x|; r: the reduced argument, k: the quadrant, 0 .. 3 (any for inf and NaN)
static inline void reduce_pio2(float a, float& r_out, double& k_out) {
    uint32_t bits;
    std::memcpy(&bits, &a, sizeof bits);
    int64_t e = std::min(std::max(static_cast<int64_t>(bits >> 23) - 150, int64_t{0}), int64_t{104});
    int32_t mantissa = static_cast<int32_t>((bits & 0x7fffffu) | 0x800000u);
    // below 2^23, e is 0 and the table's row is (1, 0): hi is a, lo 0
    double m = a >= 8388608.0f ? mantissa : static_cast<double>(a);
    double hi = m * kPow2Mod2Pi[2 * e];
    double lo = std::fma(m, kPow2Mod2Pi[2 * e], -hi) + m * kPow2Mod2Pi[2 * e + 1];
    double k = std::nearbyint(hi * 0.6366197723675814);
    double r = std::fma(-k, 1.5707963267948966, hi);
    r = std::fma(-k, 6.123233995736766e-17, r);
    r = std::fma(-k, -1.4973849048591698e-33, r) + lo;
    r_out = static_cast<float>(r);
    k_out = k - 4.0 * std::floor(k * 0.25);
}
static inline float sin_poly(float r) {
    float z = r * r;
    float p = -1.9515295891e-4f;
    p = p * z + 8.3321608736e-3f;
    p = p * z - 1.6666654611e-1f;
    return r + r * (z * p);
}
static inline float cos_poly(float r) {
    float z = r * r;
    float p = 2.443315711809948e-5f;
    p = p * z - 1.388731625493765e-3f;
    p = p * z + 4.166664568298827e-2f;
    return 1.0f - 0.5f * z + z * (z * p);
}
// `keep ? v : w` as bit masks: a select on a value loaded from a table becomes a
// branch around the load in GCC, and then a masked gather AVX2 does not have.
static inline float blend(bool keep, float v, float w) {
    uint32_t vb, wb;
    std::memcpy(&vb, &v, sizeof vb);
    std::memcpy(&wb, &w, sizeof wb);
    uint32_t mask = -static_cast<uint32_t>(keep);
    vb = (vb & mask) | (wb & ~mask);
    std::memcpy(&v, &vb, sizeof v);
    return v;
}
static inline float flip_sign(float v, bool negative) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    bits ^= negative ? 0x80000000u : 0u;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}
// sin(|x| + quarter * pi / 2), the sign of x given to a sine (quarter 0)
static inline float sin_quarters(float x, double quarter) {
    float a = std::fabs(x);
    float r;
    double k;
    reduce_pio2(a, r, k);
    k = k + quarter >= 4.0 ? k + quarter - 4.0 : k + quarter;
    float v = k == 0.0 || k == 2.0 ? sin_poly(r) : cos_poly(r);
    v = flip_sign(v, (k >= 2.0) != (quarter == 0.0 && x < 0.0f));
    return blend(a < INFINITY, v, x - x);
}
static inline float sin_f32(float x) {
    return blend(x == 0.0f, x, sin_quarters(x, 0.0));  // -0.0
}
static inline double sin_f32(double x) { return std::sin(x); }
static inline float cos_f32(float x) { return sin_quarters(x, 1.0); }
static inline double cos_f32(double x) { return std::cos(x); }

// sin and cos of float for |x| < kNearTrig (2^17), as accurate as the above (1.55
// ulp at most, both, over 16M samples near and away from multiples of pi / 2) and
// five times faster where the table's loads do not vectorize (AVX2 without
// gathers): k = round(|x| * 2 / pi) is below 2^16, and pi / 2 in three floats
// leaves |x| - k pi / 2 exact to within a rounding of the result (Cody and Waite,
// with FMA). Farther (and inf, NaN) the result is wrong: a kernel that uses these
// runs again with the ones above where any argument is `far_trig`
// (Note [Sines near zero] in transpiler/codegen/cpp.py).
static const float kNearTrig = 131072.0f;
// 1 where `x` is not near (as an int: GCC does not vectorize a bool's `|=`)
static inline int32_t far_trig(float x) { return !(std::fabs(x) < kNearTrig); }
static inline float sin_near_quarters(float x, float quarter) {
    float a = std::fabs(x);
    float k = std::nearbyint(a * 0.636619772f);
    float r = std::fma(-k, 1.57079637f, a);
    r = std::fma(-k, -4.37113883e-08f, r);
    r = std::fma(-k, -1.71512451e-15f, r);
    k = k - 4.0f * std::floor(k * 0.25f) + quarter;
    k = k >= 4.0f ? k - 4.0f : k;
    float v = k == 0.0f || k == 2.0f ? sin_poly(r) : cos_poly(r);
    return flip_sign(v, (k >= 2.0f) != (quarter == 0.0f && x < 0.0f));
}
static inline float sin_near(float x) {
    return blend(x == 0.0f, x, sin_near_quarters(x, 0.0f));  // -0.0
}
static inline float cos_near(float x) { return sin_near_quarters(x, 1.0f); }

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
