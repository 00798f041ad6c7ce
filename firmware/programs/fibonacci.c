/* Prints the Fibonacci numbers F(0) to F(40) = 102334155, one per line. */
#include "deltachip.h"

int main(void) {
    volatile unsigned count = 41;
    unsigned a = 0, b = 1;
    for (unsigned n = 0; n < count; n++) {
        printf("%u\n", a);
        unsigned next = a + b;
        a = b;
        b = next;
    }
    return 0;
}
