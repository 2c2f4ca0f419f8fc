#include "calc.h"

unsigned checksum(const char *s) {
    unsigned h = 2166136261u;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

int word_length(const char *s) {
    int n = 0;
    while (s[n] && s[n] != ' ')
        n++;
    return n;
}
