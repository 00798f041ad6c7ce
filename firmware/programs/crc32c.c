/* CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78) computed bit by bit, without a
 * table: prints the check value of "123456789" (e3069283) and the CRC-32C of 512 bytes made
 * by a 32-bit LCG (seed 2024, each byte the state's bits 16..23). */
#include "deltachip.h"

#define N 512
static uint8_t data[N];

static uint32_t crc32c(const uint8_t *p, size_t len) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return c ^ 0xFFFFFFFFu;
}

int main(void) {
    static const char check[] = "123456789";
    uint32_t x = 2024;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        data[i] = (uint8_t)(x >> 16);
    }
    printf("%08x\n", crc32c((const uint8_t *)check, strlen(check)));
    printf("%08x\n", crc32c(data, N));
    return 0;
}
