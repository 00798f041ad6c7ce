/* assert.h on the C SDK: a passing assert, then a failing one, which prints the file, line,
 * function and expression on the UART and ends the program through abort(). */
#include <assert.h>
#include <stdio.h>

static int checked_div(int a, int b) {
    assert(b != 0);
    return a / b;
}

int main(void) {
    printf("%d\n", checked_div(42, 6));
    printf("%d\n", checked_div(1, 0));
    return 0;
}
