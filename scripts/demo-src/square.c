#include "shapes.h"

double square_area(double side) { return side * side; }
