/* Integer matrix products: A and B are 16x16 int32 matrices from a 32-bit LCG (seed 7,
 * entries in -1000..999), C = A * B and D = C * A (arithmetic mod 2^32); prints C's trace,
 * the checksum sum((16 * i + j + 1) * D[i][j]) mod 2^32 in hex and D[15][15]. */
#include "deltachip.h"

#define N 16
static int32_t A[N][N], B[N][N], C[N][N], D[N][N];

static void multiply(int32_t out[N][N], int32_t x[N][N], int32_t y[N][N]) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            uint32_t acc = 0;                     /* unsigned: wraps mod 2^32, no overflow UB */
            for (int k = 0; k < N; k++) acc += (uint32_t)x[i][k] * (uint32_t)y[k][j];
            out[i][j] = (int32_t)acc;
        }
}

int main(void) {
    uint32_t s = 7;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            s = s * 1103515245u + 12345u;
            A[i][j] = (int32_t)((s >> 16) % 2000) - 1000;
            s = s * 1103515245u + 12345u;
            B[i][j] = (int32_t)((s >> 16) % 2000) - 1000;
        }
    multiply(C, A, B);
    multiply(D, C, A);
    uint32_t trace = 0, checksum = 0;
    for (int i = 0; i < N; i++) {
        trace += (uint32_t)C[i][i];
        for (int j = 0; j < N; j++) checksum += (uint32_t)(N * i + j + 1) * (uint32_t)D[i][j];
    }
    printf("trace %d checksum %08x last %d\n", (int32_t)trace, checksum, D[N - 1][N - 1]);
    return 0;
}
