/* Multiplies 12345 by 6789 by repeated addition (6789 additions) and prints 83810205. */
#include "deltachip.h"

int main(void) {
    int product = 0;
    for (int i = 0; i < 6789; i++) {
        product += 12345;
        __asm__ volatile("" : "+r"(product));   /* keep the loop: no product = 12345 * i */
    }
    printf("%d\n", product);
    return product == 83810205 ? 0 : 1;
}
