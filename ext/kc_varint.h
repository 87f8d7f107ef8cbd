/*
 * Kafka varints for the native kernels (kafka-facts §1.1): LEB128 unsigned forms, zigzag
 * signed forms.  Readers never touch a byte at or beyond `end`; they return the number of
 * bytes consumed, 0 when the input ends inside the varint, -1 when the bytes cannot be a
 * varint of that width (continuation on the last allowed byte, or bits beyond the width).
 * Writers need room for 5 (32-bit) or 10 (64-bit) bytes and return the bytes written.
 */
#ifndef KC_VARINT_H
#define KC_VARINT_H

#include <stddef.h>
#include <stdint.h>

static inline int kc_read_uvarint32(const uint8_t *p, const uint8_t *end, uint32_t *out) {
    uint32_t value = 0;
    for (int i = 0; i < 5; i++) {
        if (p + i >= end) return 0;
        uint8_t byte = p[i];
        if (i == 4 && (byte >> 4)) return -1;
        value |= (uint32_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *out = value;
            return i + 1;
        }
    }
    return -1; /* not reached: the fifth byte either ends the varint or fails above */
}

static inline int kc_read_uvarint64(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t value = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= end) return 0;
        uint8_t byte = p[i];
        if (i == 9 && (byte >> 1)) return -1;
        value |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *out = value;
            return i + 1;
        }
    }
    return -1;
}

static inline int kc_read_varint32(const uint8_t *p, const uint8_t *end, int32_t *out) {
    uint32_t raw;
    int n;
    /* one-byte fast path: most record fields are small */
    if (p < end && !(p[0] & 0x80)) {
        raw = p[0];
        *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1)));
        return 1;
    }
    n = kc_read_uvarint32(p, end, &raw);
    if (n > 0) *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1)));
    return n;
}

static inline int kc_read_varint64(const uint8_t *p, const uint8_t *end, int64_t *out) {
    uint64_t raw;
    int n;
    if (p < end && !(p[0] & 0x80)) {
        raw = p[0];
        *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1)));
        return 1;
    }
    n = kc_read_uvarint64(p, end, &raw);
    if (n > 0) *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1)));
    return n;
}

/*
 * Readers without an end check, for record walks that have already checked that enough
 * bytes follow p: 5 readable bytes for the 32-bit forms, 10 for the 64-bit ones.  They
 * read only bytes of the varint itself (never past its last byte or the 5th / 10th), and
 * return what the checked readers return whenever the varint ends before their `end`;
 * the caller must still check that the bytes consumed stay inside its record.
 */
static inline int kc_read_varint32_nb(const uint8_t *p, int32_t *out) {
    uint32_t raw = p[0];
    int n = 1;
    if (raw & 0x80) {
        uint32_t b = p[1];
        raw = (raw & 0x7F) | ((b & 0x7F) << 7);
        n = 2;
        if (b & 0x80) {
            b = p[2];
            raw |= (b & 0x7F) << 14;
            n = 3;
            if (b & 0x80) {
                b = p[3];
                raw |= (b & 0x7F) << 21;
                n = 4;
                if (b & 0x80) {
                    b = p[4];
                    if (b >> 4) return -1;
                    raw |= b << 28;
                    n = 5;
                }
            }
        }
    }
    *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1)));
    return n;
}

static inline int kc_read_varint64_nb(const uint8_t *p, int64_t *out) {
    uint64_t raw = p[0];
    int n = 1;
    if (raw & 0x80) {
        raw &= 0x7F;
        for (int i = 1;; i++) {
            uint64_t b = p[i];
            if (i == 9 && (b >> 1)) return -1;
            raw |= (b & 0x7F) << (7 * i);
            if (!(b & 0x80)) {
                n = i + 1;
                break;
            }
        }
    }
    *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1)));
    return n;
}

static inline int kc_write_uvarint64(uint8_t *p, uint64_t value) {
    int n = 0;
    while (value > 0x7F) {
        p[n++] = (uint8_t)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    p[n++] = (uint8_t)value;
    return n;
}

static inline int kc_size_uvarint64(uint64_t value) {
    int n = 1;
    while (value > 0x7F) {
        value >>= 7;
        n++;
    }
    return n;
}

static inline uint32_t kc_zigzag32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
static inline uint64_t kc_zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

/* Size and write of the record-level signed forms. */
static inline int kc_size_varint32(int32_t v) { return kc_size_uvarint64(kc_zigzag32(v)); }
static inline int kc_size_varint64(int64_t v) { return kc_size_uvarint64(kc_zigzag64(v)); }
static inline int kc_write_varint32(uint8_t *p, int32_t v) { return kc_write_uvarint64(p, kc_zigzag32(v)); }
static inline int kc_write_varint64(uint8_t *p, int64_t v) { return kc_write_uvarint64(p, kc_zigzag64(v)); }

/* Big-endian fixed-width stores and loads for batch headers. */
static inline void kc_put_be16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static inline void kc_put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static inline void kc_put_be64(uint8_t *p, uint64_t v) {
    kc_put_be32(p, (uint32_t)(v >> 32));
    kc_put_be32(p + 4, (uint32_t)v);
}
static inline uint16_t kc_get_be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t kc_get_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline uint64_t kc_get_be64(const uint8_t *p) {
    return ((uint64_t)kc_get_be32(p) << 32) | kc_get_be32(p + 4);
}

#endif /* KC_VARINT_H */
