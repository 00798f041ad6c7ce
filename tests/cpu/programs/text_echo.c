/* Reads the text stream token by token (UART_TNEXT, UART_TXT) and prints each token's
 * bytes between '[' and ']'; a token longer than the window prints '!' and its length.
 * Then checks what reads past the end give: bytes past a token's length, the same byte
 * twice (reads do not consume), lb's sign on a byte >= 0x80, and UART_TNEXT once the text
 * is used up (0, twice). Exits with the number of tokens, plus 1000 when a signed read of
 * a byte >= 0x80 came back negative. */
#include "deltachip.h"

int main(void) {
    int tokens = 0, neg = 0, n;
    if (read_text_byte(3) != 0) return -2;          /* before the first token: 0 */
    while ((n = read_text_next()) != 0) {
        tokens++;
        if (n > DELTACHIP_TEXT_BYTES) {
            putchar('!');
            putchar('0' + n / 10 % 10);
            putchar('0' + n % 10);
            continue;
        }
        putchar('[');
        for (int j = 0; j < n; j++) {
            int c = read_text_byte(j);
            if (c != read_text_byte(j)) return -3;
            if (c >= 0x80 && ((volatile signed char *)DELTACHIP_UART_TXT)[j] < 0) neg = 1000;
            putchar(c);
        }
        if (n < DELTACHIP_TEXT_BYTES && read_text_byte(n) != 0) return -4;
        putchar(']');
    }
    if (read_text_next() != 0 || read_text_byte(0) != 0) return -5;
    return tokens + neg;
}
