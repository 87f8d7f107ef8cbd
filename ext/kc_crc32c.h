/*
 * CRC-32C (Castagnoli) for kraftcore's native kernels.
 *
 * The functions here work on the raw CRC register: callers pass ~crc in and take ~result
 * out, which makes chaining free.  The implementation is chosen once at run time:
 *
 *   - x86-64 with SSE4.2: the crc32 instruction, compiled through a target attribute so
 *     the module itself is built for the baseline ISA (never -march=native); where the CPU
 *     also has AVX2 and VPCLMULQDQ, buffers from 256 bytes are folded with carry-less
 *     multiplies, and from KC_CRC_SUPER bytes the crc32 instruction runs on part of each
 *     block alongside them (below);
 *   - aarch64 with the CRC extension: the crc32c instructions, likewise;
 *   - anywhere else, or when built with -DKC_CRC_NO_HW: slicing-by-8 tables.
 *
 * The hardware paths run three independent streams over three adjacent blocks so the
 * instruction's latency (3 cycles, one issued per cycle) is hidden, then merge the three
 * partial registers.  Merging uses linearity: crc(s, A||B) = shift_len(B)(crc(s, A)) ^
 * crc(0, B), where shift_L is "feed L zero bytes", a linear map on 32-bit registers that
 * is tabulated once per block length as four 256-entry tables.
 */
#ifndef KC_CRC32C_H
#define KC_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KC_CRC32C_POLY 0x82F63B78u

/* Block lengths (bytes per stream) of the interleaved loops, long first. */
#define KC_CRC_LONG 8192
#define KC_CRC_SHORT 256

static uint32_t kc_crc_table[8][256];
static uint32_t kc_crc_shift_long[4][256];
static uint32_t kc_crc_shift_short[4][256];
static int kc_crc_hw = 0; /* 0 none, 1 x86 sse4.2, 2 aarch64 crc, 3 x86 sse4.2 + vpclmulqdq */

static inline uint32_t kc_load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Portable slicing-by-8. */
static uint32_t kc_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = kc_crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo = kc_load_le32(p) ^ crc;
        uint32_t hi = kc_load_le32(p + 4);
        crc = kc_crc_table[7][lo & 0xFF] ^ kc_crc_table[6][(lo >> 8) & 0xFF] ^
              kc_crc_table[5][(lo >> 16) & 0xFF] ^ kc_crc_table[4][lo >> 24] ^
              kc_crc_table[3][hi & 0xFF] ^ kc_crc_table[2][(hi >> 8) & 0xFF] ^
              kc_crc_table[1][(hi >> 16) & 0xFF] ^ kc_crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = kc_crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

static inline uint32_t kc_crc_shift(const uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^
           table[3][crc >> 24];
}

/* Tabulate "feed `len` zero bytes" from its action on the 32 basis registers. */
static void kc_crc_make_shift(uint32_t table[4][256], size_t len) {
    static const uint8_t zeros[256] = {0};
    uint32_t column[32];
    for (int bit = 0; bit < 32; bit++) {
        uint32_t crc = (uint32_t)1 << bit;
        size_t left = len;
        while (left) {
            size_t step = left < sizeof(zeros) ? left : sizeof(zeros);
            crc = kc_crc32c_sw(crc, zeros, step);
            left -= step;
        }
        column[bit] = crc;
    }
    for (int k = 0; k < 4; k++) {
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int i = 0; i < 8; i++)
                if (b & (1 << i)) v ^= column[8 * k + i];
            table[k][b] = v;
        }
    }
}

/* Each hardware back end defines KC_HW_TARGET (a target attribute, so the rest of the
 * module stays baseline ISA), KC_HW_U64 / KC_HW_U8 (one CRC step over 8 bytes / 1 byte)
 * and kc_crc_detect(); the loops below are written once for all of them. */

/* ---------------------------------------------------------------- x86-64 */
#if defined(KC_CRC_NO_HW)
/* built without hardware paths on purpose (to exercise the portable build) */
#elif (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER))
#define KC_HW 1
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#include <nmmintrin.h>
#define KC_HW_TARGET
#define KC_HW_U64(c, v) ((uint32_t)_mm_crc32_u64((c), (v)))
#define KC_HW_U8(c, v) _mm_crc32_u8((c), (v))
static int kc_crc_detect(void) {
    int info[4];
    __cpuid(info, 1);
    return ((info[2] >> 20) & 1) ? 1 : 0; /* CPUID.1:ECX.SSE4_2 */
}
#else
#define KC_HW_TARGET __attribute__((target("sse4.2")))
#define KC_HW_U64(c, v) ((uint32_t)__builtin_ia32_crc32di((c), (v)))
#define KC_HW_U8(c, v) __builtin_ia32_crc32qi((c), (v))
/* clang-cl is left out: its immintrin.h declares these intrinsics only for the ISA named on
 * the command line */
