/* AES-128 encryption (FIPS-197), S-box built at start-up: prints the ciphertext of FIPS-197
 * appendix C.1 (69c4e0d86a7b0430d8cdb78070b4c55a), then the four CBC ciphertext blocks of
 * the 64 bytes 00 01 .. 3f under the same key with IV 0f 0e .. 00, one block a line. */
#include "deltachip.h"

static uint8_t sbox[256];
static uint8_t round_keys[176];

static uint8_t rotl8(uint8_t x, int n) { return (uint8_t)(x << n | x >> (8 - n)); }
static uint8_t xtime(uint8_t x) { return (uint8_t)(x << 1 ^ (x & 0x80 ? 0x1B : 0)); }

/* p walks the multiplicative group by 3, q by its inverse 1/3: q = 1/p. */
static void make_sbox(void) {
    uint8_t p = 1, q = 1;
    do {
        p = p ^ xtime(p);
        q ^= q << 1; q ^= q << 2; q ^= q << 4;
        if (q & 0x80) q ^= 0x09;
        sbox[p] = q ^ rotl8(q, 1) ^ rotl8(q, 2) ^ rotl8(q, 3) ^ rotl8(q, 4) ^ 0x63;
    } while (p != 1);
    sbox[0] = 0x63;
}

static void expand_key(const uint8_t key[16]) {
    uint8_t rcon = 1;
    memcpy(round_keys, key, 16);
    for (int i = 16; i < 176; i += 4) {
        uint8_t t[4] = {round_keys[i - 4], round_keys[i - 3], round_keys[i - 2], round_keys[i - 1]};
        if (i % 16 == 0) {
            uint8_t first = t[0];
            t[0] = sbox[t[1]] ^ rcon; t[1] = sbox[t[2]]; t[2] = sbox[t[3]]; t[3] = sbox[first];
            rcon = xtime(rcon);
        }
        for (int j = 0; j < 4; j++) round_keys[i + j] = round_keys[i - 16 + j] ^ t[j];
    }
}

static void encrypt(uint8_t s[16]) {
    for (int i = 0; i < 16; i++) s[i] ^= round_keys[i];
    for (int round = 1; round <= 10; round++) {
        uint8_t t[16];
        for (int i = 0; i < 16; i++)            /* SubBytes and ShiftRows: row r moves left r */
            t[i] = sbox[s[(i + 4 * (i % 4)) % 16]];
        if (round < 10) {
            for (int c = 0; c < 16; c += 4) {   /* MixColumns */
                uint8_t a0 = t[c], a1 = t[c + 1], a2 = t[c + 2], a3 = t[c + 3];
                uint8_t all = a0 ^ a1 ^ a2 ^ a3;
                t[c] ^= all ^ xtime(a0 ^ a1);
                t[c + 1] ^= all ^ xtime(a1 ^ a2);
                t[c + 2] ^= all ^ xtime(a2 ^ a3);
                t[c + 3] ^= all ^ xtime(a3 ^ a0);
            }
        }
        for (int i = 0; i < 16; i++) s[i] = t[i] ^ round_keys[16 * round + i];
    }
}

static void print_block(const uint8_t b[16]) {
    for (int i = 0; i < 16; i++) printf("%02x", b[i]);
    printf("\n");
}

int main(void) {
    uint8_t key[16], block[16], chain[16];
    for (int i = 0; i < 16; i++) {
        key[i] = (uint8_t)i;
        block[i] = (uint8_t)(0x11 * i);
        chain[i] = (uint8_t)(15 - i);
    }
    make_sbox();
    expand_key(key);
    encrypt(block);
    print_block(block);
    for (int j = 0; j < 4; j++) {
        for (int i = 0; i < 16; i++) chain[i] ^= (uint8_t)(16 * j + i);
        encrypt(chain);
        print_block(chain);
    }
    return 0;
}
