/* Reads the input stream from the UART byte by byte and prints it back with every 'a'
 * made 'A'; then reads on past the end (0 bytes, as lb too), and exits with the count of
 * bytes read plus 1000 when a signed read of a byte >= 0x80 came back negative. */
#include "deltachip.h"

int main(void) {
    int n = 0, neg = 0, c;
    while ((c = read_input_byte()) != 0) {
        if (c >= 0x80) {
            /* (the stream has moved on: this only checks lb's sign on the next byte) */
            signed char s = *(volatile signed char *)DELTACHIP_UART_RX;
            if (s < 0) neg = 1000;
            n++;
            if (s == 0) break;
        }
        putchar(c == 'a' ? 'A' : c);
        n++;
    }
    for (int i = 0; i < 3; i++)
        if (read_input_byte() != 0) return -1;
    return n + neg;
}
