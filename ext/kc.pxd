# Declarations of the C helpers in ext/*.h shared by the kraftcore._c modules.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int32_t, int64_t

cdef extern from "kc_crc32c.h":
    void kc_crc32c_init()
    uint32_t kc_crc32c_update(uint32_t crc, const uint8_t *p, size_t n) nogil
    uint32_t kc_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) nogil
    const char *kc_crc32c_hardware_name()

cdef extern from "kc_varint.h":
    int kc_read_uvarint32(const uint8_t *p, const uint8_t *end, uint32_t *out) nogil
    int kc_read_uvarint64(const uint8_t *p, const uint8_t *end, uint64_t *out) nogil
    int kc_read_varint32(const uint8_t *p, const uint8_t *end, int32_t *out) nogil
    int kc_read_varint64(const uint8_t *p, const uint8_t *end, int64_t *out) nogil
    int kc_write_uvarint64(uint8_t *p, uint64_t value) nogil
    int kc_size_uvarint64(uint64_t value) nogil
    int kc_size_varint32(int32_t v) nogil
    int kc_size_varint64(int64_t v) nogil
    int kc_write_varint32(uint8_t *p, int32_t v) nogil
    int kc_write_varint64(uint8_t *p, int64_t v) nogil
    uint32_t kc_zigzag32(int32_t v) nogil
    uint64_t kc_zigzag64(int64_t v) nogil
    void kc_put_be16(uint8_t *p, uint16_t v) nogil
    void kc_put_be32(uint8_t *p, uint32_t v) nogil
    void kc_put_be64(uint8_t *p, uint64_t v) nogil
    uint16_t kc_get_be16(const uint8_t *p) nogil
    uint32_t kc_get_be32(const uint8_t *p) nogil
    uint64_t kc_get_be64(const uint8_t *p) nogil

# The header fields of one checked batch, filled by kraftcore._c.records' `_check_batch`,
# which other modules reach through the `_check_batch_capsule` PyCapsule.
cdef struct kc_batch_info:
    int64_t base_offset
    int32_t batch_length
    int32_t partition_leader_epoch
    int32_t last_offset_delta
    int64_t max_timestamp

ctypedef int (*kc_check_batch_fn)(const uint8_t *data, Py_ssize_t pos, Py_ssize_t total,
                                  int verify_records, kc_batch_info *out) except -1

cdef extern from *:
    """
    #define KC_CHECK_BATCH_CAPSULE "kraftcore._c.records._check_batch"
    """
    const char *KC_CHECK_BATCH_CAPSULE
