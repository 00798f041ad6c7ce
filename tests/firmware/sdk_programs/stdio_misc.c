/* More of stdio/stdlib on the C SDK: sscanf, getchar from the run's input, fopen (no files:
 * NULL), errno from strtol, and an atexit handler run after main returns. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <errno.h>
static void bye(void) { puts("bye"); }
int main(void) {
    char *s = malloc(32);
    snprintf(s, 32, "%.6f", sqrt(2.0));
    printf("%s %g %x\n", s, pow(2.0, 0.5), 255);
    free(s);
    int a = 0, b = 0; sscanf("12 34", "%d %d", &a, &b);
    int c = getchar(), d = getchar();
    FILE *f = fopen("x", "r");
    errno = 0; strtol("99999999999", 0, 10);
    printf("%d %d %c %d %s %d\n", a, b, c, d, f ? "file" : "nofile", errno == ERANGE);
    atexit(bye);
    return 0;
}
