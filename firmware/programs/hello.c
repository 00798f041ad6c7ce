/* Prints a greeting and the printf subset in action. Expected output: tests/firmware. */
#include "deltachip.h"

int main(void) {
    puts("Hello from deltachip!");
    printf("%d %u %x %s %c|%5d|%-5d|%05d|%08x\n", -42, 42u, 0xbeefu, "str", 'c', 7, 7, -7, 0xabcu);
    return 0;
}
