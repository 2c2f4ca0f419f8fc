#include "calc.h"

static const long limits[4] = {1000000, -1000000, 0, 1};

long apply(int op, long a, long b) {
    long r;
    switch (op) {
    case '+': r = a + b; break;
    case '-': r = a - b; break;
    case '*': r = a * b; break;
    case '/': r = b ? a / b : 0; break;
    default: r = 0;
    }
    return r > limits[0] ? limits[0] : r < limits[1] ? limits[1] : r;
}
