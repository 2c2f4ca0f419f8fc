#include "calc.h"

long apply(int op, long a, long b) {
    switch (op) {
    case '+': return a + b;
    case '-': return a - b;
    case '*': return a * b;
    case '/': return b ? a / b : 0;
    }
    return 0;
}
