#include "shapes.hpp"

// pi as 355/113, in integers: no floating point, so no _fltused from a C library.
int Circle::area() const { return scaled(radius, radius) * 355 / 113; }
