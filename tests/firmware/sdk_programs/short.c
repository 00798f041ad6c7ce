/* A short C SDK program for the compiled core (--engine sim): string.h and a heap block,
 * printed with puts (no printf: keeps it to a few hundred instructions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    char *s = malloc(16);
    if (!s) return 1;
    strcpy(s, "sdk");
    strcat(s, " ok");
    puts(s);
    int n = (int)strlen(s);
    free(s);
    return n;
}