#if !defined(KC_CRC_NO_VPCLMUL) && !defined(_MSC_VER) && (defined(__clang__) || __GNUC__ >= 9)
#define KC_VPCLMUL 1
#endif
static int kc_crc_detect(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2")) return 0;
#ifdef KC_VPCLMUL
    /* avx2 is reported only where the OS saves the YMM registers; libgcc before GCC 10
     * reports vpclmulqdq only along with AVX-512, so such builds may take path 1 */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul") &&
        __builtin_cpu_supports("vpclmulqdq"))
        return 3;
#endif
    return 1;
}
#endif

/* ---------------------------------------------------------------- aarch64 */
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define KC_HW 1
#include <arm_acle.h>
#if defined(__clang__)
#define KC_HW_TARGET __attribute__((target("crc")))
#else
#define KC_HW_TARGET __attribute__((target("+crc")))
#endif
#define KC_HW_U64(c, v) __crc32cd((c), (v))
#define KC_HW_U8(c, v) __crc32cb((c), (v))
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
static int kc_crc_detect(void) { return (getauxval(AT_HWCAP) & HWCAP_CRC32) ? 2 : 0; }
#elif defined(__APPLE__)
static int kc_crc_detect(void) { return 2; } /* every Apple arm64 core has the CRC extension */
#else
static int kc_crc_detect(void) { return 0; }
#endif
#endif

#ifdef KC_HW
static inline uint64_t kc_load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* both back ends are little-endian; memcpy keeps it alignment-safe */
    return v;
}

KC_HW_TARGET static uint32_t kc_crc32c_hw_1(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = KC_HW_U8(crc, *p++);
        n--;
    }
    while (n >= 8) {
        crc = KC_HW_U64(crc, kc_load_u64(p));
        p += 8;
        n -= 8;
    }
    while (n--) crc = KC_HW_U8(crc, *p++);
    return crc;
}

/* Three streams over three adjacent blocks of `block` bytes, merged per round. */
KC_HW_TARGET static uint32_t kc_crc32c_hw_3way(uint32_t crc, const uint8_t *p, size_t n, size_t block,
                                                const uint32_t shift[4][256]) {
    while (n >= 3 * block) {
        uint32_t a = crc, b = 0, c = 0;
        const uint8_t *pa = p, *pb = p + block, *pc = p + 2 * block;
        for (size_t i = 0; i < block; i += 8) {
            a = KC_HW_U64(a, kc_load_u64(pa + i));
            b = KC_HW_U64(b, kc_load_u64(pb + i));
            c = KC_HW_U64(c, kc_load_u64(pc + i));
        }
        crc = kc_crc_shift(shift, a) ^ b;
        crc = kc_crc_shift(shift, crc) ^ c;
        p += 3 * block;
        n -= 3 * block;
    }
    return kc_crc32c_hw_1(crc, p, n);
}

KC_HW_TARGET static uint32_t kc_crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = KC_HW_U8(crc, *p++);
        n--;
    }
    if (n >= 3 * KC_CRC_LONG) {
        size_t run = n - n % (3 * KC_CRC_LONG);
        crc = kc_crc32c_hw_3way(crc, p, run, KC_CRC_LONG, kc_crc_shift_long);
        p += run;
        n -= run;
    }
    return kc_crc32c_hw_3way(crc, p, n, KC_CRC_SHORT, kc_crc_shift_short);
}
#else
static int kc_crc_detect(void) { return 0; }
static uint32_t kc_crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) { return kc_crc32c_sw(crc, p, n); }
#endif

