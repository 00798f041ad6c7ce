/* Sieve of Eratosthenes below 10000: prints the count of primes (1229), their sum
 * (5736396) and the largest (9973). */
#include "deltachip.h"

#define LIMIT 10000
static unsigned char composite[LIMIT];

int main(void) {
    unsigned count = 0, sum = 0, largest = 0;
    for (unsigned i = 2; i < LIMIT; i++) {
        if (composite[i]) continue;
        count++;
        sum += i;
        largest = i;
        for (unsigned j = i * i; j < LIMIT; j += i) composite[j] = 1;
    }
    printf("primes %u sum %u largest %u\n", count, sum, largest);
    return 0;
}
