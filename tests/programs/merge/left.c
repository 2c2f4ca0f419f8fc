extern int g(int);
extern int h(int, int);

int g(int x) { return x * 7 + 1; }
int h(int x, int y) { return (x ^ y) + 3; }

int left(int a, int b) {
    int s = h(a, b) + g(a * 3);
    s += g(b + 7);
    s ^= h(s, 11);
    return s + g(s) * 13;
}

int work(int x) {
    int s = 0;
    for (int j = 0; j < x % 13; j++)
        s += (j + x) % 7 == 0 ? (j + x) * 3 : (j + x) % 5 == 1 ? j - 2 : j + 1;
    return s;
}
