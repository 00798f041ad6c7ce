/* Sums 1..100 with a loop of 100 additions and prints the total (5050). */
#include "deltachip.h"

int main(void) {
    int total = 0;
    for (int i = 1; i <= 100; i++) {
        total += i;
        /* An empty asm that "changes" total: the compiler must keep the loop instead of
         * folding it into the closed form n(n+1)/2. */
        __asm__ volatile("" : "+r"(total));
    }
    printf("%d\n", total);
    return 0;
}
