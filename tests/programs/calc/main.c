#include <stdio.h>
#include <stdlib.h>
#include "calc.h"

int main(int argc, char **argv) {
    const char *exprs[] = {"1+2*3", "10-4-3", "7*6", "100/7+1"};
    for (int i = 0; i < 4; i++)
        printf("%s = %ld\n", exprs[i], evaluate(exprs[i]));
    const char *words[] = {"thin", "lto", "cache"};
    char *joined = join_words(words, 3);
    printf("joined %s checksum %u\n", joined, checksum(joined));
    free(joined);
    return argc > 1 ? atoi(argv[1]) : 0;
}
