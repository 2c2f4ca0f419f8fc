#include <stdlib.h>
#include <string.h>
#include "calc.h"

unsigned checksum(const char *s) {
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

char *join_words(const char **words, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(words[i]) + 1;
    char *out = malloc(len);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i) strcat(out, "-");
        strcat(out, words[i]);
    }
    return out;
}