/* ---------------------------------------------------------------- x86-64 VPCLMULQDQ
 *
 * Folding. Load 16 bytes little-endian into a 128-bit lane: bit i of the lane is the
 * coefficient of x^(127-i) of the message polynomial A of those bytes (the reflected
 * order). The bytes' weight in the whole message is A * x^D, D the number of bits after
 * them, and only the CRC, (message * x^32) mod P, matters, so A may be replaced by anything
 * congruent to it mod P once moved forward. Moving A forward by F bits onto a later lane B
 * (weight x^(D-F)) means adding A * x^F to B; with A = H * x^64 + L (H in the lane's low
 * 64 bits, L in its high 64), A * x^F = H * (x^(F+64) mod P) + L * (x^F mod P) mod P, two
 * 64 x 32-bit carry-less products of at most 96 bits, which fit lane B. On reflected
 * operands the carry-less multiply yields the product times x, so the constants are
 * x^(F+63) mod P and x^(F-1) mod P, bit-reflected into the high half of a 64-bit word.
 *
 * The initial register is XORed into the first four bytes (crc(c, M) = crc(0, M ^ c)).
 * At the end the last lane is reduced by the crc32 instruction: crc(0, lane) is
 * (lane * x^32) mod P. Four 256-bit registers (eight lanes) fold 128 bytes per step.
 *
 * From KC_CRC_SUPER bytes, each block of KC_CRC_SUPER bytes is split: the first
 * KC_CRC_FOLD_BYTES are folded while the crc32 instruction runs three streams over the
 * three KC_CRC_STREAM_BYTES after them, in the same loop (the two use different execution
 * units); the parts are merged with the shift tables. */
#ifdef KC_VPCLMUL
#include <immintrin.h>
#define KC_VPCLMUL_TARGET __attribute__((target("sse4.2,pclmul,avx2,vpclmulqdq")))
#define KC_CRC_FOLD_STEPS 64
#define KC_CRC_STREAM_STEP 40 /* bytes per stream per fold step: 5 crc32 instructions */
#define KC_CRC_FOLD_BYTES (128 * KC_CRC_FOLD_STEPS)
#define KC_CRC_STREAM_BYTES (KC_CRC_STREAM_STEP * KC_CRC_FOLD_STEPS)
#define KC_CRC_SUPER (KC_CRC_FOLD_BYTES + 3 * KC_CRC_STREAM_BYTES)

static uint32_t kc_crc_shift_stream[4][256];
static uint64_t kc_fold_k1024[2], kc_fold_k256[2], kc_fold_k128[2];

/* x^e mod P, bit-reflected into the high 32 bits of a 64-bit word. */
static uint64_t kc_crc_xpow(unsigned e) {
    uint32_t r = 0x80000000u; /* 1 */
    while (e--) r = (r & 1) ? (r >> 1) ^ KC_CRC32C_POLY : r >> 1;
    return (uint64_t)r << 32;
}

static void kc_crc_fold_init(void) {
    static const unsigned folds[3] = {1024, 256, 128};
    uint64_t *constants[3] = {kc_fold_k1024, kc_fold_k256, kc_fold_k128};
    for (int i = 0; i < 3; i++) {
        constants[i][0] = kc_crc_xpow(folds[i] + 63); /* for the lane's low 64 bits */
        constants[i][1] = kc_crc_xpow(folds[i] - 1);  /* for its high 64 bits */
    }
    kc_crc_make_shift(kc_crc_shift_stream, KC_CRC_STREAM_BYTES);
}

KC_VPCLMUL_TARGET static inline __m256i kc_fold256(__m256i x, __m256i k) {
    return _mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00), _mm256_clmulepi64_epi128(x, k, 0x11));
}

