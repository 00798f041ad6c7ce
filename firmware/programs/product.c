/* Multiplies 12345 by 6789 with one mul and prints 83810205, digit by digit (no printf): a
 * program short enough to watch run inside the compiled core (scripts/demo.sh). */
#include "deltachip.h"

int main(void) {
    volatile unsigned a = 12345, b = 6789;     /* volatile: computed at run time */
    unsigned p = a * b;
    char digits[10];
    int n = 0;
    do {
        digits[n++] = (char)('0' + p % 10);
        p /= 10;
    } while (p);
    while (n)
        putchar(digits[--n]);
    putchar('\n');
    return 0;
}
