/*
 * CRC-32C (Castagnoli) for kraftcore's native kernels.
 *
 * The functions here work on the raw CRC register: callers pass ~crc in and take ~result
 * out, which makes chaining free.  Three implementations, chosen once at run time:
 *
 *   - x86-64 with SSE4.2: the crc32 instruction, compiled through a target attribute so
 *     the module itself is built for the baseline ISA (never -march=native);
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
static int kc_crc_hw = 0; /* 0 none, 1 x86 sse4.2, 2 aarch64 crc */

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
static int kc_crc_detect(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
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
    kc_crc_hw = kc_crc_detect();
}

/* Update the raw register over n bytes with the best implementation available. */
static inline uint32_t kc_crc32c_update(uint32_t crc, const uint8_t *p, size_t n) {
    return kc_crc_hw ? kc_crc32c_hw(crc, p, n) : kc_crc32c_sw(crc, p, n);
}

static inline const char *kc_crc32c_hardware_name(void) {
    return kc_crc_hw == 1 ? "sse4.2" : kc_crc_hw == 2 ? "armv8-crc" : "none";
}

#endif /* KC_CRC32C_H */