KC_VPCLMUL_TARGET static inline __m128i kc_fold128(__m128i x, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

KC_VPCLMUL_TARGET static inline __m256i kc_load256(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* The CRC register after folding `steps` x 128 bytes at p (steps >= 1) from register crc,
 * with (when `streams` is not NULL) the crc32 instruction run from register 0 over three
 * streams of `steps` x KC_CRC_STREAM_STEP bytes starting at `streams`, their registers
 * left in out[0..2]. */
KC_VPCLMUL_TARGET static uint32_t kc_crc_fold(uint32_t crc, const uint8_t *p, size_t steps,
                                              const uint8_t *streams, uint32_t out[3]) {
    const __m256i k1024 = _mm256_set_epi64x((long long)kc_fold_k1024[1], (long long)kc_fold_k1024[0],
                                            (long long)kc_fold_k1024[1], (long long)kc_fold_k1024[0]);
    const __m256i k256 = _mm256_set_epi64x((long long)kc_fold_k256[1], (long long)kc_fold_k256[0],
                                           (long long)kc_fold_k256[1], (long long)kc_fold_k256[0]);
    const __m128i k128 = _mm_set_epi64x((long long)kc_fold_k128[1], (long long)kc_fold_k128[0]);
    __m256i y0 = _mm256_xor_si256(kc_load256(p), _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, (int)crc));
    __m256i y1 = kc_load256(p + 32), y2 = kc_load256(p + 64), y3 = kc_load256(p + 96);
    uint64_t s0 = 0, s1 = 0, s2 = 0;
    const uint8_t *b0 = streams, *b1 = streams, *b2 = streams;
    if (streams) {
        b1 = streams + steps * KC_CRC_STREAM_STEP;
        b2 = b1 + steps * KC_CRC_STREAM_STEP;
    }
    for (size_t step = 0;;) {
        if (streams) {
            for (int i = 0; i < KC_CRC_STREAM_STEP; i += 8) {
                s0 = _mm_crc32_u64(s0, kc_load_u64(b0 + i));
                s1 = _mm_crc32_u64(s1, kc_load_u64(b1 + i));
                s2 = _mm_crc32_u64(s2, kc_load_u64(b2 + i));
            }
            b0 += KC_CRC_STREAM_STEP;
            b1 += KC_CRC_STREAM_STEP;
            b2 += KC_CRC_STREAM_STEP;
        }
        if (++step == steps) break;
        p += 128;
        y0 = _mm256_xor_si256(kc_fold256(y0, k1024), kc_load256(p));
        y1 = _mm256_xor_si256(kc_fold256(y1, k1024), kc_load256(p + 32));
        y2 = _mm256_xor_si256(kc_fold256(y2, k1024), kc_load256(p + 64));
        y3 = _mm256_xor_si256(kc_fold256(y3, k1024), kc_load256(p + 96));
    }
    if (streams) {
        out[0] = (uint32_t)s0;
        out[1] = (uint32_t)s1;
        out[2] = (uint32_t)s2;
    }
    __m256i y = _mm256_xor_si256(kc_fold256(y0, k256), y1);
    y = _mm256_xor_si256(kc_fold256(y, k256), y2);
    y = _mm256_xor_si256(kc_fold256(y, k256), y3);
    __m128i x = _mm_xor_si128(kc_fold128(_mm256_castsi256_si128(y), k128), _mm256_extracti128_si256(y, 1));
    /* compilers add it to a target-attribute function only at some optimisation levels
     * (GCC 12: at -O2, not at -O3); without it the SSE code that runs next pays for the
     * dirty upper halves (~100 ns a call measured) */
    _mm256_zeroupper();
    uint32_t c = (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    return (uint32_t)_mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
}

KC_VPCLMUL_TARGET static uint32_t kc_crc32c_vpclmul(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t streams[3];
    while (n >= KC_CRC_SUPER) {
        crc = kc_crc_fold(crc, p, KC_CRC_FOLD_STEPS, p + KC_CRC_FOLD_BYTES, streams);
        crc = kc_crc_shift(kc_crc_shift_stream, crc) ^ streams[0];
        crc = kc_crc_shift(kc_crc_shift_stream, crc) ^ streams[1];
        crc = kc_crc_shift(kc_crc_shift_stream, crc) ^ streams[2];
        p += KC_CRC_SUPER;
        n -= KC_CRC_SUPER;
    }
    if (n >= 256) {
        size_t run = n & ~(size_t)127;
        crc = kc_crc_fold(crc, p, run / 128, NULL, NULL);
        p += run;
        n -= run;
    }
    return kc_crc32c_hw(crc, p, n);
}
#endif

/* Build the tables and pick the implementation; call once before any other function. */
static void kc_crc32c_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t crc = b;
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ KC_CRC32C_POLY : crc >> 1;
        kc_crc_table[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t crc = kc_crc_table[0][b];
        for (int t = 1; t < 8; t++) {
            crc = kc_crc_table[0][crc & 0xFF] ^ (crc >> 8);
            kc_crc_table[t][b] = crc;
        }
    }
    kc_crc_make_shift(kc_crc_shift_long, KC_CRC_LONG);
    kc_crc_make_shift(kc_crc_shift_short, KC_CRC_SHORT);
    int hw = kc_crc_detect();
#ifdef KC_VPCLMUL
    if (hw == 3) kc_crc_fold_init(); /* before the path can be chosen */
#endif
    kc_crc_hw = hw;
}

/* Update the raw register over n bytes with the best implementation available. */
static inline uint32_t kc_crc32c_update(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef KC_VPCLMUL
    if (kc_crc_hw == 3) return kc_crc32c_vpclmul(crc, p, n);
#endif
    return kc_crc_hw ? kc_crc32c_hw(crc, p, n) : kc_crc32c_sw(crc, p, n);
}

static inline const char *kc_crc32c_hardware_name(void) {
    return kc_crc_hw == 3   ? "sse4.2+vpclmulqdq"
           : kc_crc_hw == 1 ? "sse4.2"
           : kc_crc_hw == 2 ? "armv8-crc"
                            : "none";
}

#endif /* KC_CRC32C_H */
