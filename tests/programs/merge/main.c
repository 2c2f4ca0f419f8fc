/* A small program for the key-hole tests (tests/test_key_holes.py): branches and loops for
   profiles to steer, and look-alike functions in two modules for function merging with
   codegen data (CGData) to find. */
#include <stdio.h>

int left(int a, int b);
int right(int a, int b);
int work(int x);

int main(void) {
    int s = 0;
    for (int i = 0; i < 200; i++)
        s += work(i) + left(i, 3) - right(i, 5);
    printf("checksum %d\n", s);
    return 0;
}
