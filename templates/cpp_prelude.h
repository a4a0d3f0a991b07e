// Helpers for generated kernels: bf16 storage and NaN-propagating min/max.
#include <cmath>
#include <cstdint>
#include <cstring>

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

template <typename T> static inline T max_nan(T a, T b) {
    return (a > b || a != a) ? a : b;
}

template <typename T> static inline T min_nan(T a, T b) {
    return (a < b || a != a) ? a : b;
}
