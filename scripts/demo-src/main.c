#include "shapes.h"

int main(void) {
    report("square", square_area(3.0));
    report("circle", circle_area(2.0));
    return 0;
}
