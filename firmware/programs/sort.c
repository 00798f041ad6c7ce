/* Sorts 256 pseudo-random words (a 32-bit LCG, seed 12345) with quicksort, checks the
 * order, and prints the checksum sum(i * a[i]) mod 2^32 in hex and the minimum and
 * maximum. Exit code 1 if the array is not sorted. */
#include "deltachip.h"

#define N 256
static uint32_t data[N];

static void quicksort(uint32_t *a, int lo, int hi) {
    while (lo < hi) {
        uint32_t pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) { uint32_t t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        /* recurse into the smaller half, loop on the larger: O(log n) stack */
        if (j - lo < hi - i) { quicksort(a, lo, j); lo = i; }
        else { quicksort(a, i, hi); hi = j; }
    }
}

int main(void) {
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = x >> 8;
    }
    quicksort(data, 0, N - 1);
    uint32_t checksum = 0;
    int sorted = 1;
    for (int i = 0; i < N; i++) {
        checksum += (uint32_t)i * data[i];
        if (i > 0 && data[i - 1] > data[i]) sorted = 0;
    }
    printf("checksum %08x min %u max %u\n", checksum, data[0], data[N - 1]);
    return sorted ? 0 : 1;
}
