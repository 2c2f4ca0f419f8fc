#include "calc.h"

const char *const expressions[] = {"1+2*3", "10-4-3", "7*6", "100/7+1", 0};

int main(void) {
    long total = 0;
    for (int i = 0; expressions[i]; i++)
        total += evaluate(expressions[i]);
    return (int)((total + checksum(expressions[2]) + evaluations) & 0x7f);
}
