/* 64-bit division and remainder, signed and unsigned, through the compiler-rt / libgcc
 * helpers (__udivdi3, __divdi3, __umoddi3, __moddi3). Prints one line per case:
 * "a / b = q r m" with C's truncating semantics. */
#include "deltachip.h"

static const long long signed_cases[][2] = {
    {123456789012345678LL, 987654321LL},
    {-9000000000000000000LL, 7LL},
    {9000000000000000000LL, -1000000007LL},
    {-5LL, 3LL},
    {(long long)0x8000000000000000ULL, -3LL},
};
static const unsigned long long unsigned_cases[][2] = {
    {0xFFFFFFFFFFFFFFFFULL, 10ULL},
    {0xFFFFFFFFFFFFFFFFULL, 0x100000001ULL},
    {1ULL << 63, 3ULL},
    {12345ULL, 0xFFFFFFFFFFFFULL},
};

int main(void) {
    for (unsigned i = 0; i < sizeof signed_cases / sizeof signed_cases[0]; i++) {
        volatile long long a = signed_cases[i][0], b = signed_cases[i][1];
        printf("%lld / %lld = %lld r %lld\n", a, b, a / b, a % b);
    }
    for (unsigned i = 0; i < sizeof unsigned_cases / sizeof unsigned_cases[0]; i++) {
        volatile unsigned long long a = unsigned_cases[i][0], b = unsigned_cases[i][1];
        printf("%llu / %llu = %llu r %llx\n", a, b, a / b, a % b);
    }
    return 0;
}
