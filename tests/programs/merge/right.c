extern int g(int);
extern int h(int, int);

int right(int a, int b) {
    int s = h(a, b) + g(a * 5);
    s += g(b + 9);
    s ^= h(s, 21);
    return s + g(s) * 17;
}
