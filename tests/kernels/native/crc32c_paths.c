/* Checks every CRC-32C path of ext/kc_crc32c.h against the portable tables over sizes
 * around the interleaving boundaries and several alignments; prints the path used.
 * Built and run by tests/test_crc32c_builds.py, for the host, for the portable-only
 * build (-DKC_CRC_NO_HW) and, where a cross compiler and qemu exist, for aarch64. */
#include <stdio.h>
#include <stdlib.h>

#include "kc_crc32c.h"

static uint8_t buf[(1 << 20) + 8];

int main(void) {
    /* around the 3-way blocks (3 x 256, 3 x 8192), the folding (256, steps of 128) and its
     * blocks with the interleaved streams (15872) */
    static const size_t sizes[] = {0,     1,     7,     8,     9,     255,   256,   257,   383,
                                   384,   385,   767,   768,   769,   15871, 15872, 15873, 16127,
                                   16128, 16129, 24575, 24576, 24577, 31744, 31999, 70001, 1 << 20};
    const char *check = "123456789";
    kc_crc32c_init();
    srand(3);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rand();
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (size_t off = 0; off < 4; off++) {
            uint32_t init = off & 1 ? 0xFFFFFFFFu : 0x9E3779B9u * (uint32_t)(s + 1);
            uint32_t fast = kc_crc32c_update(init, buf + off, sizes[s]);
            uint32_t slow = kc_crc32c_sw(init, buf + off, sizes[s]);
            if (fast != slow) {
                printf("mismatch at size %zu offset %zu\n", sizes[s], off);
                return 1;
            }
        }
    }
    uint32_t crc = kc_crc32c_update(0xFFFFFFFFu, (const uint8_t *)check, 9) ^ 0xFFFFFFFFu;
    printf("%s %08x\n", kc_crc32c_hardware_name(), crc);
    return crc != 0xE3069283u;
}
