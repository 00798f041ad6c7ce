/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) of a string, with a lookup table
 * built at start-up: prints "414fa339" for the pangram below. */
#include "deltachip.h"

static uint32_t table[256];

static void make_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[n] = c;
    }
}

static uint32_t crc32(const char *s, size_t len) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) c = table[(c ^ (unsigned char)s[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

int main(void) {
    static const char text[] = "The quick brown fox jumps over the lazy dog";
    make_table();
    printf("%08x\n", crc32(text, strlen(text)));
    return 0;
}
